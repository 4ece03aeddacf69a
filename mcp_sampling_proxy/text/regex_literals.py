"""What a regular expression's own parse tree says about its matches, for the credential scan: the literal
text every match holds and how long a match is at least (`needs`: whether a pattern can match a string
at all), and how far before its literals a match can start (`anchor`: where `finditer` need try one).
The engine's own search costs about half a microsecond a character for the detectors that start with
look-behinds and optional groups.

Exact by construction: a pattern gets either only when every way it can match passes through its
strings, and none (run it as it is) whenever it holds something this reading does not follow (flags
switched inside it, a construct it does not know, or a Python whose `re` parser it cannot read).
Caseless literals are looked for in `caseless_view`, which folds a text as the engine does."""

from __future__ import annotations

import array
import functools
import re
import sys
from collections.abc import Iterator
from string import ascii_lowercase
from typing import Any

from msgspec import Struct


class Needs(Struct, frozen=True):
    """Every string the pattern matches is at least `shortest` characters long and holds one of each
    group's strings; `caseless`: they are ASCII and looked for in `caseless_view` (the pattern ignores
    case)."""

    groups: tuple[tuple[str, ...], ...]  # the rarest first: the test stops at the first group missing
    caseless: bool
    shortest: int = 0

    def may_match(self, text: str, lowered: str | None) -> bool:
        """False only when the pattern cannot match `text`. `lowered`: `caseless_view(text)` (None: a
        caseless pattern is always run)."""
        if len(text) < self.shortest:
            return False
        if self.caseless:
            if lowered is None:
                return True
            text = lowered
        for group in self.groups:  # plain loops: a third of all(any(...))'s time, asked of 57 detectors a scan
            for string in group:
                if string in text:
                    break
            else:
                return False
        return True


def needs(regex: re.Pattern[str]) -> Needs | None:
    """What every match of `regex` holds, or None when nothing is known (the pattern is always run)."""
    try:
        from re import _constants, _parser  # type: ignore[attr-defined]  # the parser `re.compile` itself uses

        tree = _parser.parse(regex.pattern, regex.flags)
        found = _sequence(tree, _constants)
        shortest = int(tree.getwidth()[0])  # look-arounds take no width
    except Exception:  # a parser this reading does not know: the pattern runs every time
        return None
    caseless = bool(regex.flags & re.IGNORECASE)
    if caseless:  # ASCII only: `caseless_view` folds what the engine takes for an ASCII letter
        found = [frozenset(s.lower() for s in strings) for strings in found if all(s.isascii() for s in strings)]
    groups = sorted({tuple(sorted(strings)) for strings in found}, key=lambda g: (-min(map(len, g)), g))
    if not groups and not shortest:
        return None
    return Needs(tuple(groups), caseless, shortest)  # the longest shortest string first


def caseless_view(text: str) -> str | None:
    """`text` as a caseless pattern's ASCII literals are looked for in it, character for character (the
    same offsets): lower-cased, and the few other characters the regex engine takes for an ASCII letter
    when it ignores case (`ı` and `İ` for `i`, `ſ` for `s`; the Kelvin sign lower-cases to `k` itself)
    replaced by that letter. None when no such view keeps the offsets: caseless patterns then run as
    they are."""
    if text.isascii():
        return text.lower()
    for other, letter in _engine_letters():
        if other in text:
            text = text.replace(other, letter)
    view = text.lower()
    return view if len(view) == len(text) else None


@functools.cache
def _engine_letters() -> tuple[tuple[str, str], ...]:
    """Each character outside ASCII that the regex engine matches to an ASCII letter when it ignores case
    and that `str.lower` does not make that letter, with the letter: asked of the engine itself (every
    code point once, ~45 ms, in the detectors' warm-up)."""
    points = array.array("I", range(0x80, 0xD800))  # (from ranges: a tuple of them took twice as long)
    points.extend(range(0xE000, 0x110000))
    everything = points.tobytes().decode("utf-32-le" if sys.byteorder == "little" else "utf-32-be")
    pairs = []
    for other in sorted(set(re.findall("(?i)[a-z]", everything))):
        letter = next(c for c in ascii_lowercase if re.fullmatch("(?i)" + c, other))
        if other.lower() != letter:
            pairs.append((other, letter))
    return tuple(pairs)


REACH = 256  # an anchor further than this many characters from a match's start is not used


class Anchor(Struct, frozen=True):
    """Every match starts at most `reach` characters before an occurrence of one of `strings` (looked for
    in `caseless_view` when `caseless`): the only places `finditer` need try a match."""

    strings: tuple[str, ...]
    caseless: bool
    reach: int


