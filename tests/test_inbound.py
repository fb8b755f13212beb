"""Nothing lost on the way in: the journal, acknowledgements, replay, catch-up, late and
too-old messages — on Telegram (the real library against the fake Bot API, the real
daemon killed), Discord (the fake gateway and its history), and the web chat."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import aiohttp
import structlog

from gateway.daemon.assembly import running_gateway
from gateway.inbound.journal import acted_ops, handling
from gateway.words.events import MessageEvent, SendResult
from gateway.words.route import Route
from tests.conftest import make_config
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import eventually, eventually_async, running_command, settled
from tests.memory_platform import MemoryAdapter
from tests.real_daemon import daemon_settled, start_daemon, web_home
from tests.test_telegram import ALICE, daemon_env
from tests.test_web import open_tab

CHAT = Route("memory", "dm", "1", user_id="1")


def replies(adapter: MemoryAdapter, text: str) -> list[str]:
    return [m.text for m in adapter.sent if m.kind == "reply" and text in m.text]


# --- the journal itself ---------------------------------------------------------------------

async def test_a_message_seen_twice_is_handled_once(tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory")
    async with running_gateway(make_config(tmp_path / "home"), [adapter]) as gw:
        event = MessageEvent(text="only once", route=CHAT)
        first = gw.runner.receive(event, platform_id="update-7")
        again = gw.runner.receive(event, platform_id="update-7")  # redelivered
        assert (await first.journaled, await again.journaled) == ("journaled", "duplicate")
        assert (await first.handled, await again.handled) == ("handled", "duplicate")
    adapter = MemoryAdapter("memory")
    async with running_gateway(make_config(tmp_path / "home"), [adapter]) as gw:
        late = gw.runner.receive(event, platform_id="update-7")  # after a restart too
        assert await late.handled == "duplicate"
        assert replies(adapter, "only once") == []


async def test_late_messages_say_so_and_too_old_ones_are_not_run_but_told_once(
        tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory")
    async with running_gateway(make_config(tmp_path / "home"), [adapter]) as gw:
        now = time.time()
        old = [gw.runner.receive(MessageEvent(text=f"/bg echo stale-{i}", route=CHAT),
                                 sent_at=now - 3600 - i) for i in range(2)]
        late = gw.runner.receive(MessageEvent(text="a bit late", route=CHAT), sent_at=now - 120)
        assert [await r.handled for r in (*old, late)] == ["skipped", "skipped", "handled"]
        note = await eventually(
            lambda: [m.text for m in adapter.sent if "were not run" in m.text], what="the note")
        assert len(note) == 1 and "/bg echo stale-0" in note[0] and "stale-1" in note[0]
        assert "inbound.max_age_seconds" in note[0]
        assert await gw.jobs.list() == []  # last night's /bg did not run this morning
        texts = [m.text for m in adapter.sent]
        late_note = next(t for t in texts if t.startswith("(This message was sent at"))
        assert texts.index(late_note) < texts.index(replies(adapter, "a bit late")[0])


async def test_after_a_crash_what_was_taken_in_is_handled_once_in_order(tmp_path: Path) -> None:
    config = make_config(tmp_path / "home")
    first = MemoryAdapter("memory")
    async with running_gateway(config, [first]) as gw:
        # the state a kill -9 leaves: a turn that had started a job, one answered, one
        # begun and cut short before anything lasted, one waiting
        key = gw.runner.session_key_for(CHAT)
        entries = [await gw.runner.inbound.record(MessageEvent(text=t, route=CHAT), key)
                   for t in ("/bg echo begun", "answered", "cut short", "waiting")]
        for entry in entries[:3]:
            await gw.runner.inbound.started(entry.id)
        with handling(entries[0].id):
            await gw.store.db.write(acted_ops())
        await gw.store.db.write([gw.runner.inbound.replied_op(entries[1].id)])
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second]) as gw:
        await eventually(lambda: len(second.sent) >= 3, what="the replay")
        await settled(gw)
        texts = [m.text for m in second.sent]
        assert len(texts) == 3
        assert "may not have finished" in texts[0] and "/bg echo begun" in texts[0]
        assert texts[1].startswith("Received: cut short")  # nothing of it lasted: again
        assert texts[2].startswith("Received: waiting")
        assert await gw.jobs.list() == []  # the /bg that had run is not run a second time
        assert await gw.runner.inbound.unfinished() == []


async def test_a_replayed_stop_answers_that_nothing_runs_and_does_not_stop_itself(
        tmp_path: Path) -> None:
    """/stop sent while the gateway stopped is answered by the next life: nothing runs
    there (the replay that answers it is not "the turn under way")."""
    config = make_config(tmp_path / "home")
    adapter = MemoryAdapter("memory")
    async with running_gateway(config, [adapter]) as gw:
        gw.runner.stop_accepting()
        assert await adapter.receive("/stop", CHAT) == "shutdown"  # left for the next life
    adapter = MemoryAdapter("memory")
    async with running_gateway(config, [adapter]) as gw:
        await settled(gw)
        assert [m.text for m in adapter.sent] == ["Nothing is running in this conversation."]


async def test_waiting_behind_a_long_turn_is_not_the_gateway_being_away(
        tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory")
    config = make_config(tmp_path / "home", inbound__late_after_seconds=1,
                         inbound__max_age_seconds=2)
    async with running_gateway(config, [adapter]) as gw:
        long = gw.runner.receive(MessageEvent(text="/run sleep 2.5", route=CHAT))
        behind = gw.runner.receive(MessageEvent(text="queued behind it", route=CHAT))
        assert (await long.handled, await behind.handled) == ("handled", "handled")
    assert replies(adapter, "queued behind it")  # run, though 2.5 s passed: not "away"
    assert not any("while the gateway was away" in m.text or "were not run" in m.text
                   for m in adapter.sent)


async def test_too_old_messages_stay_unfinished_until_their_note_is_out(tmp_path: Path) -> None:
    """The note is what makes "skipped" true: a stop before it goes out (or a failed
    send) leaves the messages to be told about at the next start."""
    config = make_config(tmp_path / "home")
    first = MemoryAdapter("memory")
    first.scripted_failures["1"] = [SendResult.failed("chat gone for a moment")]
    async with running_gateway(config, [first]) as gw:
        with structlog.testing.capture_logs() as logs:
            stale = gw.runner.receive(MessageEvent(text="/bg echo stale", route=CHAT),
                                      sent_at=time.time() - 3600)
            assert await stale.handled == "skipped"
            # the note goes out a moment later (skipped ones are gathered into one)
            await eventually(lambda: any(e["event"] == "skip_note_failed" for e in logs),
                             what="the note's send failing")
        await gw.store.db.flush()
        assert len(await gw.runner.inbound.unfinished()) == 1
    second = MemoryAdapter("memory")
    async with running_gateway(config, [second]) as gw:
        await eventually(lambda: [m for m in second.sent if "was not run" in m.text],
                         what="the note at the next start")
        assert await gw.jobs.list() == []

        async def finished() -> bool:
            return await gw.runner.inbound.unfinished() == []

        await eventually_async(finished, what="the message recorded as skipped")
    assert len([m for m in second.sent if "was not run" in m.text]) == 1


async def test_while_the_store_is_broken_a_chat_gets_one_apology_a_minute(
        tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory")
    async with running_gateway(make_config(tmp_path / "home"), [adapter]) as gw:
        await gw.store.db.write([("DROP TABLE inbound", ())])
        outcomes = [await gw.runner.submit(MessageEvent(text=f"try {i}", route=CHAT),
                                           platform_id="update-9") for i in range(5)]
        assert outcomes == ["failed"] * 5  # not journaled, so not acknowledged: redelivered
        assert len([m for m in adapter.sent if "could not be recorded" in m.text]) == 1


async def test_handled_messages_are_forgotten_after_a_week_not_before(tmp_path: Path) -> None:
    adapter = MemoryAdapter("memory")
    async with running_gateway(make_config(tmp_path / "home"), [adapter]) as gw:
        for platform_id in ("old", "recent"):
            received = gw.runner.receive(MessageEvent(text=platform_id, route=CHAT),
                                         platform_id=platform_id)
            assert await received.handled == "handled"
        await gw.store.db.flush()
        await gw.store.db.write([("UPDATE inbound SET received_at = received_at - 8 * 86400 "
                                  "WHERE platform_id = 'old'", ())])
        assert await gw.runner.inbound.prune(time.time() - 7 * 86400) == 1
        assert not await gw.runner.inbound.seen("memory", "old")
        assert await gw.runner.inbound.seen("memory", "recent")


# --- the web chat ---------------------------------------------------------------------------

async def test_a_web_message_with_an_id_is_acknowledged_once_journaled_and_handled_once(
        web, http) -> None:
    runner, base = web
    tab = await open_tab(http, base, "acks")
    await tab.ws.send_str(json.dumps({"type": "message", "text": "hello with id", "id": "m-1"}))
    assert await tab.frame() == {"type": "ack", "id": "m-1"}  # before the turn's reply
    assert (await tab.frame())["text"].startswith("Received: hello with id")
    await tab.ws.send_str(json.dumps({"type": "message", "text": "hello with id", "id": "m-1"}))
    assert await tab.frame() == {"type": "ack", "id": "m-1"}  # resent: acknowledged again
    await tab.no_frame(0.3)  # and not handled twice
    await tab.say("no id")
    assert (await tab.frame())["text"].startswith("Received: no id")  # as before: no ack
    for bad in ({"id": ""}, {"id": "x" * 65}, {"id": 5}):
        await tab.ws.send_str(json.dumps({"type": "message", "text": "t", **bad}))
        assert "'id' must be" in (await tab.frame())["error"]


async def test_a_web_message_typed_long_ago_is_not_run_and_answers_carry_a_key(
        web, http) -> None:
    """A page that was offline all night resends with the time it was typed; answers to
    a message carry a key that stays the same if a crash makes them come again."""
    runner, base = web
    tab = await open_tab(http, base, "overnight")
    await tab.ws.send_str(json.dumps({"type": "message", "text": "/bg echo deploy", "id": "n-1",
                                      "sent_at": time.time() - 8 * 3600}))
    assert await tab.frame() == {"type": "ack", "id": "n-1"}
    note = await tab.frame()
    assert note["kind"] == "system" and "was not run" in note["text"]
    assert runner.jobs_running() == 0  # last night's deploy did not start this morning
    await tab.ws.send_str(json.dumps({"type": "message", "text": "now", "id": "n-2",
                                      "sent_at": time.time()}))
    assert await tab.frame() == {"type": "ack", "id": "n-2"}
    answer = await tab.frame()
    assert answer["text"].startswith("Received: now") and len(answer["key"]) == 16
    await tab.ws.send_str(json.dumps({"type": "message", "text": "t", "sent_at": "yesterday"}))
    assert "'sent_at' must be a number" in (await tab.frame())["error"]


async def test_web_messages_sent_around_kill_9_are_lost_never_and_doubled_never(
        tmp_path: Path) -> None:
    from tests.inbound_kill import kill_rounds

    tally = await kill_rounds(web_home(tmp_path / "home"), rounds=8, seed=3)
    assert tally.lost == 0 and tally.doubled == 0 and tally.shown_twice == 0, tally
    assert tally.sent > 0 and tally.handled == tally.sent


# --- Telegram -------------------------------------------------------------------------------

async def test_telegram_updates_handed_out_before_a_kill_9_are_each_answered_once(
        tmp_path: Path) -> None:
    async with FakeTelegram() as fake:
        env = daemon_env(tmp_path / "home", fake)
        first, _ = await start_daemon(env)
        second = None
        try:
            await fake.wait_handed_out(0)
            fake.hold_sends()  # the daemon takes the batch in; its replies hang
            for i in range(5):
                fake.user_message(chat_id=ALICE, text=f"batch {i}")
            await fake.wait_handed_out(5, timeout=20)
            first.send_signal(signal.SIGKILL)
            await first.wait()
            for i in range(3):  # said while the daemon is down
                fake.user_message(chat_id=ALICE, text=f"while down {i}")
            fake.user_message(chat_id=ALICE, text="/bg echo from-last-night",
                              date=time.time() - 7200)
            fake.release_sends()
            second, _ = await start_daemon(env)
            await eventually(lambda: len([s for s in fake.sent if "Received:" in s.text]) >= 8
                             and any("not run:" in s.text for s in fake.sent),
                             timeout=30, what=f"every answer: {[s.text[:40] for s in fake.sent]}")
            await eventually(lambda: not fake.pending_updates, what="every update acknowledged")
            await daemon_settled(env)
            answered = [s.text.split("\n")[0] for s in fake.sent if "Received:" in s.text]
            assert sorted(answered) == sorted(
                [f"Received: batch {i}" for i in range(5)]
                + [f"Received: while down {i}" for i in range(3)])  # each exactly once
            (note,) = [s.text for s in fake.sent if "not run:" in s.text]
            assert "/bg echo from-last-night" in note
            assert not any(s.text.startswith("Started job") for s in fake.sent)
        finally:
            fake.release_sends()
            for proc in (first, second):
                if proc is not None and proc.returncode is None:
                    proc.terminate()
                    await proc.wait()


# --- Discord ---------------------------------------------------------------------------------

async def test_discord_messages_posted_while_stopped_are_handled_after_the_start(
        tmp_path: Path, discord_endpoints) -> None:
    from tests.fakes.discord_server import FakeDiscord
    from tests.test_discord import CHANNEL, THREAD_A, discord_config

    async with FakeDiscord() as fake:
        fake.add_channel(CHANNEL, "builds")
        fake.add_thread(THREAD_A, CHANNEL)
        config = discord_config(tmp_path / "home", fake)
        async with running_gateway(config) as gw:
            await gw.runner.adapters["discord"].wait_connected(timeout=30)
            for channel in (CHANNEL, THREAD_A):
                await fake.user_message(content=f"before in {channel}", channel_id=channel)
            await eventually(lambda: len(fake.sent) == 2, what="the first replies")
        for i in range(3):  # the gateway is stopped: nobody is there to be told
            await fake.user_message(content=f"while stopped {i}", channel_id=THREAD_A)
        await fake.user_message(content="while stopped in the channel", channel_id=CHANNEL)
        async with running_gateway(config) as gw:
            # a live message the moment the new session is there, before discord.py has
            # even said it is ready: the missed ones must neither be lost behind it nor
            # answered after it
            await fake.wait_until_ready(timeout=30)
            await fake.user_message(content="live right away", channel_id=THREAD_A)
            await gw.runner.adapters["discord"].wait_connected(timeout=30)
            await eventually(lambda: len(fake.sent) == 7, timeout=30, what="the missed ones")
            await settled(gw)
        answered = [s.content.split("\n")[0] for s in fake.sent[2:]]
        assert sorted(answered) == sorted([f"Received: while stopped {i}" for i in range(3)]
                                          + ["Received: while stopped in the channel",
                                             "Received: live right away"])
        thread_answers = [s.content for s in fake.sent[2:] if s.channel_id == THREAD_A]
        assert [a.split("\n")[0] for a in thread_answers] == [
            *(f"Received: while stopped {i}" for i in range(3)),
            "Received: live right away"]  # in order


async def test_a_discord_notice_sent_again_after_a_crash_is_posted_once(
        tmp_path: Path, discord_endpoints) -> None:
    from tests.fakes.discord_server import FakeDiscord
    from tests.test_discord import CHANNEL, discord_config

    async with FakeDiscord() as fake:
        fake.add_channel(CHANNEL, "builds")
        config = discord_config(tmp_path / "home", fake)
        async with running_gateway(config) as gw:
            await gw.runner.adapters["discord"].wait_connected(timeout=30)
            await fake.user_message(content="/bg echo nonce-marker", channel_id=CHANNEL)
            await eventually(lambda: any("nonce-marker" in s.content for s in fake.sent),
                             timeout=30, what="the notice")
            await gw.router.settle()
            # the crash between send and record: the notice is pending again, unsent
            await gw.store.db.write([("UPDATE notifications SET state = 'pending', "
                                      "sent_message_id = NULL, claimed_by = NULL", ())])
            gw.router.wake()

            async def delivered_again() -> bool:
                (row,) = await gw.outbox.list()
                return row.state == "delivered" and fake.nonce_hits == 1

            await eventually_async(delivered_again, timeout=30, what="the second delivery")
        assert len([s for s in fake.sent if "nonce-marker" in s.content]) == 1


# --- restarts the user can see ---------------------------------------------------------------

async def test_restart_and_back_online_are_in_the_transcript_and_delegations_finish(
        tmp_path: Path) -> None:
    env = web_home(tmp_path / "home")
    first, url = await start_daemon(env)
    second = None
    try:
        async with aiohttp.ClientSession() as http:
            tab = await open_tab(http, url.rstrip("/"), "restarts")
            await tab.say("/delegate sleep 2; echo delegated-done")
            await tab.frame()
            await tab.say("/bg sleep 30")
            await tab.frame()
            first.send_signal(signal.SIGTERM)  # graceful: the delegation may finish
            assert await asyncio.wait_for(first.wait(), 30) == 0
            second, url = await start_daemon(env)
            tab = await open_tab(http, url.rstrip("/"), "restarts")

            async def transcript() -> list[str]:
                async with http.get(f"{url}api/sessions/{tab.ready['session_id']}/messages"
                                    ) as resp:
                    lines = [m["text"] for m in (await resp.json())["messages"]]
                return lines if any("Back online." in t for t in lines) and any(
                    "delegated-done" in t for t in lines) else []

            lines = await eventually_async(transcript, timeout=20, what="the transcript")
            assert any(t.startswith("The gateway is restarting") for t in lines)
            assert not any("was lost" in t for t in lines)  # it finished in the drain
    finally:
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_a_kill_9_mid_turn_on_discord_neither_loses_nor_repeats_the_message(
        tmp_path: Path, discord_endpoints) -> None:
    from tests.fakes.discord_server import FakeDiscord
    from tests.real_daemon import home_env
    from tests.test_discord import ALICE as DISCORD_USER
    from tests.test_discord import CHANNEL

    async with FakeDiscord() as fake:
        fake.add_channel(CHANNEL, "builds")
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.yaml").write_text(
            "platforms:\n  web: {port: 0}\n"
            f"  discord: {{enabled: true, token: '{fake.token}', api_base: '{fake.api_base}', "
            f"gateway_url: '{fake.gateway_url}', allowed_users: ['{DISCORD_USER}']}}\n")
        env = home_env(home)
        first, _ = await start_daemon(env)
        second = None
        try:
            await fake.wait_until_ready(timeout=20)
            await fake.user_message(content="/run sleep 3; echo mid-turn-marker",
                                    channel_id=CHANNEL)
            await eventually(lambda: running_command("sleep 3; echo mid-turn-marker", first.pid),
                             timeout=20, what="the turn running its command")
            first.send_signal(signal.SIGKILL)
            await first.wait()
            second, _ = await start_daemon(env)
            await eventually(lambda: any("mid-turn-marker" in s.content for s in fake.sent),
                             timeout=30, what="the conversation told")
            await daemon_settled(env)
            # its command had begun: it is not run a second time (it may have had effects),
            # and the conversation hears once that it may not have finished
            (told,) = [s for s in fake.sent if "mid-turn-marker" in s.content]
            assert "stopped while it was handling" in told.content
            assert told.message_reference is not None  # under the message it is about
        finally:
            for proc in (first, second):
                if proc is not None and proc.returncode is None:
                    proc.terminate()
                    await proc.wait()


async def test_a_platform_cursor_is_kept_across_a_restart_and_only_moves_when_put(
        tmp_path: Path) -> None:
    """Matrix's sync token: the next life goes on from the one saved last."""
    from gateway.inbound.cursors import Cursors
    from gateway.sessions.store import SessionStore

    async with SessionStore(tmp_path / "state.db") as store:
        cursors = Cursors(store.db)
        assert await cursors.get("matrix", "since") is None
        await cursors.put("matrix", "since", "s1")
        await cursors.put("matrix", "since", "s2")
        await cursors.put("other", "since", "o1")
    async with SessionStore(tmp_path / "state.db") as store:
        cursors = Cursors(store.db)
        assert await cursors.get("matrix", "since") == "s2"
        assert await cursors.get("other", "since") == "o1"
