"""The auto-answer stage: the first `elicitation.auto_answers` entry matching the request answers it,
`always` before anyone is asked, `headless` only when nobody can be (what it may answer, and with
what, is `services/auto_answers.py`). An entry that matched but may not answer is said in the log and
in the audit reason (`withheld`), and the request goes on as if none had matched."""

from __future__ import annotations

import anyio
from msgspec import Struct

from mcp_sampling_proxy.config.auto_answers import AutoAnswer
from mcp_sampling_proxy.config.settings import ElicitationSettings
from mcp_sampling_proxy.log import get_logger
from mcp_sampling_proxy.protocol.wire_types import ElicitRequestParams
from mcp_sampling_proxy.services import auto_answers
from mcp_sampling_proxy.services.elicitation.ended import Answered

log = get_logger("mcp_sampling_proxy.services.elicitation")


class Matched(Struct):
    """The entry matching the request, if any, and why it was not used (for the audit reason)."""

    entry: AutoAnswer | None
    withheld: str = ""  # "; why", or "" while the entry may still answer

    def withhold(self, why: str) -> None:
        self.withheld = f"; {why}"


def match(
    settings: ElicitationSettings, server: str, in_flight: tuple[str, ...], params: ElicitRequestParams
) -> Matched:
    return Matched(auto_answers.first_match(settings.auto_answers, server, in_flight, params))


async def answer_if(matched: Matched, applies: str, params: ElicitRequestParams, mode: str) -> None:
    """The matched entry answers (`Answered`) when it `applies` now and may answer this request; else
    the request goes on, with the reason it may not in `matched.withheld`."""
    entry = matched.entry
    if entry is None or entry.applies != applies or matched.withheld:
        return
    if entry.action == "accept" and mode == "form":
        # start-up: forms costs ~30 ms, only form requests need it
        from mcp_sampling_proxy.approval.forms import prepare

        await anyio.to_thread.run_sync(prepare)  # the content is checked: load that off the loop
    verdict = auto_answers.judge(entry, params, mode)
    if verdict.kind == "withheld":
        log.warning("auto-answer not used", auto_answer=entry.name, why=verdict.why)
        matched.withhold(verdict.why)
        return
    if verdict.kind == "misfit" or verdict.result is None:
        # a policy mistake the operator must see, never an answer the form did not ask for
        log.warning("auto-answer refused: its content does not fit the form", auto_answer=entry.name, why=verdict.why)
        raise Answered("decline", verdict.why, "error", None, rule=entry.name)
    result = verdict.result
    raise Answered(result["action"], verdict.why, "auto_answered", result.get("content"), rule=entry.name)
