"""The adapter contract (docs/adapters.md), one case per promise, each run against every
platform through its harness (tests/conformance/harness.py): the real client library
against the platform's fake server, the whole gateway, the built-in command agent or
the model agent on the fake endpoint. A case never names a platform."""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.config.registry import platforms
from gateway.words.events import MessageEvent
from tests.approval_support import runner_brain, runs
from tests.conformance.harness import Harness, Place, Promise
from tests.fakes.openai_server import FakeOpenAI, Say
from tests.helpers import eventually
from tests.model_support import user_says


def received(harness: Harness, place: Place) -> list[str]:
    """The command agent's answers in ``place``, by their first line ("Received: ...")."""
    return [t.split("\n")[0] for t in harness.bot_texts(place) if t.startswith("Received: ")]


def notices(harness: Harness, place: Place) -> list[str]:
    return [t for t in harness.bot_texts(place) if t.startswith("Job ")]


def words(tag: str, count: int = 24) -> str:
    """A reply long enough to be streamed in many pieces, naming its thread."""
    return " ".join(f"{tag}-{i}" for i in range(count))


# ---------------------------------------------------------------------- routes

@pytest.mark.promise(Promise.ROUTES)
async def test_each_thread_and_the_dm_are_routes_of_their_own(
        harness: Harness, tmp_path: Path) -> None:
    async with harness.running(tmp_path / "home"):
        places = list(harness.places())
        for turn in range(2):  # interleaved: a reply never follows "the last message seen"
            for place in places:
                await harness.say(place, f"turn {turn} in {place.label}")
        for place in places:
            await harness.say(place, "/status")
        await eventually(lambda: all(len(received(harness, p)) == 2 for p in places)
                         and all(_session_key(harness, p) for p in places),
                         what="every place's replies")
        await harness.settled()
        for place in places:
            assert received(harness, place) == [
                f"Received: turn {turn} in {place.label}" for turn in range(2)], place.label
        keys = [_session_key(harness, p) for p in places]
        assert len(set(keys)) == len(places), keys  # a session each


def _session_key(harness: Harness, place: Place) -> str | None:
    """The session key ``/status`` names in ``place`` (None before it answered)."""
    for text in harness.bot_texts(place):
        found = re.search(r"agent:main:\S+", text)
        if found:
            return found.group(0).strip("`*")
    return None


# ---------------------------------------------------------------------- notices

@pytest.mark.promise(Promise.NOTICES)
async def test_a_notice_is_reported_in_the_thread_its_job_started_in_and_only_there(
        harness: Harness, tmp_path: Path) -> None:
    async with harness.running(tmp_path / "home"):
        places = list(harness.places())
        for place in places:
            await harness.say(place, f"/bg sleep 0.3; echo marker-{place.label}")
        for turn in range(3):  # chatter everywhere while the jobs run
            for place in places:
                await harness.say(place, f"chatter {turn}")
        await eventually(lambda: all(notices(harness, p) for p in places), what="every notice")
        await harness.settled()
        for place in places:
            (notice,) = notices(harness, place)
            assert f"marker-{place.label}" in notice, place.label
            others = [t for p in places if p != place for t in harness.bot_texts(p)]
            assert not [t for t in others if f"marker-{place.label}" in t], place.label


# ---------------------------------------------------------------------- send failures

#: six watch notices (RW1 … RW6), then the job's end; its output shows the last line only
WATCHED = "/watch RW for i in 1 2 3 4 5 6; do echo RW$i; done; echo end"
IN_ORDER = ["RW1", "RW2", "RW3", "RW4", "RW5", "RW6", "finished"]


def reported(texts: list[str]) -> list[str]:
    """Which notices ``texts`` report, in order (notices put together count each)."""
    return [m.group(0).strip(": ") for t in texts
            for m in re.finditer(r"\bRW\d\b| finished: ", t)]


@pytest.mark.promise(Promise.SEND_FAILURES)
async def test_429_and_5xx_on_sends_lose_double_and_reorder_no_notice(
        harness: Harness, tmp_path: Path) -> None:
    settings = {"jobs": {"watch": {"cooldown_seconds": 0}, "tail_lines": 1}}
    async with harness.running(tmp_path / "home", settings=settings):
        place = harness.places().thread_a
        harness.fail_sends(place, 429, retry_after=1, count=2, containing="RW2")
        harness.fail_sends(place, 503, count=2, containing="RW4")
        harness.fail_sends(place, 429, retry_after=1, containing=" finished: ")
        await harness.say(place, WATCHED)
        await eventually(lambda: "finished" in reported(harness.bot_texts(place)),
                         what="the job's end")
        await harness.settled()
        assert reported(harness.bot_texts(place)) == IN_ORDER


# ---------------------------------------------------------------------- streaming

