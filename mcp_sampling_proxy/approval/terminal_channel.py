"""The approval channel at the proxy's controlling terminal: the human who started the host (a CLI host
in a terminal) answers there."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio

from mcp_sampling_proxy.approval.channels import (
    Approval,
    ApprovalRequest,
    ClosedHow,
    HostLine,
    Review,
    clock,
    closed_how,
)
from mcp_sampling_proxy.approval.dialogues import approval_dialogue, review_dialogue
from mcp_sampling_proxy.approval.edits import with_prompt, with_text
from mcp_sampling_proxy.system.terminal import Terminal
from mcp_sampling_proxy.text.sanitize import one_line, quote


class TerminalChannel:
    name = "terminal"
    single_approver = True

    def __init__(self, terminal: Terminal | None):
        self._terminal = terminal

    def available(self, host: HostLine) -> bool:
        return self._terminal is not None

    async def settle(self) -> None:
        """Nobody arrives on this channel later: it is there from the start or not at all."""

    async def _ask(self, prompt: str) -> str | None:
        assert self._terminal is not None
        return await self._terminal.ask(prompt)  # stays the last thing on screen while it waits

    def _say(self, text: str) -> None:
        assert self._terminal is not None
        self._terminal.write(text + "\n")

    @staticmethod
    @contextlib.asynccontextmanager
    async def _turn(terminal: Terminal) -> AsyncIterator[None]:
        """The terminal, once the question on screen is done: no time of the approval's counts while this one
        waits its turn, and its whole approval.timeout from when it is asked."""
        timing = clock()
        if timing is not None and terminal.lock.locked():
            timing.waiting()
        async with terminal.lock:
            if timing is not None:
                timing.shown()
            yield

    async def ask(self, request: ApprovalRequest, host: HostLine) -> Approval:
        terminal = self._terminal
        assert terminal is not None
        terminal.announce_turn(f"a request from server '{one_line(request.server, 120)}'")
        async with self._turn(terminal):
            deadline = anyio.current_effective_deadline()
            try:
                terminal.write(
                    f"\nmcp-sampling-proxy: approval needed for server '{one_line(request.server, 120)}' "
                    f"(rule '{one_line(request.rule, 120)}'):\n" + quote(request.summary) + "\n"
                )
                if request.quorum is not None:  # approval.quorum: this yes is one of several
                    so_far = one_line(", ".join(request.quorum.approved_by) or "nobody yet", 200)
                    terminal.write(
                        f"needs {request.quorum.needed} different approvers (approved so far: {so_far}); "
                        "here you approve as 'terminal', for this request only\n"
                    )
                scope, text = await approval_dialogue(request.params, self._ask, self._say, terminal.discard_typeahead)
            except anyio.get_cancelled_exc_class():
                how = closed_how(False, deadline)
                terminal.write(f"(request {ENDED[how, request.quorum is not None]}; this question is closed)\n")
                raise
        if scope is None:
            return Approval(False, self.name, "rejected at the terminal", "rejected")
        terminal.note_shown(request.summary)  # a typed reply right after need not repeat it
        if text is not None:
            return Approval(
                True,
                self.name,
                "approved with an edited prompt at the terminal",
                "approved",
                params=with_prompt(request.params, text),
            )
        return Approval(True, self.name, "approved at the terminal", "approved", scope)

    async def review(self, request: ApprovalRequest, result: dict[str, Any], host: HostLine) -> Review:
        assert self._terminal is not None
        self._terminal.announce_turn(f"the LLM's answer for server '{one_line(request.server, 120)}'")
        async with self._turn(self._terminal):
            self._say("")
            accepted, text = await review_dialogue(
                result, self._ask, self._say, prompt=request.summary, prompt_edited_by=request.prompt_edited_by
            )
        return Review(accepted, result if text is None else with_text(result, text), self.name)


# what the terminal says when a question it shows closes elsewhere: (how, under a quorum) -> words
ENDED: dict[tuple[ClosedHow, bool], str] = {
    ("expired", False): "timed out (approval.timeout): denied",
    ("expired", True): "timed out (approval.timeout) before enough approvers said yes: denied",
    ("withdrawn", False): "withdrawn (the host cancelled it, or the proxy is stopping)",
    ("withdrawn", True): "answered on another channel, or withdrawn",
    ("answered", False): "answered",
    ("answered", True): "answered",
}
