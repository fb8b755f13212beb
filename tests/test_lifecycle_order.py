"""The daemon's one start/stop rule (gateway/daemon/lifecycle.py): every part stops taking
anything new, newest first, before any part drains, and every part drains before any
lets go; a part that did not start is owed nothing."""

from __future__ import annotations

import pytest

from gateway.daemon.lifecycle import Lifecycle


def step(said: list[str], what: str):
    async def run() -> None:
        said.append(what)
    return run


async def test_all_stop_then_all_drain_then_all_shut_down_each_newest_first() -> None:
    said: list[str] = []

    async def starting(name: str) -> str:
        said.append(f"start {name}")
        return name

    async with Lifecycle() as life:
        assert await life.start("store", starting("store"),
                                shutdown=step(said, "close store")) == "store"
        life.add("turns", stop=step(said, "begin no turn"), drain=step(said, "drain turns"))
        await life.start("web", starting("web"), stop=step(said, "refuse new tabs"),
                         shutdown=step(said, "disconnect web"))
        life.add("delegations", drain=step(said, "drain delegations"))
    assert said == ["start store", "start web", "refuse new tabs", "begin no turn",
                    "drain delegations", "drain turns", "disconnect web", "close store"]


async def test_a_stop_takes_nothing_new_at_once_and_the_close_does_the_rest_once() -> None:
    said: list[str] = []
    async with Lifecycle() as life:
        life.add("turns", stop=step(said, "begin no turn"), drain=step(said, "drain turns"))
        life.add("scheduler", stop=step(said, "claim no run"))
        await life.stop()  # the signal: nothing new from here, before anything slow
        assert said == ["claim no run", "begin no turn"]
        await life.stop()  # owed once
        said.append("tell the conversations")
    assert said == ["claim no run", "begin no turn", "tell the conversations", "drain turns"]


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
