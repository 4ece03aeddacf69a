"""The hash-chained audit log and the redaction of what it records."""
