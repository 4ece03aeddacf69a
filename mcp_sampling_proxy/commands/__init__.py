"""The command line: the proxy itself and its subcommands."""
