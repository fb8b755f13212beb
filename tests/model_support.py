"""What the model-agent tests share: a config for the fake endpoint, and predicates
that tell the fake which kind of request it is answering (the fixtures ``model`` and
``model_gateway`` are in conftest)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.compression import SUMMARY_PROMPT
from agent.history import NOTICE_MARK
from agent.model import SUBAGENT_PROMPT
from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway
from gateway.platforms.web.adapter import WebAdapter
from tests.conftest import make_config
from tests.fakes.openai_server import ChatRequest, FakeOpenAI
from tests.test_web import Tab


def model_settings(fake: FakeOpenAI) -> dict[str, object]:
    """The model agent on ``fake``, as ``make_config`` overrides."""
    return dict(agent__backend="openai", agent__base_url=fake.base_url,
                agent__model="fake-model", agent__api_key="sk-test",
                agent__retry_backoff_seconds=0.01, agent__timeout_seconds=5)


def model_config(home: Path, fake: FakeOpenAI, **overrides: object) -> Config:
    return make_config(home, **{**model_settings(fake), **overrides})


def web_base(gw: Gateway) -> str:
    adapter = gw.runner.adapters["web"].inner  # the platform's own, behind the fence
    assert isinstance(adapter, WebAdapter)
    return f"http://127.0.0.1:{adapter.port}"


def is_notice(req: ChatRequest) -> bool:
    """The request answers a notice: its last message is the marked, user-role notice."""
    return req.last["role"] == "user" and NOTICE_MARK in req.last["content"]


def has_notice(req: ChatRequest) -> bool:
    """Whether a notice is anywhere in the request (a notice turn's later rounds)."""
    return any(m["role"] == "user" and NOTICE_MARK in m["content"] for m in req.messages)


def is_subagent(req: ChatRequest) -> bool:
    return req.messages[0]["content"] == SUBAGENT_PROMPT


def is_summary(req: ChatRequest) -> bool:
    return req.messages[0]["content"] == SUMMARY_PROMPT


def user_says(req: ChatRequest, text: str) -> bool:
    return req.last["role"] == "user" and text in req.last["content"]


async def reply_text(tab: Tab, timeout: float = 10) -> dict[str, Any]:
    return await tab.frame(timeout)
