"""Read YAML while keeping line and column of every value, so a typo is reported where it is.

The policy loader walks `yaml.compose` nodes through `Node`, which turns every mistake into
`PolicyError("FILE:LINE:COL: what is wrong, what is allowed")`.

A document read with `load(..., gather=True)` reports every mistake at once rather than the first:
its nodes share an `Errors` list, unknown and repeated keys go there and are skipped, and the
grammar wraps each independent part (a section, a rule, a condition) in `Node.attempt`, which files
that part's error and goes on. `Errors.check()` then raises one PolicyError naming them all.
"""

from __future__ import annotations

import builtins
import difflib
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import yaml

from mcp_sampling_proxy.notation.units import DURATION_FORMS, SIZE_FORMS, parse_duration, parse_size

T = TypeVar("T")


class PolicyError(Exception):
    """A policy file that cannot be used; the message names file, line, column and the fix, one
    line per mistake (`mistakes`) when several were found."""

    def __init__(self, *mistakes: str):
        super().__init__("\n".join(mistakes))
        self.mistakes: tuple[str, ...] = mistakes


class Errors:
    """The mistakes found so far in one document, in the order they were met."""

    def __init__(self) -> None:
        self.mistakes: list[str] = []
        self._quiet: set[str] = set()  # "FILE:LINE:COL: " of mappings with a misspelt key

    def add(self, error: PolicyError) -> None:
        self.mistakes.extend(
            m for m in error.mistakes if m not in self.mistakes and not any(m.startswith(q) for q in self._quiet)
        )

    def quiet(self, at: str) -> None:
        """Say nothing more about the mapping at `at`: a key of it was misspelt, and "it needs KEY" would
        only repeat the "did you mean KEY?" already said."""
        self._quiet.add(at)

    def check(self) -> None:
        """Raise them all as one PolicyError, in the order of the file, if there are any."""
        if self.mistakes:
            raise PolicyError(*sorted(self.mistakes, key=_position))


class Node:
    """A YAML node with its position; accessors validate type and report errors in place."""

    def __init__(self, node: yaml.Node, path: str, where: str, errors: Errors | None = None):
        self.node = node
        self.path = path  # dotted path for messages, e.g. "llm.providers.openai"
        self.where = where  # file name
        self.errors = errors  # shared by the document's nodes when every mistake is gathered

    def child(self, node: yaml.Node, path: str) -> Node:
        return Node(node, path, self.where, self.errors)

    def attempt(self, parse: Callable[[], T], fallback: T) -> T:
        """`parse()`; when mistakes are gathered, its PolicyError is filed and `fallback` stands in for
        the value so the rest of the document is still checked (the document is refused at the end)."""
        if self.errors is None:
            return parse()
        try:
            return parse()
        except PolicyError as exc:
            self.errors.add(exc)
            return fallback

    def report(self, error: PolicyError) -> None:
        """A mistake that leaves the rest readable (an unknown or repeated key, skipped): filed when
        mistakes are gathered, raised otherwise."""
        if self.errors is None:
            raise error
        self.errors.add(error)

    @property
    def label(self) -> str:
        """How messages name this node: its dotted path, or the top level for the root."""
        return self.path or "the top level of the policy"

    # -- position and errors -------------------------------------------------------------
    def error(self, message: str) -> PolicyError:
        mark = self.node.start_mark
        return PolicyError(f"{self.where}:{mark.line + 1}:{mark.column + 1}: {message}")

    # -- scalars --------------------------------------------------------------------------
    def regex(self) -> re.Pattern[str]:
        """A regular expression (Python re syntax), compiled."""
        pattern = self.str()
        try:
            return re.compile(pattern)
        except re.error as exc:
            where = f" at position {exc.pos}" if exc.pos is not None else ""
            raise self.error(
                f"{self.label} /{pattern}/ is not a valid regular expression: {exc.msg}{where} "
                "(Python re syntax; quote the pattern in YAML when it holds : # [ ] { } or starts with *)"
            ) from None

    def size(self) -> int:
        """Bytes: a number or a string such as 512KiB, 1MiB, 16MB."""
        try:
            return parse_size(self.value())
        except ValueError as exc:
            if "negative" in str(exc):
                raise self.error(f"{self.label} cannot be negative, got {shown_value(self.value())}") from None
            raise self.error(f"{self.label} must be a size: {SIZE_FORMS}; got {shown_value(self.value())}") from None

    def duration(self) -> float:
        """Seconds: a positive number or a string such as 30s, 1m, 2h, 1d."""
        try:
            return parse_duration(self.value())
        except ValueError as exc:
            if "longer" in str(exc):
                raise self.error(
                    f"{self.label} must be longer than 0 seconds, got {shown_value(self.value())}"
                ) from None
            raise self.error(
                f"{self.label} must be a duration: {DURATION_FORMS}; got {shown_value(self.value())}"
            ) from None

    def value(self) -> Any:
        """The plain Python value (constructed with the safe loader's rules)."""
        return _construct(self.node)

    def str(self) -> builtins.str:
        v = self.value()
        if not isinstance(v, str) or not v:
            raise self.error(f"{self.label} must be a non-empty string, got {shown_value(v)}")
        return v

    def choice(self, allowed: tuple[builtins.str, ...]) -> builtins.str:
        v = self.value()
        if v not in allowed:
            hint = did_you_mean(str(v), allowed)
            raise self.error(f"{self.label} {shown_value(v)} is not one of {', '.join(allowed)}{hint}")
        return str(v)

    def bool(self) -> builtins.bool:
        v = self.value()
        if not isinstance(v, bool):
            raise self.error(f"{self.label} must be true or false, got {shown_value(v)}")
        return v

    def number(self, *, minimum: float | None = None, maximum: float | None = None) -> float:
        v = self.value()
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.error(f"{self.label} must be a number, got {shown_value(v)}")
        if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
            lo = "-inf" if minimum is None else minimum
            hi = "inf" if maximum is None else maximum
            raise self.error(f"{self.label} must be between {lo} and {hi}, got {v}")
        return v

    def int(self, *, minimum: int | None = None) -> int:
        v = self.value()
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.error(f"{self.label} must be a whole number, got {shown_value(v)}")
        if minimum is not None and v < minimum:
            raise self.error(f"{self.label} must be at least {minimum}, got {v}")
        return v

    # -- collections ---------------------------------------------------------------------
    def is_mapping(self) -> builtins.bool:
        return isinstance(self.node, yaml.MappingNode)

    def is_sequence(self) -> builtins.bool:
        return isinstance(self.node, yaml.SequenceNode)

    def mapping(self, allowed: tuple[builtins.str, ...] | None = None) -> dict[builtins.str, Node]:
        """Children by key; unknown keys are an error when `allowed` is given."""
        if not isinstance(self.node, yaml.MappingNode):
            raise self.error(f"{self.label} must be a mapping (key: value lines), got {_kind(self.node)}")
        out: dict[str, Node] = {}
        for key_node, value_node in self.node.value:
            key = _construct(key_node)
            key_at = self.child(key_node, self.path)
            if not isinstance(key, str):
                self.report(key_at.error(f"keys in {self.label} must be strings, got {shown_value(key)}"))
            elif allowed is not None and key not in allowed:
                hint = did_you_mean(key, allowed)
                self.report(key_at.error(f"unknown key '{key}' in {self.label}{hint}; allowed: {', '.join(allowed)}"))
                if hint and self.errors is not None:
                    self.errors.quiet(str(self.error("")))
            elif key in out:
                self.report(key_at.error(f"key '{key}' appears twice in {self.label}"))
            else:
                out[key] = self.child(value_node, f"{self.path}.{key}" if self.path else key)
        return out

    def keys(self) -> list[builtins.str]:
        """The keys a mapping holds as written (none for anything else), allowed or not."""
        if not isinstance(self.node, yaml.MappingNode):
            return []
        return [str(key) for key in (_construct(k) for k, _ in self.node.value)]

    def sequence(self) -> list[Node]:
        if not isinstance(self.node, yaml.SequenceNode):
            raise self.error(f"{self.label} must be a list (lines starting with '- '), got {_kind(self.node)}")
        return [self.child(n, f"{self.path}[{i}]") for i, n in enumerate(self.node.value)]

    def strings(self) -> list[builtins.str]:
        """A list of strings; a single string is accepted as a one-item list."""
        if isinstance(self.node, yaml.ScalarNode):
            return [self.str()]
        return [item.str() for item in self.sequence()]

    def __iter__(self) -> Iterator[Node]:
        return iter(self.sequence())


