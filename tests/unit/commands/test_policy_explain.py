"""`mcp-sampling-proxy policy explain FILE --request REQUEST.json`, run in process as the command line runs
it (helpers.support.run_subcommand: its exit status, stdout and stderr)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.support import CommandRun, run_subcommand, write_policy

POLICY = """\
llm:
  providers:
    openai:
      type: openai
      models: [gpt-4o-mini, gpt-4o]
limits:
  max_tokens: 4000
  max_text_bytes: 512KiB
rules:
  - name: no-images
    when: {content: image}
    action: deny
    message: no images, please
  - name: notes-summaries
    when:
      server: "notes*"
      tool: ["summ*", none]
      not: {text_matches: "(?i)password"}
    action: allow
    rate_limit: {requests: 10, per: 1m, concurrent: 2}
    budget: {tokens: 100000, per: 1d}
    limits: {max_tokens: 1000, max_tokens_action: deny, max_media_bytes: 2MiB}
    model: gpt-4o
  - name: big
    when: {max_tokens_over: 2000}
    action: deny
"""

PARAMS = {
    "messages": [{"role": "user", "content": {"type": "text", "text": "summarise my notes"}}],
    "maxTokens": 500,
    "modelPreferences": {"hints": [{"name": "claude"}]},
}


def explain(
    tmp_path: Path, *args: str, policy: str = POLICY, request: Any = PARAMS, raw: str | None = None
) -> CommandRun:
    policy_path = write_policy(tmp_path, policy)
    request_path = tmp_path / "request.json"
    request_path.write_text(raw if raw is not None else json.dumps(request), encoding="utf-8")
    return run_subcommand(["policy", "explain", policy_path, "--request", str(request_path), *args])


def test_a_matching_rule_with_its_limits(tmp_path: Path) -> None:
    result = explain(tmp_path, "--server", "notes-app", "--tool", "summarize", "--host", "claude-ai")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert (
        result.stdout
        == f"""\
policy: {tmp_path / "policy.yaml"} (3 rules)
request: sampling from server 'notes-app', host 'claude-ai', during tool call 'summarize'
  model hints: claude; max_tokens: 500; messages: 1; content: text; include_context: none
rule 'no-images' (line 10): skipped: content has no image (it has text)
rule 'notes-summaries' (line 14): MATCHES -> allow
  because server 'notes-app' matches 'notes*' and tool 'summarize' matches 'summ*' and text does not match \
/(?i)password/
limits that apply:
  max_messages: 256
  max_text_bytes: 512 KiB
  max_media_bytes: 2 MiB (rule 'notes-summaries')
  max_request_bytes: 16 MiB
  max_tokens: 1000 (over it: deny) (rule 'notes-summaries')
  max_tools: 128
  rate_limit: 10 requests per 1m, at most 2 at a time
  budget: 100000 tokens per 1d
  provider/model: openai/gpt-4o: rule 'notes-summaries' sets provider/model
sampling checks (the sampling: section, whatever rule matches):
  max_per_call: 25 sampling requests per host request; past it: refused
  allow_unsolicited: false: not needed, the request comes inside a host tool call
  on_secret: redact: credentials in the LLM's answer are masked before the server gets it
  scan_requests: false: the server's request is not scanned for credentials
