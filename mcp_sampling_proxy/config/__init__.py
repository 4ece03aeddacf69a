"""The policy file and the other start-up inputs: settings, YAML nodes, keys, the child's environment."""
