"""Serve `sampling/createMessage`: one request through its stages, in this order, one module each.

1. judge (`judge.py`): the host call it belongs to, the size caps, validation and the policy
   (`services/assess.py`, which `policy explain` runs too), credentials in the prompt
2. limits (`limits.py`): the rule's rate limit and concurrency, then its budget, reserved at the
   request's worst case (its survey's, policy/survey.py) and settled with what the LLM used
3. checks (`checks.py`): the rule's external checks on the request
4. approve (`approve.py`): a human, when the rule says prompt
5. route (`route.py`): the host, when it can sample, else
6. fulfil (`fulfil.py`): our own LLM, within the proxy's concurrency gate
7. review (`review.py`): the rule's checks on the answer, credentials in it, a human's review
8. record: one audit record for every ending (`services/opening.py` opens it; the stage where the
   request ends writes it)

`service.py` runs them. A stage ends the request by raising `Ended` (`ended.py`), whose audit
outcome and error the service records and returns to the server.
"""