def anchor(regex: re.Pattern[str]) -> Anchor | None:
    """The anchor of `regex`: the item after its first whose literals (two characters or more) are the
    rarest, with the farthest from a match's start they can lie; None for a pattern that starts with a literal
    (the engine's own search for that prefix is as fast), that matches the empty string, or whose
    literals lie further than REACH from where a match starts."""
    try:
        from re import _constants, _parser  # type: ignore[attr-defined]  # the parser `re.compile` itself uses

        tree = _parser.parse(regex.pattern, regex.flags)
        if tree.getwidth()[0] == 0:
            return None
        items = list(tree.data)
        if not items or items[0][0] is _constants.LITERAL:
            return None
        caseless = bool(regex.flags & re.IGNORECASE)
        best: Anchor | None = None
        index = 1
        while index < len(items):
            before = int(_parser.SubPattern(tree.state, items[:index]).getwidth()[1])
            if before > REACH:
                break  # every later item starts further off
            end = index + 1
            if items[index][0] is _constants.LITERAL:  # a run of literal characters, and the alternation after it
                while end < len(items) and items[end][0] is _constants.LITERAL:
                    end += 1
                run = _lead(items[index:end], _constants)
                words = {run}
                if end < len(items) and items[end][0] is _constants.BRANCH:
                    leads = [_lead(branch, _constants) for branch in items[end][1][1]]
                    words = {run + lead for lead in leads} if all(leads) else words
                found = [frozenset(words)]
                reach = before + max(map(len, words))  # the literal lies at most this far from the start
            else:
                found = _sequence(items[index:end], _constants)
                reach = int(_parser.SubPattern(tree.state, items[:end]).getwidth()[1])
            if caseless:
                found = [s for s in found if all(x.isascii() for x in s)]
            if found and reach <= REACH:
                strings = max(found, key=_rarity)
                if min(map(len, strings)) >= 2 and (best is None or _rarity(strings) > _rarity(best.strings)):
                    best = Anchor(tuple(sorted({s.lower() if caseless else s for s in strings})), caseless, reach)
            index = end
        return best
    except Exception:  # a parser this reading does not know: no anchor
        return None


def _rarity(strings: Any) -> tuple[int, float]:
    """How seldom one of `strings` is likely in a text: the shortest's length, then the mean length."""
    lengths = [len(s) for s in strings]
    return min(lengths), sum(lengths) / len(lengths)


def finditer(regex: re.Pattern[str], text: str, where: Anchor | None, lowered: str | None) -> Iterator[re.Match[str]]:
    """`regex.finditer(text)`'s matches, tried only at the starts `where` allows (`lowered`:
    `caseless_view(text)`). The same matches in the same order: each start is tried once, in order, from
    where the last match ended, as finditer does, and no match can start anywhere else. A text that
    holds the anchor's literals so often that the tries would cost more than the engine's own scan (a
    hostile one: `sk-` a hundred thousand times) gets `regex.finditer`."""
    if where is None or (where.caseless and lowered is None):
        yield from regex.finditer(text)
        return
    haystack = lowered if where.caseless else text
    assert haystack is not None
    most = (len(text) // 8 + REACH) // (where.reach + 1)  # literals found: past this, Python's tries cost more
    found: list[int] = []
    for string in where.strings:
        at = haystack.find(string)
        while at >= 0:
            if len(found) == most:
                yield from regex.finditer(text)
                return
            found.append(at)
            at = haystack.find(string, at + 1)
    untried = 0  # every start below it was tried, or lies inside a match found
    for at in sorted(found):
        start = max(untried, at - where.reach)
        while start <= at:
            match = regex.match(text, start)
            if match is None:
                start += 1
            else:
                yield match
                start = match.end()  # past the start: `anchor` refuses a pattern that matches the empty string
        untried = max(untried, start)


def _lead(items: Any, c: Any) -> str:
    """The literal characters a sequence starts with ("" when it starts with anything else)."""
    lead = []
    for op, value in items:
        if op is not c.LITERAL:
            break
        lead.append(chr(value))
    return "".join(lead)


def _sequence(items: Any, c: Any) -> list[frozenset[str]]:
    """For a sequence of pattern items: sets of strings, each set with one member in every match (all of
    them hold at once). A run of literal characters is one such string; a group, an alternation whose
    every branch has its own, and an item repeated at least once add theirs."""
    sets: list[frozenset[str]] = []
    run: list[str] = []

    def end_run() -> None:
        if run:
            sets.append(frozenset({"".join(run)}))
            run.clear()

    for op, value in items:
        if op is c.LITERAL:
            run.append(chr(value))
            continue
        if op is c.BRANCH and run:  # `gh|github_pat_` parses as `g(?:h|ithub_pat_)`: put them together again
            leads = [_lead(branch, c) for branch in value[1]]
            if all(leads):
                sets.append(frozenset("".join(run) + lead for lead in leads))
        end_run()
        if op is c.SUBPATTERN:
            _group, flags_on, flags_off, inner = value
            if not flags_on and not flags_off:  # flags switched inside: not followed
                sets += _sequence(inner, c)
        elif op is c.BRANCH:
            branches = [_sequence(branch, c) for branch in value[1]]
            if all(branches):
                best = [max(b, key=lambda strings: min(map(len, strings))) for b in branches]
                sets.append(frozenset().union(*best))
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT, c.POSSESSIVE_REPEAT):
            least, _most, inner = value
            if least >= 1:
                sets += _sequence(inner, c)
        elif op is c.ATOMIC_GROUP:
            sets += _sequence(value, c)
        # any other item (a class, `.`, an anchor, a look-around, a back-reference) holds no known literal
    end_run()
    return sets