@pytest.mark.promise(Promise.STREAMING)
async def test_a_streamed_reply_is_previewed_and_ends_as_one_final_message(
        harness: Harness, tmp_path: Path, model: FakeOpenAI) -> None:
    """Previewed where the platform can edit a message (its capabilities), sent whole
    where it cannot; one final message either way."""
    model.chunk_delay = 0.05
    model.brain = lambda req: Say(words("aa") if user_says(req, "stream in A")
                                  else words("bb"))
    async with harness.running(tmp_path / "home", model=model):
        places = harness.places()
        a, b = places.thread_a, places.thread_b
        await harness.say(a, "stream in A")
        await harness.say(b, "stream in B")
        await eventually(lambda: harness.bot_texts(a) == [words("aa")]
                         and harness.bot_texts(b) == [words("bb")],
                         what="one final message in each thread")
        await harness.settled()
        edits = platforms()[harness.name].capabilities.edits
        for place, tag, other in ((a, "aa", "bb"), (b, "bb", "aa")):
            assert harness.bot_texts(place) == [words(tag)], place.label  # exactly one
            previews = harness.previews(place)
            if not edits:  # a platform that cannot edit is sent the reply whole
                assert previews == [], f"{place.label}: nothing before the reply"
                continue
            assert len(set(previews)) >= 2, f"{place.label}: shown as it grew: {previews}"
            for preview in previews:
                assert words(tag).startswith(preview) and f"{other}-" not in preview, preview
        assert harness.bot_texts(places.dm) == []
    assert model.requests[-1].stream == edits  # a reply sent whole is not streamed


# ---------------------------------------------------------------------- approvals

@pytest.mark.promise(Promise.APPROVALS)
async def test_an_approval_is_decided_once_by_a_press_and_a_second_press_changes_nothing(
        harness: Harness, tmp_path: Path, model: FakeOpenAI) -> None:
    marker = tmp_path / "marker"
    model.brain = runner_brain(marker)
    async with harness.running(tmp_path / "home", model=model) as gw:
        places = harness.places()
        place = places.thread_a
        await harness.say(place, "clean up")
        (asked,) = await eventually(lambda: harness.approvals_shown(place),
                                    what="the approval request")
        assert asked.outcome is None and runs(marker) == 0  # the turn waits for the choice

        await harness.press(place, asked.approval_id, "once")
        await eventually(lambda: runs(marker) == 1 and _tool_said(harness, place),
                         what="the command run and its result back")
        await eventually(lambda: harness.approvals_shown(place)[0].outcome,
                         what="the outcome shown in the request's place")
        await harness.settled()
        (decided,) = harness.approvals_shown(place)

        await harness.press(place, asked.approval_id, "deny")  # too late: already decided
        await harness.settled()
        assert harness.approvals_shown(place) == [decided]
        assert decided.outcome is not None and "Approved once" in decided.outcome
        assert runs(marker) == 1 and len(_tool_said(harness, place)) == 1
        approvals = gw.runner.approvals
        assert approvals is not None
        record = await approvals.get(asked.approval_id)
        assert record is not None and (record.state, record.decision) == ("approved", "once")
        assert harness.approvals_shown(places.thread_b) == []
        assert harness.approvals_shown(places.dm) == []


def _tool_said(harness: Harness, place: Place) -> list[str]:
    return [t for t in harness.bot_texts(place) if t.startswith("tool said: ")]


# ---------------------------------------------------------------------- files

