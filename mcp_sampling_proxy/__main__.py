"""`python -m mcp_sampling_proxy` runs the same CLI as the console script."""

from mcp_sampling_proxy.entry import main

if __name__ == "__main__":
    raise SystemExit(main())
