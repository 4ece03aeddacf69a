"""Rate limits, concurrency and token budgets, and the state they share across proxies."""
