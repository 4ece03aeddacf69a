"""The server requests the proxy answers: sampling, elicitation, 2026-era input_required rounds."""
