"""How the policy file and the command line write things: words defined once, sizes and durations,
YAML with positions."""
