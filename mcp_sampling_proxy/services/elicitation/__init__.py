"""Serve `elicitation/create` for hosts that can't, and govern it for hosts that can: one request
through its stages, in this order, one module each.

1. judge (`judge.py`): validation (`request.py`), then the policy: rules with `method: elicitation`
   apply, and deny answers `{"action": "decline"}` (never an error)
2. limits: the rule's rate limit and concurrency (`quotas/limiters.py`), refusing the same way
3. route (`route.py`, `elicitation.route`): `auto` forwards to the host when it declared the
   requested mode, else asks on a console (the terminal, else the companion console), else answers
   by policy
4. auto-answer (`auto.py`): an `elicitation.auto_answers` entry that applies `always` answers here
5. the form (`form.py`): a form that asks for secrets (which the spec forbids in form mode) gets the
   `sensitive_form` action
6. ask (`ask.py`): the host's own form with the server's words marked as the server's, a console,
   or, when nobody can be asked, a `headless` auto-answer or `non_interactive` (decline, cancel or
   accept_defaults)
7. record: one audit record for every ending, written by `service.py`

URLs are never fetched: they are shown with their host highlighted and warnings, and opened in the
user's browser only after consent. A stage that answers for the proxy (the policy, a limit, an
auto-answer, nobody to ask) raises `Answered` (`ended.py`); the host and the consoles end in an
`Ending`; `service.py` runs the stages and records how each request ended.
"""
