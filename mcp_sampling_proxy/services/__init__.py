"""The server requests the proxy answers: judged (assess.py), then sampling, elicitation, input_required rounds."""
