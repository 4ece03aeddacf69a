"""The deployment files in deploy/ say what the proxy accepts: each `serve` command line in them
parses with the real parser, the Kubernetes manifest is YAML whose parts refer to each other, the
policy it ships passes `policy check`, the systemd unit passes `systemd-analyze verify` (when the
machine has it) and HAProxy takes its config (when installed). `docker build` is not run here: it
needs a Docker daemon, which CI machines do not have."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.support import PROXY, PY, ROOT, proxy_env

from mcp_sampling_proxy.commands import serve
from mcp_sampling_proxy.commands.reference import parser_for
from mcp_sampling_proxy.front.endpoint import HEALTH

DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "systemd" / "mcp-sampling-proxy@.service"
MANIFEST = DEPLOY / "kubernetes" / "mcp-sampling-proxy.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
HAPROXY = DEPLOY / "haproxy.cfg"


def serve_args(words: list[str]) -> Any:
    """The words after the program's name, as the real `serve` parser reads them (SystemExit if it does not)."""
    assert words[0] == "serve", words
    parser, rest = parser_for(words)
    args = parser.parse_args(rest)
    assert args.command[:1] == ["--"] and len(args.command) > 1, "the server's command goes after '--'"
    serve.parse_listen(args.listen)
    return args


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")) if d]


def of_kind(kind: str) -> dict[str, Any]:
    (found,) = [d for d in documents() if d["kind"] == kind]
    return found


# -- Kubernetes ------------------------------------------------------------------------------------------