@pytest.mark.promise(Promise.FILES)
async def test_a_file_comes_in_for_the_turn_and_one_goes_out_into_the_thread(
        harness: Harness, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.txt").write_bytes(b"all good\n")
    home = tmp_path / "home"
    async with harness.running(home, settings={"attachments": {"send_roots": [str(out)]}}):
        places = harness.places()
        a, b = places.thread_a, places.thread_b
        await harness.send_file(a, "notes.txt", b"hello, conformance\n", caption="my notes")
        await harness.say(b, f"/send {out / 'report.txt'} the report")
        (answer,) = await eventually(
            lambda: [t for t in harness.bot_texts(a) if "notes.txt" in t],
            what="the answer to the file")
        await eventually(lambda: harness.files_posted(b), what="the file posted")
        await harness.settled()
        (saved,) = [p for p in (home / "files").rglob("*notes.txt") if p.is_file()]
        assert saved.read_bytes() == b"hello, conformance\n"
        assert str(saved) in answer and "my notes" in answer
        assert harness.files_posted(b) == [("report.txt", b"all good\n")]
        assert harness.files_posted(a) == [] and harness.files_posted(places.dm) == []


# ---------------------------------------------------------------------- while down

@pytest.mark.promise(Promise.WHILE_DOWN)
async def test_what_was_said_while_the_daemon_was_down_is_handled_once_after_it_starts(
        harness: Harness, tmp_path: Path) -> None:
    async with harness.running(tmp_path / "home"):
        places = list(harness.places())
        a, dm = places[0], places[2]
        for place in places:
            await harness.say(place, f"before in {place.label}")
        await eventually(lambda: all(received(harness, p) for p in places),
                         what="the first replies")
        await harness.settled()
        await harness.stop_daemon()
        for i in range(3):  # nobody is there to be told
            await harness.say(a, f"while down {i}")
        await harness.say(dm, "while down in the dm")
        await harness.start_daemon()
        await eventually(lambda: len(received(harness, a)) == 4 and len(received(harness, dm))
                         == 2, what="what was said while down")
        await harness.settled()
        assert received(harness, a) == [f"Received: before in {a.label}",
                                        *(f"Received: while down {i}" for i in range(3))]
        assert received(harness, dm) == [f"Received: before in {dm.label}",
                                         "Received: while down in the dm"]
        assert received(harness, places[1]) == [f"Received: before in {places[1].label}"]


@pytest.mark.promise(Promise.WHILE_DOWN)
async def test_what_was_said_in_a_thread_while_down_joins_that_threads_own_session(
        harness: Harness, tmp_path: Path) -> None:
    """Read back after the start (a channel's history, the updates kept, a sync), a
    message said in a thread belongs to the session the thread had before: its
    ``/status`` names the thread's session key and id, not a new conversation's that
    only shares the thread's channel (what is started there would be in no history of
    the thread's)."""
    async with harness.running(tmp_path / "home"):
        places = harness.places()
        a = places.thread_a
        await harness.say(a, "/status")
        (before,) = await eventually(lambda: statuses(harness, a), what="the thread's /status")
        await harness.settled()
        await harness.stop_daemon()
        await harness.say(a, "/status")  # nobody is there to be told
        await harness.say(a, "while down in the thread")
        await harness.start_daemon()
        await eventually(lambda: len(statuses(harness, a)) == 2 and received(harness, a),
                         what="what was said in the thread while down")
        await harness.settled()
        assert statuses(harness, a) == [before, before]  # (session key, session id)
        assert received(harness, a) == ["Received: while down in the thread"]
        assert harness.bot_texts(places.thread_b) == []
        assert harness.bot_texts(places.dm) == []


_STATUS = re.compile(r"session key: \W*(agent:main:[^\s`*]+)\W*\s+\W*session id: \W*([\w-]+)")


def statuses(harness: Harness, place: Place) -> list[tuple[str, str]]:
    """The session key and id each ``/status`` answer in ``place`` names, oldest first."""
    return [found.groups() for t in harness.bot_texts(place)  # type: ignore[misc]
            if (found := _STATUS.search(t))]


# ---------------------------------------------------------------------- the cursor

@pytest.mark.promise(Promise.CURSOR)
async def test_the_platform_is_told_a_message_is_taken_only_after_its_journal_commit(
        harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first journal write fails (the store went away): the platform must not have
    been told the message is taken, so it comes again, and is answered once; at the
    commit that works, it must not have been told yet either."""
    text = "confirmed once written"
    async with harness.running(tmp_path / "home") as gw:
        place = harness.places().dm
        inbound = gw.runner.inbound
        journal = inbound.record
        #: at each attempt to journal the message: whether the platform was told already
        told_at: list[tuple[str, bool]] = []

        async def record(event: MessageEvent, *args: Any, **kwargs: Any) -> Any:
            if event.text != text:
                return await journal(event, *args, **kwargs)
            if not told_at:  # the first write never commits
                told_at.append(("failed", harness.confirmed(place, text)))
                raise sqlite3.OperationalError("disk I/O error")
            entry = await journal(event, *args, **kwargs)
            told_at.append(("committed", harness.confirmed(place, text)))
            return entry

        monkeypatch.setattr(inbound, "record", record)
        await harness.say(place, text)
        await eventually(lambda: received(harness, place), what="the message answered")
        await harness.settled()
        assert harness.confirmed(place, text)
        assert told_at[:2] == [("failed", False), ("committed", False)], told_at
        assert received(harness, place) == [f"Received: {text}"]


# ---------------------------------------------------------------------- what is left out

def _cases() -> set[Promise]:
    module = sys.modules[__name__]
    return {mark.args[0] for name in dir(module) if name.startswith("test_")
            for mark in getattr(getattr(module, name), "pytestmark", [])
            if mark.name == "promise"}


def test_what_does_not_apply(platform: str, promise: Promise, reason: str) -> None:
    """A (platform, promise) pair the cases are not generated for, and why: listed, not
    skipped, so a run shows what each platform is not checked on."""
    assert promise in _cases(), f"{platform} leaves out {promise}, which no case checks"
    assert len(reason.split()) >= 4, f"{platform} says too little about {promise}"
