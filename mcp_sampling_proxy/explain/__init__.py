"""`policy explain`: what the policy decides for one request and what then happens, as text;
`commands/policy.py` parses the command line and prints it."""
