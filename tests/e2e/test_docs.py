"""The README is a front page and the docs hold no development history (that is for commit bodies and
CHANGELOG.md); the docs site builds with every link resolved."""

from __future__ import annotations

import ast
import contextlib
import io
import itertools
import os
import re
import shlex
import subprocess
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from fakes.llm_server import FakeLLMServer
from helpers.support import PROXY, PY, ROOT

from mcp_sampling_proxy.commands import reference
from mcp_sampling_proxy.notation.vocabulary import SUBCOMMANDS

USER_DOCS = [ROOT / "README.md", ROOT / "SECURITY.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    for heading in ("## Install", "## Quickstart", "## A host config entry", "## Documentation"):
        assert heading in text


def test_the_readmes_policy_passes_policy_check(tmp_path: Path) -> None:
    """The policy the front page shows is one the proxy accepts as it is."""
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks, "README.md shows no policy"
    policy = tmp_path / "policy.yaml"
    policy.write_text(blocks[0])
    env = {**os.environ, "HOME": str(tmp_path)}
    done = subprocess.run([*PROXY, "policy", "check", str(policy)], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", USER_DOCS, ids=[str(p.relative_to(ROOT)) for p in USER_DOCS])
def test_user_docs_hold_no_development_history(path: Path) -> None:
    text = path.read_text()
    found = re.findall(r"(?i)\bissue #\d+|\(#\d+\)|\bin git history\b", text)
    assert found == [], f"{path}: {found}"


# --- the command lines the docs show parse with the real parsers ---------------------------------------

FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")
SHELL_BLOCKS = {"sh", "bash", "shell", "console", "zsh"}
OPERATORS = re.compile(r"^[();<>|&]+$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class DocCommand:
    """A `mcp-sampling-proxy ...` command of a shell block: where it is, and the words after the program."""

    path: Path
    line: int
    words: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def shell_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each command in a sh/bash/console block, continuation lines joined."""
    language: str | None = None
    pending: tuple[int, str] | None = None
    for number, text in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(text)
        if fence:
            language = None if language is not None else fence.group(2).lower()
            continue
        if language not in SHELL_BLOCKS:
            continue
        text = text.strip()
        if language == "console":  # only what follows the prompt is typed; the rest is output
            if pending is None and not text.startswith("$ "):
                continue
            text = text.removeprefix("$ ")
        start, joined = pending if pending is not None else (number, "")
        if text.endswith("\\"):
            pending = (start, joined + text[:-1] + " ")
            continue
        pending = None
        yield start, joined + text


def doc_commands(path: Path) -> list[DocCommand]:
    found = []
    for number, text in shell_lines(path):
        lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        simple: list[str] = []
        for token in [*lexer, ";"]:
            if not OPERATORS.match(token):
                simple.append(token)
                continue
            while simple and ASSIGNMENT.match(simple[0]):
                simple.pop(0)
            if simple and Path(simple[0]).name == reference.PROGRAM:
                found.append(DocCommand(path, number, tuple(simple[1:])))
            simple = []
    return found


def parse_error(words: Sequence[str]) -> str | None:
    """What the real parser says of these words (the program's name left out), without running the
    command; None when it takes them."""
    parser, rest = reference.parser_for(words)
    errors = io.StringIO()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):
            args = parser.parse_args(rest)
    except SystemExit as exit:
        return errors.getvalue().strip().splitlines()[-1] if exit.code else None
    # the proxy takes a server's command after '--' ('...' elides one): another first word is a subcommand
    command = args.command if parser.prog == reference.PROGRAM else []
    if command and command[0] != "--" and command != ["..."]:
        return (
            f"unknown subcommand {command[0]!r} (one of {', '.join(SUBCOMMANDS)}; a server's command goes after '--')"
        )
    return None


DOCS_WITH_COMMANDS = [path for path in USER_DOCS if doc_commands(path)]


def test_the_parser_check_catches_what_it_is_for() -> None:
    assert "invalid choice: 'chek'" in (parse_error(["policy", "chek", "p.yaml"]) or "")
    assert "--bogus" in (parse_error(["audit", "tail", "--bogus", "audit.jsonl"]) or "")
    assert "--polcy" in (parse_error(["--polcy", "p.yaml", "--", "server"]) or "")
    assert "'polcy'" in (parse_error(["polcy", "check", "p.yaml"]) or "")
    assert parse_error(["policy", "check", "p.yaml"]) is None
    assert parse_error(["--policy", "p.yaml", "--", "npx", "-y", "server", "--port", "1"]) is None
    assert [c.words for c in doc_commands(ROOT / "README.md")], "README.md shows no command line"


@pytest.mark.parametrize("path", DOCS_WITH_COMMANDS, ids=[str(p.relative_to(ROOT)) for p in DOCS_WITH_COMMANDS])
def test_every_command_line_in_the_docs_parses(path: Path) -> None:
    wrong = [f"{c.where}: {error}" for c in doc_commands(path) if (error := parse_error(c.words)) is not None]
    assert wrong == [], "\n".join(wrong)


def test_a_bad_doc_line_is_named_by_file_and_line(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n```console\n$ mcp-sampling-proxy audit tail --bogus \\\n    audit.jsonl\nprinted output\n```\n\n"
        "```sh\nFOO=1 mcp-sampling-proxy polcy check p.yaml && echo done   # a comment\n```\n\n"
        '```json\n{"command": "mcp-sampling-proxy --nothing-checked-here"}\n```\n'
    )
    found = [(c.line, c.words, parse_error(c.words)) for c in doc_commands(page)]
    assert [(line, words) for line, words, _ in found] == [
        (4, ("audit", "tail", "--bogus", "audit.jsonl")),
        (10, ("polcy", "check", "p.yaml")),
    ]
    assert "unrecognized arguments: --bogus" in (found[0][2] or "")
    assert "unknown subcommand 'polcy'" in (found[1][2] or "")


# --- the examples that are cheap and safe run, in a home of their own -------------------------------------


def checks_a_remote_llm(words: tuple[str, ...]) -> bool:
    """`init` checks the LLM it writes with a tiny request: a hosted one cannot be reached from a test (and
    tests/e2e/test_getting_started.py runs `init --key-file` against a loopback LLM instead)."""
    hosted = "--key-file" in words or any(
        a == "--llm" and b in ("openai", "anthropic") for a, b in itertools.pairwise(words)
    )
    return hosted and "--no-check" not in words


def runnable(words: tuple[str, ...]) -> bool:
    """Examples that only read, or write into the (temporary) home: run them and check they succeed."""
    before_server = words[: words.index("--")] if "--" in words else words
    return (
        "--help" in before_server
        or words[:2] in (("policy", "check"), ("wrap", "--list"), ("unwrap", "--list-backups"), ("approvals", "list"))
        or (words[:1] == ("init",) and ("--yes" in words or "-y" in words) and not checks_a_remote_llm(words))
    )


RUNNABLE = [(path, c) for path in DOCS_WITH_COMMANDS for c in doc_commands(path) if runnable(c.words)]


@pytest.mark.parametrize("path", sorted({path for path, _ in RUNNABLE}), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_cheap_examples_run_and_succeed(path: Path, tmp_path: Path) -> None:
    """In document order, in a fresh home: `init --yes` writes the policy a later `policy check` reads. An
    example that names the Ollama port gets a fake OpenAI-compatible LLM there."""
    home = tmp_path / "home"
    home.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MCP_SAMPLING_PROXY_", "OPENAI_", "ANTHROPIC_", "XDG_"))
    }
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        XDG_RUNTIME_DIR=os.environ["XDG_RUNTIME_DIR"],
    )
    llm: FakeLLMServer | None = None
    try:
        for _, command in [(p, c) for p, c in RUNNABLE if p == path]:
            if llm is None and any(":11434" in word for word in command.words):
                try:
                    llm = FakeLLMServer("openai", port=11434)
                except OSError:
                    pytest.skip(f"{command.where} names port 11434, which is in use here")
            words = [str(home) + word[1:] if word.startswith("~/") else word for word in command.words]
            if words[0] == "init" and "--force" not in words:
                words.append("--force")  # the examples of a page are alternatives: each writes the policy anew
            done = subprocess.run(
                [*PROXY, *words],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, f"{command.where}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    finally:
        if llm is not None:
            llm.close()


# --- the environment variables and exit statuses the reference lists are the code's ------------------------

OWN_VARIABLE = re.compile(r"MCP_SAMPLING_PROXY_[A-Z][A-Z0-9_]*")


def _is_environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id.endswith("environ")) or (
        isinstance(node, ast.Attribute) and node.attr == "environ"
    )


def _string(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def variables_the_package_reads() -> dict[str, str]:
    """name -> the first FILE:LINE that reads it: `environ.get("X")`, `environ["X"]`, `os.getenv("X")`,
    a host `Place` row's `env="X"` (the variable that moves a config file), and every
    `"MCP_SAMPLING_PROXY_..."` string (the modules keep those names in constants)."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "mcp_sampling_proxy").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = None
            if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
                reads = node.func.attr == "getenv" or (node.func.attr == "get" and _is_environ(node.func.value))
                name = _string(node.args[0]) if reads else None
            elif isinstance(node, ast.Subscript) and _is_environ(node.value):
                name = _string(node.slice)
            elif isinstance(node, ast.keyword) and node.arg == "env":
                name = _string(node.value)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and OWN_VARIABLE.fullmatch(node.value):
                name = node.value
            if name is not None:
                found.setdefault(name, f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}")
    return found


def test_every_environment_variable_the_package_reads_is_in_the_reference() -> None:
    documented = {variable.name for variable in reference.ENVIRONMENT}
    read = variables_the_package_reads()
    assert {"OPENAI_API_KEY", "MCP_SAMPLING_PROXY_STATE_DIR", "CODEX_HOME"} <= set(read)  # the scan sees them
    missing = [f"{where}: {name}" for name, where in read.items() if name not in documented]
    assert missing == [], "add these to ENVIRONMENT in commands/reference.py:\n" + "\n".join(missing)
    code = [path for path in (ROOT / "mcp_sampling_proxy").rglob("*.py") if path.name != "reference.py"]
    source = "".join(path.read_text() for path in code)
    gone = sorted(name for name in documented if name not in source)
    assert gone == [], f"the reference lists variables nothing reads: {gone}"


def _proxy_exit(args: list[str], tmp_path: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PROXY, "--no-terminal", *args], input=stdin or "", capture_output=True, text=True, timeout=60, cwd=tmp_path
    )


def _proxy_exit_on_its_own(args: list[str], tmp_path: Path) -> tuple[int, str]:
    """The proxy's exit status and stderr when it ends without the host's asking: its stdin stays open until
    then (a host does not close it while the server runs; closed at once, the proxy may see that end first)."""
    log = tmp_path / "stderr.log"
    with (
        log.open("wb") as stderr,
        subprocess.Popen(
            [*PROXY, "--no-terminal", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=tmp_path,
        ) as proxy,
    ):
        code = proxy.wait(60)
    return code, log.read_text(errors="replace")


def test_the_proxy_exits_with_the_statuses_the_reference_lists(tmp_path: Path) -> None:
    unconfined = tmp_path / "unconfined.yaml"
    unconfined.write_text("sandbox: off\n")
    not_executable = tmp_path / "server.sh"
    not_executable.write_text("#!/bin/sh\n")
    (tmp_path / "bad.yaml").write_text("rules: [\n")
    py = [PY, "-c"]
    cases: dict[str, list[tuple[list[str], int]]] = {
        "0": [(["--", *py, "import sys; sys.stdin.read()"], 0)],  # the host closes stdin
        # the rest end with the host's stdin open, as a host keeps it
        "N": [(["--", *py, "raise SystemExit(3)"], 3), (["--", *py, "pass"], 1)],
        # unconfined: in the sandbox the server is process 1 of its namespace, which its own SIGKILL cannot end
        "128+N": [(["--policy", str(unconfined), "--", *py, "import os; os.kill(os.getpid(), 9)"], 128 + 9)],
        "2": [(["--policy", "bad.yaml", "--", *py, "pass"], 2), (["--name", " ", "--", *py, "pass"], 2)],
        "126": [(["--policy", str(unconfined), "--", str(not_executable)], 126)],
        "127": [(["--", "no-such-mcp-server-here"], 127)],
    }
    assert set(cases) == {status.status for status in reference.PROXY_EXIT_STATUSES}
    for status, runs in cases.items():
        for args, expected in runs:
            if status == "0":
                done = _proxy_exit(args, tmp_path)
                code, stderr = done.returncode, done.stderr
            else:
                code, stderr = _proxy_exit_on_its_own(args, tmp_path)
            assert code == expected, f"{status}: {args}: exit {code}\n{stderr}"


def test_the_subcommands_exit_with_the_statuses_the_reference_lists(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("rules: [\n")
    cases = {
        "0": ["policy", "check", str(ROOT / "policies" / "default.yaml")],
        "1": ["policy", "check", "bad.yaml"],
        "2": ["audit", "verify", "no-such-audit.jsonl"],
    }
    # 130 is `login` interrupted while it waits for the browser: a terminal's Ctrl-C, not run here
    assert set(cases) | {"130"} == {status.status for status in reference.SUBCOMMAND_EXIT_STATUSES}
    for status, args in cases.items():
        done = subprocess.run([*PROXY, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert done.returncode == int(status), f"{args}: exit {done.returncode}\n{done.stderr}"


# --- the architecture page names modules, functions and layers that exist ----------------------------------

ARCHITECTURE = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "mcp_sampling_proxy"


def _names_in(module: Path) -> set[str]:
    """`function`, `Class` and `Class.method` defined at the top of a module."""
    names: set[str] = set()
    for node in ast.parse(module.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names.update(
                f"{node.name}.{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            )
    return names


def test_every_module_the_architecture_page_names_exists() -> None:
    named = sorted(set(re.findall(r"`([\w/]+\.py)`", ARCHITECTURE.read_text())))
    assert len(named) > 20
    missing = [path for path in named if not (PACKAGE / path).exists() and not (ROOT / path).exists()]
    assert missing == [], f"docs/architecture.md names modules that do not exist: {missing}"


def test_every_function_of_the_architecture_walk_is_in_the_module_of_its_line() -> None:
    rows = re.findall(r"(?m)^- `([\w/]+\.py)`: (.*)$", ARCHITECTURE.read_text())
    assert len(rows) > 15
    wrong = []
    for path, text in rows:
        defined = _names_in(PACKAGE / path)
        wrong += [f"{path}: {name}()" for name in re.findall(r"`([\w.]+)\(\)`", text) if name not in defined]
    assert wrong == [], "docs/architecture.md names functions its line's module does not define:\n" + "\n".join(wrong)


def test_the_architecture_page_draws_the_layers_lint_imports_enforces() -> None:
    layers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]["layers"]
    drawing = ARCHITECTURE.read_text().split("```mermaid", 1)[1].split("```", 1)[0]  # the layers, drawn top to bottom
    positions = []
    for layer in layers:
        for name in (part.strip() for part in layer.split("|")):
            spelled = f"{name}/" if (PACKAGE / name).is_dir() else f"{name}.py"
            assert re.search(rf"(?<![\w/]){re.escape(spelled)}", drawing), f"the drawing lacks {spelled}"
            positions.append((layers.index(layer), drawing.index(spelled), spelled))
    for (layer, at, spelled), (next_layer, next_at, next_spelled) in itertools.pairwise(positions):
        assert layer == next_layer or at < next_at, f"the drawing puts {next_spelled} above {spelled}"


# --- the front page's links lead somewhere -----------------------------------------------------------------


def _slug(heading: str) -> str:
    """The id MkDocs' toc (and GitHub, for these headings) gives a heading."""
    text = re.sub(r"[^\w\s-]", "", re.sub(r"`", "", heading).strip().lower())
    return re.sub(r"[\s]+", "-", text)


def test_the_readme_links_resolve() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert "docs/reference/cli.md" in local and "docs/architecture.md" in local

    def resolves(link: str) -> bool:
        path, _, anchor = link.partition("#")
        target = ROOT / path if path else ROOT / "README.md"
        if not target.exists():
            return False
        return not anchor or anchor in {_slug(h) for h in re.findall(r"(?m)^#+ (.+)$", target.read_text())}

    broken = [link for link in local if not resolves(link)]
    assert broken == [], f"README.md links to nothing: {broken}"
