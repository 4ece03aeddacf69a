#!/usr/bin/env python3
"""One whole host session through a proxy, as one process to time from outside.

Starts a loopback OpenAI-compatible LLM, launches `PYTHON -m mcp_sampling_proxy` in front of the
kitchen-sink server (as a host would), initializes with the `mcp` SDK's Client, makes `--calls`
tools/call round trips and `--samples` tool calls that sample through the proxy, then closes. The
proxy's start-up, relay and sampling path all count; the host's own cost is the same for every
proxy it is pointed at.

To compare two checkouts (a change against the commit before it), give each its interpreter and
time the two whole commands in turn with an outside timer (for example hyperfine, or
`/usr/bin/time -v` in a loop), quoting the paired ratio of medians:

    .venv/bin/python bench/host_session.py --python OLD_CHECKOUT/.venv/bin/python
    .venv/bin/python bench/host_session.py --python .venv/bin/python

`--python` must be an interpreter where `mcp_sampling_proxy` imports from the checkout to measure
(its editable install). Exit status 0 only when every call answered as expected.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fakes.llm_server import FakeLLMServer  # noqa: E402  (the tests' loopback LLM, found beside this file)
from scratch_dirs import scratch_dirs  # noqa: E402

SERVER = str(ROOT / "tests" / "fixtures" / "kitchen_sink_server.py")
POLICY = """\
llm:
  providers:
    fake:
      type: openai
      base_url: {base_url}
      api_key_env: BENCH_LLM_KEY
      models: [fake-gpt-4o-mini]
sandbox: off
audit:
  path: {audit}
rules:
  - name: allow-all
    action: allow
"""


async def session(python: str, calls: int, samples: int, workdir: Path, policy_extra: str) -> None:
    llm = FakeLLMServer("openai")
    try:
        policy = workdir / "policy.yaml"
        text = POLICY.format(base_url=llm.base_url, audit=workdir / "audit.jsonl") + policy_extra
        policy.write_text(text, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "MCP_SAMPLING_"))}
        env.update(BENCH_LLM_KEY="bench-key", MCP_SAMPLING_PROXY_NO_TERMINAL="1", **scratch_dirs(workdir))
        command = [python, "-m", "mcp_sampling_proxy", "--policy", str(policy), "--", sys.executable, SERVER]
        # cwd: not the checkout, whose package `-m` would import ahead of the interpreter's own
        params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=str(workdir))
        with open(workdir / "stderr.log", "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                for i in range(calls):
                    result = await client.call_tool("echo", {"text": f"ping {i}"})
                    if result.is_error:
                        raise SystemExit(f"echo failed: {result}")
                for i in range(samples):
                    result = await client.call_tool("sample", {"prompt": f"hello {i}", "max_tokens": 16})
                    text = result.content[0].text if result.content else ""
                    if result.is_error or "content" not in json.loads(text):
                        raise SystemExit(f"sampling failed: {text}")
    finally:
        llm.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs the proxy")
    parser.add_argument("--calls", type=int, default=50, help="tools/call round trips (default 50)")
    parser.add_argument("--samples", type=int, default=5, help="tool calls that sample (default 5)")
    parser.add_argument(
        "--policy-extra",
        default="",
        help="YAML appended to the policy, to time one feature off (e.g. 'sampling: {on_secret: allow}')",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="host-session-") as workdir:
        try:
            anyio.run(
                session, os.path.abspath(args.python), args.calls, args.samples, Path(workdir), args.policy_extra + "\n"
            )
        except BaseException:
            stderr = Path(workdir, "stderr.log")
            if stderr.exists():  # the proxy's own account of why the session failed
                sys.stderr.write(stderr.read_text(errors="replace")[-4000:])
            raise


if __name__ == "__main__":
    main()
