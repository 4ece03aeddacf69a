"""Pure judging, no I/O: rules and conditions, size caps, model choice, the judging pipeline."""
