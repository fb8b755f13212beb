"""What the approval tests share: a dangerous command that is harmless to run, a model
that runs it on "clean up", and a count of how often it ran (the ``marker`` fixture,
in conftest, wires them up)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.fakes.openai_server import CallTools, ChatRequest, Response, Say
from tests.model_support import user_says


def dangerous(marker: Path) -> str:
    """A command the built-in list asks about ("DROP TABLE"), harmless to run: it appends
    a line to ``marker``, so a test can count how often it ran."""
    return f"echo ran >> {marker}; echo 'DROP TABLE demo'"


def runner_brain(marker: Path, **calls: Any):
    """The model: "clean up" runs the dangerous command; a tool result is reported."""
    def brain(req: ChatRequest) -> Response:
        if req.last["role"] == "tool":
            return Say("tool said: " + req.last["content"])
        if user_says(req, "clean up"):
            return CallTools([("terminal", {"command": dangerous(marker), **calls})])
        return Say("ok")
    return brain


def runs(marker: Path) -> int:
    return marker.read_text().count("ran") if marker.exists() else 0
