"""The real daemon as it stops: it takes nothing new, and a fenced one leaves at once.

From SIGTERM (``gateway_stopping``) a daemon finishes the turns under way and takes
nothing new: a new web tab is refused with 503, each open tab is closed with 1001
"going away" once its conversation's turn is done (so the page reconnects, to the
next life or another instance), no schedule run is claimed, and a message that
arrives is journaled and answered by the next life, once. A fenced life (another
process took its instance name) has nothing to drain: it closes its tabs and its web
port at once and exits 1, long before ``shutdown.drain_timeout_seconds`` — before
anything that waits on a store out of reach. On a shared store, what a stopping
instance journaled and will not begin is answered by another one at once.

Each turn under way is a ``/run`` command waiting for a gate file the test creates,
so the stop lasts exactly as long as the test needs.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType
from yarl import URL

from gateway.daemon.assembly import running_gateway
from gateway.daemon.restart_notices import RESTARTING
from gateway.words.events import MessageEvent, MessageOutcome
from gateway.words.route import Route
from tests.conftest import make_config
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import eventually, eventually_async, running_command, write_lock_held
from tests.memory_platform import MemoryAdapter
from tests.real_daemon import daemon_settled, home_env, start_daemon, web_home
from tests.test_web import Tab, open_tab

#: far longer than any wait below: a daemon that drains, where it should not, is seen
DRAIN = 60
#: a deadline for one step, far below DRAIN and far above what a loaded machine needs
STEP = 30
ALICE = 1
TOPIC = dict(chat_id=-1001, chat_type="supergroup", is_forum=True, thread_id=42,
             is_topic_message=True)


def gated(gate: Path, marker: str) -> str:
    """A foreground command that runs until ``gate`` exists: a turn under way."""
    return f"while [ ! -e {gate} ]; do sleep 0.05; done; echo {marker}"


async def until_closed(tab: Tab, timeout: float = STEP) -> tuple[list[dict[str, Any]], int]:
    """The frames a tab gets until its socket is closed, and the close code."""
    frames = []
    while True:
        msg = await tab.ws.receive(timeout=timeout)
        if msg.type == WSMsgType.CLOSE:
            # the code the server sent, as a browser's close event has it: aiohttp's own
            # close_code turns 1006 when its close reply finds the server gone already
            return frames, int(msg.data)
        if msg.type in (WSMsgType.CLOSING, WSMsgType.CLOSED):
            code = tab.ws.close_code
            assert code is not None
            return frames, code
        frames.append(json.loads(msg.data))


def read_store(env: dict[str, str], sql: str) -> list[Any]:
    db = Path(env["HOMING_HOME"]) / "state.db"
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        return conn.execute(sql).fetchall()


def write_store(env: dict[str, str], sql: str, params: tuple[Any, ...]) -> None:
    """A change the daemon did not make (it reads the row again when woken)."""
    db = Path(env["HOMING_HOME"]) / "state.db"
    with closing(sqlite3.connect(db, timeout=5)) as conn, conn:
        conn.execute(sql, params)


async def test_a_stopping_daemon_takes_no_new_tab_and_leaves_new_messages_to_the_next_life(
        tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    env = web_home(tmp_path / "home", f"shutdown: {{drain_timeout_seconds: {DRAIN}}}\n")
    first, url = await start_daemon(env)
    second = None
    try:
        async with aiohttp.ClientSession() as http:
            base = url.rstrip("/")
            busy, idle = await open_tab(http, base, "busy"), await open_tab(http, base, "idle")
            command = gated(gate, "turn-done")
            await busy.say(f"/run {command}")
            await eventually(lambda: running_command(command, first.pid), STEP,
                             "the turn running its command")
            first.send_signal(signal.SIGTERM)

            # a tab with no turn under way goes at once, "going away": its page reconnects
            assert await until_closed(idle) == ([], 1001)
            # a new tab is refused, saying why; the page tries again
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(f"{base}/ws", params={"conversation": "busy"})
            assert refused.value.status == 503
            async with http.get(f"{base}/ws") as resp:
                assert resp.status == 503 and "stopping" in (await resp.json())["error"]
            # a message on the tab still open is journaled (acknowledged), not run here
            await busy.ws.send_json({"type": "message", "text": "sent while stopping",
                                     "id": "m-stop"})
            frames = [await busy.frame(STEP)]
            while frames[-1]["type"] != "ack":
                frames.append(await busy.frame(STEP))
            assert frames.pop() == {"type": "ack", "id": "m-stop"}

            gate.touch()  # the turn under way ends: its reply, then the tab goes
            rest, code = await until_closed(busy)
            assert code == 1001
            (told, reply) = frames + rest
            assert (told["kind"], told["text"]) == ("system", RESTARTING)
            assert reply["kind"] == "reply" and "\nturn-done" in reply["text"]
            assert await asyncio.wait_for(first.wait(), STEP) == 0
            assert read_store(env, "SELECT state FROM inbound WHERE platform_id = "
                                   "'busy:m-stop'") == [("received",)]

            second, url = await start_daemon(env)  # the next life answers it, once
            base = url.rstrip("/")

            async def transcript() -> list[tuple[str, str]]:
                async with http.get(f"{base}/api/conversations/busy/messages") as resp:
                    lines = [(m["role"], m["text"]) for m in (await resp.json())["messages"]]
                return lines if any("sent while stopping" in t for r, t in lines
                                    if r == "reply") else []

            await eventually_async(transcript, STEP, "the next life's answer")
            await daemon_settled(env)
            lines = await transcript()
            assert [(r, t.splitlines()[0]) for r, t in lines if "sent while stopping" in t] == [
                ("user", "sent while stopping"), ("reply", "Received: sent while stopping")]
    finally:
        gate.touch()
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


def telegram_home(home: Path, fake: FakeTelegram) -> dict[str, str]:
    home.mkdir()
    (home / "config.yaml").write_text(
        f"shutdown: {{drain_timeout_seconds: {DRAIN}}}\n"
        "schedules: {timezone: UTC}\n"
        "platforms:\n  web: {port: 0}\n"
        f"  telegram: {{enabled: true, token: '{fake.token}', base_url: '{fake.base_url}', "
        f"base_file_url: '{fake.base_file_url}', allowed_users: ['{ALICE}']}}\n")
    return home_env(home)


async def test_a_schedule_due_while_the_daemon_stops_is_run_by_the_next_life_once(
        tmp_path: Path, telegram: FakeTelegram) -> None:
    """While the stop is held open (the restart notice's Telegram send held, a turn
    under way), a schedule made for an hour ahead is moved to the past in the store,
    and the scheduler is woken through the REST API (resuming another schedule): one
    still running would claim the due run at once. None is claimed; the next life runs
    it, once."""
    fake, gate = telegram, tmp_path / "gate"
    env = telegram_home(tmp_path / "home", fake)
    first, url = await start_daemon(env)
    second = None
    try:
        async with aiohttp.ClientSession() as http:
            api = f"{url.rstrip('/')}/api/schedules"
            command = gated(gate, "turn-done")
            fake.user_message(chat_id=ALICE, text=f"/run {command}")
            await eventually(lambda: running_command(command, first.pid), STEP,
                             "the turn running its command")
            fake.user_message(text="/at +1h echo at-marker", **TOPIC)
            fake.user_message(text="/every 1d echo waker", **TOPIC)
            await eventually(lambda: sum(("at-marker" in s.text or "waker" in s.text)
                                         for s in fake.sent) >= 2, STEP, "the schedules made")
            async with http.get(api) as resp:
                made = {s["command"]: s["id"] for s in (await resp.json())["schedules"]}
            due, waker = made["echo at-marker"], made["echo waker"]
            async with http.patch(f"{api}/{waker}", json={"paused": True}) as resp:
                assert resp.status == 200
            fake.hold_sends()
            first.send_signal(signal.SIGTERM)
            await eventually(lambda: any(m == "sendMessage" and p.get("text") == RESTARTING
                                         for m, p in fake.calls), STEP, "the restart notice")
            moved = time.time() - 60
            write_store(env, "UPDATE schedules SET next_run_at = ? WHERE id = ?", (moved, due))
            # a scheduler still running wakes at this and claims the due run at once
            async with http.patch(f"{api}/{waker}", json={"paused": False}) as resp:
                assert resp.status == 200
            fake.release_sends()
            gate.touch()
            assert await asyncio.wait_for(first.wait(), STEP) == 0
        assert read_store(env, "SELECT * FROM schedule_runs") == []
        assert read_store(env, f"SELECT next_run_at FROM schedules WHERE id = '{due}'") == [
            (moved,)]

        second, _ = await start_daemon(env)

        def runs() -> list[str]:
            return [s.text for s in fake.sent if "the run of" in s.text]

        await eventually(runs, STEP, "the scheduled run's notice")
        await eventually(lambda: not fake.pending_updates, STEP, "every update taken")
        await daemon_settled(env)
        (run,) = runs()
        assert "at-marker" in run and "exit code 0" in run
        assert read_store(env, "SELECT schedule_id, state FROM schedule_runs") == [
            (due, "finished")]
    finally:
        fake.release_sends()
        gate.touch()
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()


def pg_home(home: Path, url: str) -> dict[str, str]:
    home.mkdir()
    (home / "config.yaml").write_text(
        f"store: {{url: '{url}'}}\n"
        "instance: {name: vps1}\n"
        "cluster: {lease_seconds: 3, failover_seconds: 6}\n"
        f"shutdown: {{drain_timeout_seconds: {DRAIN}}}\n"
        "platforms: {web: {port: 0}}\n")
    return home_env(home)


async def test_a_fenced_daemon_closes_its_tabs_and_web_port_at_once_and_exits_1(
        tmp_path: Path, pg_fresh_url: str) -> None:
    gate = tmp_path / "gate"
    env = pg_home(tmp_path / "first", pg_fresh_url)
    first, url = await start_daemon(env)
    second = None
    try:
        async with aiohttp.ClientSession() as http:
            base = url.rstrip("/")
            tab = await open_tab(http, base, "fenced")
            command = gated(gate, "never-said")
            await tab.say(f"/run {command}")
            await eventually(lambda: running_command(command, first.pid), STEP,
                             "the turn running its command")
            # another process starts under its name: the first life is over at its next
            # renewal, with a turn under way that it may no longer answer
            second, _ = await start_daemon(pg_home(tmp_path / "second", pg_fresh_url))
            # (what it gets first is the survivor's word on the turn it left, if anything)
            _, code = await until_closed(tab)
            assert code == 1001  # going away: the page reconnects, to the survivor

            async def port_closed() -> bool:
                try:
                    async with http.get(f"{base}/healthz"):
                        return False
                except aiohttp.ClientConnectorError:
                    return True

            await eventually_async(port_closed, STEP, "the web port closed")
            assert await asyncio.wait_for(first.wait(), STEP) == 1  # not after the drain
        log = (tmp_path / "first" / "logs" / "homing.log").read_text()
        assert '"instance_fenced"' in log
    finally:
        gate.touch()
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.terminate()
                await proc.wait()


async def test_a_daemon_fenced_by_a_store_out_of_reach_closes_its_port_before_it_waits_on_it(
        tmp_path: Path, pg_fresh_url: str) -> None:
    """Every write hangs (another client holds the store's write lock): the renewal
    too, so the life ends once its lease has surely run out. Its tabs are closed with
    1001 and its port closed while the store is still out of reach; what the rest of
    the stop writes waits, and the daemon exits 1 once it may."""
    env = pg_home(tmp_path / "home", pg_fresh_url)
    first, url = await start_daemon(env)
    try:
        async with aiohttp.ClientSession() as http:
            base = url.rstrip("/")
            tab = await open_tab(http, base, "cut-off")
            address = URL(base)

            async def port_closed() -> bool:
                # a connection, not a request: a request would wait on the store
                try:
                    _, writer = await asyncio.open_connection(address.host, address.port)
                except ConnectionRefusedError:
                    return True
                writer.close()
                return False

            async with write_lock_held(pg_fresh_url):
                assert (await until_closed(tab))[1] == 1001
                await eventually_async(port_closed, STEP, "the web port closed")
            assert await asyncio.wait_for(first.wait(), STEP) == 1
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()


class LastBatch(MemoryAdapter):
    """A poller that, told to stop, finishes journaling the batch it had fetched (as
    the Telegram adapter does) before it returns."""

    def __init__(self) -> None:
        super().__init__("memory")
        self.last: asyncio.Future[MessageOutcome] | None = None

    async def stop_receiving(self) -> None:
        assert self._runner is not None
        received = self._runner.receive(MessageEvent(
            text="fetched as the stop began", route=Route("memory", "dm", "1", user_id="1")))
        await received.journaled
        self.last = received.handled


async def test_the_platforms_stop_taking_in_before_the_turns_are_cut_off(
        tmp_path: Path) -> None:
    """Nothing a poller fetched before it stopped is left behind: its turn runs here
    (what the poller has not fetched waits at the platform for the next one)."""
    poller = LastBatch()
    async with running_gateway(make_config(tmp_path / "home"), [poller]) as gw:
        await gw.life.stop()
        assert poller.last is not None and await poller.last == "handled"
        assert [m.text.splitlines()[0] for m in poller.sent] == [
            "Received: fetched as the stop began"]


def pg_web_home(home: Path, url: str, name: str) -> dict[str, str]:
    home.mkdir()
    (home / "config.yaml").write_text(
        f"store: {{url: '{url}'}}\n"
        f"instance: {{name: {name}}}\n"
        "cluster: {lease_seconds: 3, failover_seconds: 6}\n"
        f"shutdown: {{drain_timeout_seconds: {DRAIN}}}\n"
        "platforms: {web: {port: 0}}\n")
    return home_env(home)


async def test_a_stopping_instance_hands_what_it_will_not_answer_to_a_survivor_at_once(
        tmp_path: Path, pg_fresh_url: str) -> None:
    """A message journaled on a stopping instance is answered by another one as soon as
    its conversation's turn under way there is done — while the stopping instance
    still drains another conversation's turn, not after it has ended."""
    gates = {name: tmp_path / f"gate-{name}" for name in ("busy", "other")}
    first, url = await start_daemon(pg_web_home(tmp_path / "first", pg_fresh_url, "vps1"))
    survivor, survivor_url = await start_daemon(
        pg_web_home(tmp_path / "second", pg_fresh_url, "vps2"))
    try:
        async with aiohttp.ClientSession() as http:
            base = url.rstrip("/")
            tabs = {name: await open_tab(http, base, name) for name in gates}
            for name, tab in tabs.items():
                command = gated(gates[name], f"{name}-done")
                await tab.say(f"/run {command}")
                await eventually(lambda c=command: running_command(c, first.pid), STEP,
                                 f"the {name} turn running its command")
            first.send_signal(signal.SIGTERM)
            busy = tabs["busy"]
            await busy.ws.send_json({"type": "message", "text": "sent while stopping",
                                     "id": "m-stop"})
            while (await busy.frame(STEP)) != {"type": "ack", "id": "m-stop"}:
                pass
            gates["busy"].touch()  # its conversation's turn here ends; "other" goes on
            assert (await until_closed(busy))[1] == 1001

            async def answered() -> list[str]:
                async with http.get(f"{survivor_url.rstrip('/')}/api/conversations/busy/"
                                    "messages") as resp:
                    return [m["text"].splitlines()[0] for m in (await resp.json())["messages"]
                            if m["role"] == "reply" and "sent while stopping" in m["text"]]

            assert await eventually_async(answered, STEP, "the survivor's answer") == [
                "Received: sent while stopping"]
            assert first.returncode is None  # still draining the other turn
            gates["other"].touch()
            assert await asyncio.wait_for(first.wait(), STEP) == 0
            assert await answered() == ["Received: sent while stopping"]  # once
    finally:
        for gate in gates.values():
            gate.touch()
        for proc in (first, survivor):
            if proc.returncode is None:
                proc.terminate()
                await proc.wait()
