"""The policy file's text, and the error every policy problem is reported with.

Light on purpose (no YAML, no policy model): the proxy reads the text once, before it starts the
server, to guess the key variables to hide from it (config/child_env.py), and parses that same text
afterwards, while the server boots."""

from __future__ import annotations

from mcp_sampling_proxy.notation.yamlnodes import PolicyError
from mcp_sampling_proxy.system.shared_files import NotARegularFile, read_regular

MAX_POLICY_BYTES = 16 * 1024 * 1024


def read_policy_text(path: str) -> str:
    """The policy file's text; PolicyError (saying what to do) when it is missing, not a regular file
    (a FIFO would block the read), over 16 MiB, or not UTF-8 (with the line and column of the bad byte)."""
    try:
        data = read_regular(path, MAX_POLICY_BYTES)
    except FileNotFoundError:
        raise PolicyError(f"{path}: policy file not found") from None
    except NotARegularFile as exc:
        raise PolicyError(f"{exc}: a policy must be a YAML file") from None
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read policy file: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise PolicyError(
            f"{path}:{line}:{column}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file as UTF-8"
        ) from None
