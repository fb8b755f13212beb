"""The daemon's one start/stop rule (gateway/lifecycle.py): every part stops, newest
first, before any part lets go; a part that did not start is owed nothing."""

from __future__ import annotations

import pytest

from gateway.lifecycle import Lifecycle


async def test_all_stop_newest_first_then_all_shut_down_newest_first() -> None:
    said: list[str] = []

    def step(what: str):
        async def run() -> None:
            said.append(what)
        return run

    async def starting(name: str) -> str:
        said.append(f"start {name}")
        return name

    async with Lifecycle() as life:
        assert await life.start("store", starting("store"), shutdown=step("close store")) \
            == "store"
        life.add("turns", stop=step("drain turns"))
        await life.start("web", starting("web"), stop=step("stop web"),
                         shutdown=step("disconnect web"))
    assert said == ["start store", "start web", "stop web", "drain turns",
                    "disconnect web", "close store"]


async def test_a_failed_start_is_owed_nothing_and_one_failing_step_stops_no_other(
        ) -> None:
    said: list[str] = []

    async def broken() -> None:
        raise RuntimeError("cannot connect")

    async def failing_stop() -> None:
        said.append("router stop fails")
        raise RuntimeError("boom")

    async def note(what: str) -> None:
        said.append(what)

    with pytest.raises(RuntimeError, match="cannot connect"):
        async with Lifecycle() as life:
            await life.start("jobs", note("start jobs"), shutdown=lambda: note("detach jobs"))
            await life.start("router", note("start router"), stop=failing_stop)
            await life.start("telegram", broken(), shutdown=lambda: note("disconnect"))
    assert said == ["start jobs", "start router", "router stop fails", "detach jobs"]
