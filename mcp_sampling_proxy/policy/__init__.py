"""Pure judging, no I/O: rules and their conditions, the decision, size caps (services/assess.py applies them)."""