"""
    )


def test_no_rule_matches_so_prompt_with_the_top_level_limits(tmp_path: Path) -> None:
    # the whole JSON-RPC request works as well as its params
    request = {"jsonrpc": "2.0", "id": 7, "method": "sampling/createMessage", "params": PARAMS}
    result = explain(tmp_path, "--server", "mail", "--tool", "send", request=request)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == "request: sampling from server 'mail', host '' (no --host given), during tool call 'send'"
    assert lines[3:] == [
        "rule 'no-images' (line 10): skipped: content has no image (it has text)",
        "rule 'notes-summaries' (line 14): skipped: server 'mail' does not match 'notes*'",
        "rule 'big' (line 24): skipped: max_tokens 500 is not over 2000",
        "no rule matched -> prompt (default)",
        "limits that apply:",
        "  max_messages: 256",
        "  max_text_bytes: 512 KiB",
        "  max_media_bytes: 8 MiB",
        "  max_request_bytes: 16 MiB",
        "  max_tokens: 4000 (over it: clamp)",
        "  max_tools: 128",
        "  rate_limit: none",
        "  budget: none",
        "  provider/model: openai/gpt-4o-mini: hint 'claude' matched no model; default model of provider 'openai'",
        "sampling checks (the sampling: section, whatever rule matches):",
        "  max_per_call: 25 sampling requests per host request; past it: refused",
        "  allow_unsolicited: false: not needed, the request comes inside a host tool call",
        "  on_secret: redact: credentials in the LLM's answer are masked before the server gets it",
        "  scan_requests: false: the server's request is not scanned for credentials",
    ]


def test_a_deny_stops_at_the_rule_and_shows_the_message(tmp_path: Path) -> None:
    params = {
        **PARAMS,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
                ],
            }
        ],
    }
    result = explain(tmp_path, "--server", "notes", request=params)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2:] == [
        "  model hints: claude; max_tokens: 500; messages: 1; content: image, text; include_context: none",
        "rule 'no-images' (line 10): MATCHES -> deny",
        "  because content has image",
        "  the server is told: no images, please",
        "limits: none apply (the request is denied)",
    ]


@pytest.mark.parametrize(
    ("args", "params", "expected"),
    [
        pytest.param(
            [],
            PARAMS,
            "rule 'notes-summaries' (line 14): skipped: server '' does not match 'notes*'",
            id="no-server-given",
        ),
        pytest.param(
            ["--server", "notes", "--tool", "delete"],
            PARAMS,
            "rule 'notes-summaries' (line 14): skipped: tool 'delete' does not match 'summ*' or none",
            id="other-tool",
        ),
        pytest.param(
            ["--server", "notes"],
            {**PARAMS, "systemPrompt": "the PASSWORD is hunter2"},
            "rule 'notes-summaries' (line 14): skipped: text matches /(?i)password/ ('PASSWORD'), which 'not' excludes",
            id="not-excludes",
        ),
        pytest.param(
            ["--server", "notes"],
            PARAMS,
            "rule 'notes-summaries' (line 14): MATCHES -> allow",
            id="background-request-allowed",
        ),
        pytest.param(
            ["--server", "mail"], {**PARAMS, "maxTokens": 3000}, "rule 'big' (line 24): MATCHES -> deny", id="big"
        ),
    ],
)
def test_explanations(tmp_path: Path, args: list[str], params: dict[str, Any], expected: str) -> None:
    result = explain(tmp_path, *args, request=params)
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout.splitlines()


def test_an_empty_policy_prompts(tmp_path: Path) -> None:
    result = explain(tmp_path, policy="")
    assert result.returncode == 0, result.stderr
    assert "no rule matched -> prompt (default)" in result.stdout.splitlines()
    assert "  max_tokens: no cap" in result.stdout.splitlines()


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({"raw": '{"messages": [}'}, "request.json:1:15: not valid JSON: Expecting value", id="bad-json"),
        pytest.param({"raw": "[1, 2]"}, "request.json: must hold a JSON object", id="not-an-object"),
        pytest.param(
            {"request": {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}}},
            "request.json: the request's method is 'tools/call'; explain takes sampling/createMessage and "
            "elicitation/create requests",
            id="other-method",
        ),
        pytest.param(
            {"request": {"jsonrpc": "2.0", "id": 1, "method": "elicitation/create", "params": {}}},
            "request.json: Invalid params for elicitation/create: message: Field required",
            id="invalid-form",
        ),
        pytest.param(
            {"request": {"messages": []}},
            "request.json: Invalid params for sampling/createMessage: maxTokens: Field required",
            id="invalid",
        ),
        pytest.param(
            {"policy": "rules:\n  - action: allow\n    when: {tool: summ*, text_match: x}\n"},
            "policy.yaml:3:25: unknown key 'text_match' in rules[0].when (did you mean 'text_matches'?)",
            id="invalid-policy",
        ),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(tmp_path: Path, kwargs: dict[str, Any], expected: str) -> None:
    result = explain(tmp_path, **kwargs)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("mcp-sampling-proxy policy explain: error: ")
    assert expected in result.stderr


def test_missing_files_exit_2(tmp_path: Path) -> None:
    policy = write_policy(tmp_path, POLICY)
    base = ["policy", "explain"]
    missing = str(tmp_path / "nope.json")
    result = run_subcommand([*base, policy, "--request", missing])
    assert (result.returncode, result.stdout) == (2, "")
    assert f"{missing}: request file not found" in result.stderr
    (tmp_path / "r.json").write_text(json.dumps(PARAMS))
    no_policy = str(tmp_path / "nope.yaml")
    result = run_subcommand([*base, no_policy, "--request", str(tmp_path / "r.json")])
    assert (result.returncode, result.stdout) == (2, "")
    assert f"{no_policy}: policy file not found" in result.stderr
    result = run_subcommand([*base, policy])
    assert result.returncode == 2
    assert "--request" in result.stderr


def test_a_rule_about_max_tokens_sees_the_size_the_server_asked_for(tmp_path: Path) -> None:
    policy = (
        "limits: {max_tokens: 1000, max_tokens_action: clamp}\n"
        "rules:\n  - name: no-huge\n    when: {max_tokens_over: 5000}\n    action: deny\n"
        "  - name: rest\n    action: allow\n"
    )
    huge = explain(tmp_path, policy=policy, request={**PARAMS, "maxTokens": 6000}).stdout.splitlines()
    assert "rule 'no-huge' (line 3): MATCHES -> deny" in huge
    fair = explain(tmp_path, policy=policy, request={**PARAMS, "maxTokens": 3000}).stdout.splitlines()
    assert "rule 'rest' (line 6): MATCHES -> allow" in fair
    assert "  the request goes on with maxTokens 3,000 lowered to 1,000 (limits.max_tokens)" in fair


def test_an_oversized_request_is_refused_before_the_policy(tmp_path: Path) -> None:
    params = {**PARAMS, "messages": [{"role": "user", "content": {"type": "text", "text": "x" * 600_000}}]}
    result = explain(tmp_path, request=params)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].startswith(
        "refused before the policy is consulted: request refused: messages[0].content text block is 600,000 bytes"
    )


ELICITATION_POLICY = """\
elicitation: {non_interactive: decline, sensitive_form: decline}
rules:
  - name: no-mail-forms
    when: {server: mail, method: elicitation}
    action: deny
  - name: forms
    when: {method: elicitation}
    action: allow
    rate_limit: {requests: 5, per: 1m}
