"""What the web console decides, with a proxy on its socket: the request it shows in full (and what of a
server's text and images it will not let into the page), the budget it shows, the answers a person's
clicks post (approve, deny, an edited prompt, a form checked then filled, an answer reviewed and replaced)
and the audit lines and usage that follow. The real relay and services in memory
(helpers/playbook.py, `console=True`), the real console client on the proxy's real socket, the real app
through httpx's ASGI transport (helpers/played_console.py), a loopback LLM speaking the OpenAI wire
format. A person clicking through the page in Chromium: tests/e2e/test_web_console.py."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes.llm_server import FakeLLMServer
from helpers.playbook import Playbook
from helpers.played_console import played_page
from helpers.support import openai_policy

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("llm_key")]

SERVER = "kitchen_sink_server"
RULES = "rules:\n  - name: ask\n    action: prompt\n    budget: {tokens: 50000, per: 1d}\n"
# the smallest PNG: one red pixel
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de0000000c4944415408d763f8cfc000000301010018dd8db0"
        "0000000049454e44ae426082"
    )
).decode()


def prompt(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": 100}


class Asked:
    """A server's request in flight while the test answers it on the page: `response` once it ended."""

    def __init__(self) -> None:
        self.response: dict[str, Any] = {}

    async def run(self, request: Awaitable[dict[str, Any]]) -> None:
        self.response = await request


async def test_a_request_is_shown_in_full_with_its_budget_and_approved_once(tmp_path: Path, llm: FakeLLMServer) -> None:
    """Markup in a server's text stays text, a PNG is passed as a data URL the page can show, the budget
    line counts the request's own reservation; Allow once runs it, and the audit line and the usage follow."""
    markup = "<b>describe</b> this <img src=x onerror=alert(1)>"
    params = {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": markup}, {"type": "image", "data": PNG, "mimeType": "image/png"}],
            }
        ],
        "systemPrompt": "You are terse.",
        "maxTokens": 120,
        "modelPreferences": {"hints": [{"name": "gpt-test"}]},
    }
    policy = openai_policy(llm.base_url, rules=RULES)
    async with Playbook(tmp_path, policy, name=SERVER, console=True) as play, played_page(play) as page:
        await play.handshake({})
        asked = Asked()
        async with anyio.create_task_group() as tg:
            tg.start_soon(asked.run, play.sample(params))
            question = await page.question("pending")
            request = question["request"]
            assert request["messages"] == [
                {
                    "role": "user",
                    "blocks": [
                        {"type": "text", "text": markup},
                        {"type": "image", "mimeType": "image/png", "data": PNG, "bytes": len(base64.b64decode(PNG))},
                    ],
                }
            ]
            assert (request["system"], request["max_tokens"], request["hints"]) == ("You are terse.", 120, ["gpt-test"])
            assert (question["server"], question["rule"], question["tool"]) == (SERVER, "ask", "sample")
            budget = question["limits"]["budget"]  # the proxy reserved the request's worst case before asking
            assert (budget["limit"], budget["per"], budget["used"]) == (50000, "1d", 0)
            assert 0 < budget["reserved"] < 1000 and budget["left"] == 50000 - budget["reserved"]
            approved = await page.answer(question, action="approve", scope="once")
            assert approved.status_code == 200 and approved.json() == {"ok": True}
        assert asked.response["result"]["role"] == "assistant", asked.response
        assert "describe" in json.dumps(llm.last.body)
        assert (await page.state())["questions"] == []
        [line] = await page.audit_lines()
        assert "approved by console (rule ask)" in line["line"] and line["decision"] == "approved"
        usage = await page.get("api/usage")
        assert [s["server"] for s in usage["servers"]] == [SERVER]
        assert usage["budgets"][0]["server"] == SERVER and usage["budgets"][0]["used"] > 0


async def test_deny_refuses_the_request_and_the_audit_filters_find_it(tmp_path: Path, llm: FakeLLMServer) -> None:
    policy = openai_policy(llm.base_url, rules=RULES)
    async with Playbook(tmp_path, policy, name=SERVER, console=True) as play, played_page(play) as page:
        await play.handshake({})
        asked = Asked()
        async with anyio.create_task_group() as tg:
            tg.start_soon(asked.run, play.sample(prompt("please")))
            assert (await page.answer(await page.question(), action="deny")).status_code == 200
        error = asked.response["error"]
        assert error["code"] == -1 and "rejected at the companion console" in error["message"]
        assert llm.requests == []
        [line] = await page.audit_lines(decision="rejected")
        assert line["decision"] == "rejected" and line["server"] == SERVER
        assert await page.audit_lines(0, decision="approved") == []