def load(text: str, where: str, *, gather: bool = False) -> Node | None:
    """Compose YAML text into a `Node` (None for an empty document); with `gather`, its nodes file
    their mistakes in one shared `Errors` (the root's `errors`) instead of raising the first."""
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        pos = f"{mark.line + 1}:{mark.column + 1}" if mark else "1:1"
        problem = exc.problem or exc.context or "not valid YAML"
        raise PolicyError(f"{where}:{pos}: not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"{where}: not valid YAML: {exc}") from None
    if root is not None:
        _refuse_alias_bombs(root, where)
    return None if root is None else Node(root, "", where, Errors() if gather else None)


MAX_EXPANDED_NODES = 100_000  # a policy of hundreds of rules has a few thousand; aliases must not multiply it


def _refuse_alias_bombs(root: yaml.Node, where: str) -> None:
    """Refuse a document whose aliases expand it past MAX_EXPANDED_NODES ("billion laughs": nine levels
    of ten aliases each are a billion nodes in a kilobyte; walking them grew the proxy to gigabytes).
    Each node's expanded size is counted once (shared nodes are what an alias makes), so this is linear."""
    sizes: dict[int, int] = {}
    shared: list[yaml.Node] = []
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            if not done:
                shared.append(node)
            continue
        children = _children(node)
        if not done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            shared.extend(child for child in children if id(child) in sizes)
            continue
        sizes[id(node)] = 1 + sum(sizes.get(id(child), 1) for child in children)
        if sizes[id(node)] > MAX_EXPANDED_NODES:
            mark = (shared[0] if shared else node).start_mark
            raise PolicyError(
                f"{where}:{mark.line + 1}:{mark.column + 1}: YAML aliases expand this document past "
                f"{MAX_EXPANDED_NODES:,} values (an alias of an alias of ...): write the values out, or alias less"
            )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _construct(node: yaml.Node) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def _position(mistake: str) -> tuple[int, int]:
    """(line, column) of a "FILE:LINE:COL: ..." mistake; (0, 0) when it names none."""
    found = re.search(r":(\d+):(\d+): ", mistake)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return shown_value(_construct(node))


def shown_value(v: Any) -> str:
    if v is None:
        return "nothing"
    return repr(v) if isinstance(v, str) else str(v)


def did_you_mean(word: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, allowed, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""