"""
FORM = {
    "message": "Which folder?",
    "requestedSchema": {"type": "object", "properties": {"folder": {"type": "string", "title": "Folder"}}},
}


def test_an_elicitation_request_is_explained_with_its_route(tmp_path: Path) -> None:
    request = {"jsonrpc": "2.0", "id": 3, "method": "elicitation/create", "params": FORM}
    result = explain(tmp_path, "--server", "notes", policy=ELICITATION_POLICY, request=request)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1:] == [
        "request: elicitation from server 'notes', host '' (no --host given), no host tool call in flight (tool: none)",
        "  mode: form; message: 'Which folder?'",
        "rule 'no-mail-forms' (line 3): skipped: server 'notes' does not match 'mail'",
        "rule 'forms' (line 6): MATCHES -> allow",
        "  because method is elicitation",
        "rate_limit: 5 requests per 1m",
        "route: auto: forwarded to the host when it declared elicitation (form mode); otherwise:",
        "  asked on the proxy's terminal, else on the companion console (mcp-sampling-proxy console)",
        "  when nobody can be asked: decline (elicitation.non_interactive)",
    ]
    denied = explain(tmp_path, "--server", "mail", policy=ELICITATION_POLICY, request=FORM).stdout.splitlines()
    assert denied[-2:] == [
        "  because server 'mail' matches 'mail' and method is elicitation",
        '  the server is told: {"action": "decline"}',
    ]


def test_an_elicitation_form_asking_for_a_secret_is_explained(tmp_path: Path) -> None:
    form = {
        "message": "Enter your database password",
        "requestedSchema": {"type": "object", "properties": {"value": {"type": "string"}}},
    }
    lines = explain(tmp_path, policy=ELICITATION_POLICY, request=form).stdout.splitlines()
    assert lines[-1].startswith("  the form asks for secrets (")
    assert lines[-1].endswith('the server gets {"action": "decline"} (elicitation.sensitive_form)')


def run_explain(*args: str) -> CommandRun:
    return run_subcommand(["policy", "explain", *args])


def test_a_prompt_on_the_command_line_is_explained_as_a_request(tmp_path: Path) -> None:
    """No REQUEST.json to write: the prompt, the model hints and maxTokens are options."""
    policy = write_policy(tmp_path, POLICY)
    result = run_explain(
        policy, "--prompt", "Summarise this", "--server", "notes-app", "--tool", "summarize", "--model", "gpt-4o"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "request: sampling from server 'notes-app', host '' (no --host given), during tool call 'summarize'" in lines
    assert "  model hints: gpt-4o; max_tokens: 1000; messages: 1; content: text; include_context: none" in lines
    assert "rule 'notes-summaries' (line 14): MATCHES -> allow" in lines
    big = run_explain(policy, "--prompt", "Summarise this", "--max-tokens", "3000")
    assert big.returncode == 0, big.stderr
    assert "rule 'big' (line 24): MATCHES -> deny" in big.stdout.splitlines()


def test_the_template_is_a_request_explain_takes_as_it_is(tmp_path: Path) -> None:
    template = run_explain("--template")
    assert template.returncode == 0, template.stderr
    assert template.stdout.startswith("// A request for: mcp-sampling-proxy policy explain")
    request = tmp_path / "request.json"
    request.write_text(template.stdout, encoding="utf-8")
    result = run_explain(write_policy(tmp_path, POLICY), "--request", str(request), "--server", "notes")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "  model hints: claude-sonnet; max_tokens: 1000; messages: 1; content: text; include_context: none" in lines
    assert "rule 'notes-summaries' (line 14): MATCHES -> allow" in lines


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param((), "give the policy FILE and the request: --prompt TEXT, or --request REQUEST.json", id="none"),
        pytest.param(("--model", "m"), "--model and --max-tokens go with --prompt", id="model-alone"),
        pytest.param(("--prompt", "x", "--max-tokens", "0"), "--max-tokens must be at least 1, got 0", id="zero"),
        pytest.param(("--prompt", "x", "--request", "r.json"), "not allowed with argument", id="both"),
    ],
)
def test_explain_says_how_to_give_the_request(tmp_path: Path, args: tuple[str, ...], expected: str) -> None:
    result = run_explain(write_policy(tmp_path, POLICY), *args)
    assert result.returncode == 2
    assert expected in result.stderr


def test_the_help_shows_the_ways_to_give_a_request() -> None:
    shown = run_explain("--help").stdout
    for option in ("--prompt TEXT", "--template", "--model M", "--max-tokens N", "--request REQUEST.json"):
        assert option in shown


def test_the_name_a_server_reports_is_shown_as_its_claim(tmp_path: Path) -> None:
    result = run_explain(
        write_policy(tmp_path, POLICY), "--prompt", "hi", "--server", "notes", "--server-reported", 'N "P"'
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].startswith(
        "request: sampling from server 'notes' (which calls itself \"N 'P'\"), "
    )
