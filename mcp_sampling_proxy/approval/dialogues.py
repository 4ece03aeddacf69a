"""The questions a human answers in text, at the proxy's terminal or in the companion console
(`mcp-sampling-proxy console` runs the same dialogues): approve a request (once, for the session,
always, with an edited prompt, or not), and check the LLM's answer before the server gets it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_sampling_proxy.approval.channels import ApprovalScope
from mcp_sampling_proxy.approval.edits import kept_blocks, prompt_not_editable, result_text
from mcp_sampling_proxy.text.sanitize import one_line, quote, strip_controls

SCOPES: dict[str, ApprovalScope] = {"y": "once", "yes": "once", "s": "session", "a": "always"}
APPROVE_PROMPT = "Allow this request? [y]es once, [s]ession, [a]lways for this server+tool, [e]dit prompt, [N]o: "


REFUSALS = ("", "n", "no")


async def approval_dialogue(
    params: Mapping[str, Any], ask: Any, say: Any, discard_typeahead: Any = None
) -> tuple[ApprovalScope | None, str | None]:
    """Ask yes/session/always/edit/no, wherever the human is (the proxy's terminal or the companion
    console). Returns (scope or None when refused, the new text of the last user message or None);
    the caller applies the text with `with_prompt`, which keeps the message's other blocks.

    Keys typed before the question was shown are thrown away first (`discard_typeahead`): a `y`
    typed while the console sat idle must not approve a request nobody has seen. An answer that is
    not one of the choices asks again instead of counting as No, and the outcome is said."""
    if discard_typeahead is not None:
        discard_typeahead()
    while True:
        answer = await ask(APPROVE_PROMPT)
        if answer is None:
            say("-> denied (end of input)")
            return None, None
        answer = answer.strip().lower()
        if answer == "e":
            why = prompt_not_editable(params)
            if why is not None:
                say(f"This prompt cannot be edited: {why}. Answer y, s, a or n")
                continue
            kept = kept_blocks(params)
            keeps = ""
            if kept:
                keeps = f" (its {', '.join(kept)} block{'s are' if len(kept) > 1 else ' is'} kept)"
            say(f"New text for the last user message{keeps}; end with a line holding only '.':")
            text = await read_block(ask)
            say("-> approved once, with your edited prompt")
            return "once", text
        if answer in SCOPES:
            say(f"-> approved ({SCOPE_WORDS[SCOPES[answer]]})")
            return SCOPES[answer], None
        if answer in REFUSALS:
            say("-> denied")
            return None, None
        say(f"'{strip_controls(answer)[:20]}' is not one of the choices: answer y, s, a, e or n")


SCOPE_WORDS = {"once": "once", "session": "for this session", "always": "always, for this server and tool"}


EDITORS = {"terminal": "at the terminal", "console": "at the companion console"}


async def review_dialogue(
    result: dict[str, Any], ask: Any, say: Any, *, prompt: str | None = None, prompt_edited_by: str | None = None
) -> tuple[bool, str | None]:
    """Show the prompt as it was sent to the LLM (`prompt`, a sanitised summary; marked when a human
    edited it) and the LLM's answer. Returns (send it?, the replacement text or None); the caller
    applies the text with `with_text`, which keeps the answer's other blocks."""
    if prompt:
        edited = ""
        if prompt_edited_by:
            edited = f" (edited {EDITORS.get(prompt_edited_by, 'by ' + one_line(prompt_edited_by, 40))})"
        say(f"The prompt as sent to the LLM{edited}:\n" + quote(prompt))
    say("The LLM answered:\n" + quote(result_text(result)))
    answer = ((await ask("Send this answer to the server? [Y]es, [e]dit, [n]o: ")) or "").strip().lower()
    if answer == "e":
        say("Replacement answer; end with a line holding only '.':")
        return True, await read_block(ask)
    return answer in ("", "y", "yes"), None


async def read_block(ask: Any) -> str:
    """Lines up to one holding only '.' (or the end of input)."""
    lines: list[str] = []
    while (line := await ask("")) not in (None, "."):
        lines.append(line)
    return "\n".join(lines)
