"""The hash-chained audit log: records, the chained file, reading it back (keys are masked by redact.py)."""
