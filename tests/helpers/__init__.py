"""What the tests share: starting the proxy, loopback LLMs, the npm and Python peers, fuzzing."""