def test_the_manifest_has_three_replicas_a_service_a_secret_and_the_policy() -> None:
    assert sorted(d["kind"] for d in documents()) == [
        "ConfigMap",
        "Deployment",
        "PersistentVolumeClaim",
        "Secret",
        "Service",
    ]
    deployment = of_kind("Deployment")
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert of_kind("Service")["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]


def test_the_containers_serve_command_parses_and_its_parts_exist() -> None:
    pod = of_kind("Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = serve_args(container["args"])
    env = {e["name"]: e for e in container["env"]}
    # each pod its own name and audit file, from the pod's name
    assert args.replica == "$(POD_NAME)" and "$(POD_NAME)" in args.audit
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(mounts.values()) <= set(volumes)
    assert Path(args.policy).parent.as_posix() in mounts
    assert any(args.audit.startswith(path + "/") for path in mounts)
    # the tokens reach the path serve reads, copied by the init container from the Secret
    (init,) = pod["initContainers"]
    assert init["command"][-1] == args.token_file
    secret = of_kind("Secret")
    assert {item["key"] for item in volumes["secrets"]["secret"]["items"]} <= set(secret["stringData"])
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"]["key"] in secret["stringData"]
    # the probes and the Service reach the port serve listens on
    port = serve.parse_listen(args.listen)[1]
    (declared,) = container["ports"]
    assert declared["containerPort"] == port
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": HEALTH, "port": declared["name"]}
    (service_port,) = of_kind("Service")["spec"]["ports"]
    assert service_port["targetPort"] == declared["name"]


def test_the_configmaps_policy_passes_policy_check_with_the_pods_variables(tmp_path: Path) -> None:
    policy = of_kind("ConfigMap")["data"]["policy.yaml"]
    (tmp_path / "policy.yaml").write_text(policy, encoding="utf-8")
    (container,) = of_kind("Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"] for e in container["env"]}
    settings = yaml.safe_load(policy)
    assert settings["state"]["backend"] == "redis" and settings["state"]["url_env"] in env
    assert {p["api_key_env"] for p in settings["llm"]["providers"].values()} <= env
    done = subprocess.run(
        [*PROXY, "policy", "check", str(tmp_path / "policy.yaml")],
        env=proxy_env(OPENAI_API_KEY="sk-test", REDIS_URL="redis://127.0.0.1:6379/0"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# -- systemd -----------------------------------------------------------------------------------------------


def exec_start() -> list[str]:
    (line,) = [line for line in UNIT.read_text(encoding="utf-8").splitlines() if line.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def test_the_units_command_parses_and_names_each_replica_and_its_audit_file() -> None:
    words = exec_start()
    assert words[0].endswith("/mcp-sampling-proxy")
    expanded = [w.replace("%i", "8765").replace("%H", "host1") for w in words[1:]]
    args = serve_args(expanded)
    assert args.replica == "host1:8765" and args.audit.endswith("audit-8765.jsonl")
    assert serve.parse_listen(args.listen) == ("0.0.0.0", 8765)
    assert args.token_file is not None  # beyond loopback serve refuses to start without tokens


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not on this machine")
def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    """The unit as shipped, with its two paths pointing at what exists here (verify checks they run)."""
    binary = shutil.which("mcp-sampling-proxy", path=str(Path(PY).parent)) or shutil.which("true")
    text = UNIT.read_text(encoding="utf-8").replace("/opt/mcp-sampling-proxy/bin/mcp-sampling-proxy", str(binary))
    (tmp_path / UNIT.name).write_text(text, encoding="utf-8")
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(tmp_path / "mcp-sampling-proxy@8765.service")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    ours = [line for line in (done.stdout + done.stderr).splitlines() if "mcp-sampling-proxy" in line]
    assert done.returncode == 0 and ours == [], done.stdout + done.stderr


# -- the image -----------------------------------------------------------------------------------------------


def instruction(name: str) -> list[str]:
    """The arguments of a Dockerfile instruction (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text(encoding="utf-8"))
    return [line.split(None, 1)[1] for line in text.splitlines() if line.startswith(f"{name} ")]


def test_the_images_command_parses_and_its_healthcheck_asks_the_port_it_listens_on() -> None:
    (entrypoint,), (cmd,) = instruction("ENTRYPOINT"), instruction("CMD")
    assert json.loads(entrypoint) == ["mcp-sampling-proxy"]
    args = serve_args(json.loads(cmd))
    port = serve.parse_listen(args.listen)[1]
    assert instruction("EXPOSE") == [str(port)]
    (check,) = instruction("HEALTHCHECK")
    assert f"http://127.0.0.1:{port}{HEALTH}" in check
    (base,) = instruction("FROM")
    assert base == "python:3.11-slim"
    (user,) = instruction("USER")
    assert user != "root"
    assert any("bubblewrap" in run for run in instruction("RUN"))


def test_what_the_image_copies_exists_and_the_dockerignore_keeps_it() -> None:
    kept = [line[1:] for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines() if line.startswith("!")]
    for copy in instruction("COPY"):
        *sources, _ = copy.split()
        for source in sources:
            assert (ROOT / source).exists(), source
            assert any(source == k.rstrip("/") or source.startswith(k) for k in kept), source


def test_docker_build_is_not_run_without_a_daemon() -> None:
    if shutil.which("docker") is None:
        pytest.skip("docker is not installed: the image is not built here")
    if subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
        pytest.skip("no Docker daemon runs here: the image is not built (deploy/Dockerfile is checked as text)")
    done = subprocess.run(
        ["docker", "build", "-f", str(DOCKERFILE), "-t", "mcp-sampling-proxy:test", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


# -- HAProxy ----------------------------------------------------------------------------------------------------


def test_haproxy_checks_health_where_serve_answers_and_sticks_on_the_session_header() -> None:
    text = HAPROXY.read_text(encoding="utf-8")
    assert f"option httpchk GET {HEALTH}" in text
    assert "stick store-response res.hdr(mcp-session-id)" in text
    assert "stick on req.hdr(mcp-session-id)" in text


@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed (.ci/run installs it)")
def test_haproxy_takes_the_config(tmp_path: Path) -> None:
    with socket.socket() as s:  # the example's addresses may not resolve here: -c checks the syntax
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "haproxy.cfg"
    config.write_text(
        HAPROXY.read_text(encoding="utf-8").replace("bind 0.0.0.0:8080", f"bind 127.0.0.1:{port}"), encoding="utf-8"
    )
    done = subprocess.run(["haproxy", "-c", "-f", str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_guides_haproxy_lines_are_the_files() -> None:
    """docs/guides/scale.md quotes deploy/haproxy.cfg: each line it shows is a line of the file."""
    guide = (ROOT / "docs" / "guides" / "scale.md").read_text(encoding="utf-8")
    quoted = guide.split("From `deploy/haproxy.cfg`:", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    lines = {line.split("#", 1)[0].strip() for line in HAPROXY.read_text(encoding="utf-8").splitlines()}
    missing = [line for line in quoted.splitlines() if line.strip() and line.strip() not in lines]
    assert missing == []