async def test_an_edited_prompt_is_what_the_llm_gets(tmp_path: Path, llm: FakeLLMServer) -> None:
    policy = openai_policy(llm.base_url, rules=RULES)
    async with Playbook(tmp_path, policy, name=SERVER, console=True) as play, played_page(play) as page:
        await play.handshake({})
        asked = Asked()
        async with anyio.create_task_group() as tg:
            tg.start_soon(asked.run, play.sample(prompt("the server's words")))
            question = await page.question()
            assert question["request"]["editable"] and question["request"]["prompt_text"] == "the server's words"
            edited = await page.answer(question, action="approve", text="the operator's words")
            assert edited.status_code == 200
        assert asked.response["result"]["content"]["text"] == "echo: the operator's words"
        assert "the server's words" not in json.dumps(llm.last.body)
        [line] = await page.audit_lines()
        assert "prompt edited by console" in line["line"]


async def test_a_form_answer_is_checked_before_it_is_sent(tmp_path: Path) -> None:
    """A value the schema refuses is said (422) and the form stays pending; a good one is the server's answer."""
    schema = {
        "type": "object",
        "properties": {
            "age": {"type": "integer", "minimum": 0, "title": "Age"},
            "color": {"type": "string", "enum": ["r", "g"], "enumNames": ["Red", "Green"], "title": "Colour"},
            "news": {"type": "boolean", "title": "Newsletter", "default": False},
        },
        "required": ["age"],
    }
    async with Playbook(tmp_path, name=SERVER, console=True) as play, played_page(play, policy=False) as page:
        await play.handshake({})
        asked = Asked()
        async with anyio.create_task_group() as tg:
            tg.start_soon(asked.run, play.elicit({"message": "Tell us about you", "requestedSchema": schema}))
            question = await page.question("elicit")
            assert question["message"] == "Tell us about you" and question["mode"] == "form"
            fields = {f["name"]: f for f in question["form"]["fields"]}
            assert (fields["age"]["label"], fields["age"]["required"], fields["age"]["minimum"]) == ("Age", True, 0)
            assert fields["color"]["options"] == [{"value": "r", "label": "Red"}, {"value": "g", "label": "Green"}]
            assert (fields["news"]["kind"], fields["news"]["default"]) == ("boolean", False)
            refused = await page.answer(question, action="accept", content={"age": -4})
            assert refused.status_code == 422 and "too small" in refused.json()["error"]
            assert [q["key"] for q in (await page.state())["questions"]] == [question["key"]]  # asked again
            content = {"age": 42, "color": "g", "news": True}
            assert (await page.answer(question, action="accept", content=content)).status_code == 200
        assert asked.response["result"] == {"action": "accept", "content": content}


async def test_the_answer_under_review_can_be_replaced(tmp_path: Path, llm: FakeLLMServer) -> None:
    llm.reply_text("the model's draft")
    policy = openai_policy(llm.base_url) + "approval:\n  review_response: true\n"
    async with Playbook(tmp_path, policy, name=SERVER, console=True) as play, played_page(play) as page:
        await play.handshake({})
        asked = Asked()
        async with anyio.create_task_group() as tg:
            tg.start_soon(asked.run, play.sample(prompt("x")))
            question = await page.question("review")
            assert question["answer"] == "the model's draft" and question["prompt"].endswith("user: x")
            replaced = await page.answer(question, action="send", text="the operator's answer")
            assert replaced.status_code == 200
        assert asked.response["result"]["content"]["text"] == "the operator's answer"


async def test_images_the_page_cannot_show_safely_are_named_not_passed_on(tmp_path: Path, llm: FakeLLMServer) -> None:
    """An SVG can carry script: neither one of its type nor one that claims to be a PNG reaches the page."""
    svg = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"/>').decode()
    params = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "data": svg, "mimeType": "image/svg+xml"},
                    {"type": "image", "data": svg, "mimeType": "image/png"},
                ],
            }
        ],
        "maxTokens": 10,
    }
    policy = openai_policy(llm.base_url, rules=RULES)
    async with Playbook(tmp_path, policy, name=SERVER, console=True) as play, played_page(play) as page:
        await play.handshake({})
        async with anyio.create_task_group() as tg:
            tg.start_soon(play.sample, params)
            question = await page.question()
            blocks = question["request"]["messages"][0]["blocks"]
            assert blocks == [
                {"type": "image", "refused": "image of type 'image/svg+xml' not shown (only PNG, JPEG, GIF, WebP)"},
                {"type": "image", "refused": "image data is not image/png"},
            ]
            assert svg not in json.dumps(await page.state())
            assert (await page.answer(question, action="deny")).status_code == 200


async def test_the_page_is_told_when_a_question_is_no_longer_pending(tmp_path: Path, llm: FakeLLMServer) -> None:
    """Two tabs answer the same question: the second gets 409 and the proxy one answer."""
    policy = openai_policy(llm.base_url, rules=RULES)
    async with Playbook(tmp_path, policy, name=SERVER, console=True) as play, played_page(play) as page:
        await play.handshake({})
        asked = Asked()
        async with anyio.create_task_group() as tg:
            tg.start_soon(asked.run, play.sample(prompt("once")))
            question = await page.question()
            assert (await page.answer(question, action="deny")).status_code == 200
            late = await page.answer(question, action="approve")
            assert late.status_code == 409 and "no longer pending" in late.json()["error"]
        assert asked.response["error"]["code"] == -1 and llm.requests == []
