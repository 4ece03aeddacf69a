"""Pure judging, no I/O: rules and their conditions, the decision, size caps (serve/assess.py applies them)."""
