"""Web messages sent with an id a few milliseconds before ``kill -9``, round after round.

Shared by ``tests/test_inbound.py`` (a few rounds) and ``bench/inbound_kill.py``
(hundreds). The client behaves like the page: every message has an id, an
unacknowledged one is sent again after each reconnect, and an acknowledged one
never again. Each round starts ``homing run``, sends the backlog and one new
message, and kills the daemon a random 0–4 ms later. A last daemon gets the
rest; then the transcript tells, for every message, how often it was handled:
never (lost), once, or more (doubled). A message whose turn had started
something lasting when the daemon died counts as handled once when its
conversation was told so (none of these does).
"""

from __future__ import annotations

import asyncio
import random
import signal
from dataclasses import dataclass

import aiohttp

from tests.real_daemon import daemon_settled, start_daemon

CONVERSATION = "inbound-kill"


@dataclass
class Tally:
    rounds: int = 0
    sent: int = 0
    acked_before_kill: int = 0
    handled: int = 0
    lost: int = 0
    doubled: int = 0
    #: answers the client was sent twice that a page could not tell apart (no key, or
    #: different keys): what a user would see twice
    shown_twice: int = 0


async def kill_rounds(env: dict[str, str], *, rounds: int, seed: int,
                      max_delay: float = 0.004) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    unacked: dict[str, str] = {}
    shown: dict[str, list[str | None]] = {}  # message → keys of the answers it got
    async with aiohttp.ClientSession() as http:
        for number in range(rounds):
            daemon, url = await start_daemon(env)
            killed = False
            try:
                async with http.ws_connect(f"{url}ws?conversation={CONVERSATION}") as ws:
                    await ws.receive_json(timeout=30)
                    for frame_id, text in list(unacked.items()):  # the page's resend
                        await ws.send_json({"type": "message", "text": text, "id": frame_id})
                    frame_id, text = f"m{number}", f"msg-{number}"
                    unacked[frame_id] = text
                    tally.sent += 1
                    await ws.send_json({"type": "message", "text": text, "id": frame_id})
                    await _take_acks(ws, unacked, rng.uniform(0, max_delay), shown)
                    daemon.send_signal(signal.SIGKILL)
                    killed = True
                    tally.acked_before_kill += sum(1 for k in (frame_id,) if k not in unacked)
            finally:
                if not killed:
                    daemon.send_signal(signal.SIGKILL)
                await daemon.wait()
                tally.rounds += 1
        daemon, url = await start_daemon(env)
        try:
            async with http.ws_connect(f"{url}ws?conversation={CONVERSATION}") as ws:
                await ws.receive_json(timeout=30)
                for frame_id, text in list(unacked.items()):
                    await ws.send_json({"type": "message", "text": text, "id": frame_id})
                while unacked:
                    await _take_acks(ws, unacked, 10.0, shown, until_empty=True)
                counts = await _settled_counts(env, http, url)
                await _take_the_rest(ws, unacked, shown)  # the last answers' frames
        finally:
            daemon.send_signal(signal.SIGTERM)
            await asyncio.wait_for(daemon.wait(), 20)
    for n in range(tally.sent):
        seen = counts.get(f"msg-{n}", 0)
        tally.lost += seen == 0
        tally.doubled += seen > 1
        tally.handled += seen >= 1
        keys = shown.get(f"msg-{n}", [])  # a page shows each key once, each keyless frame
        tally.shown_twice += len(set(keys)) > 1 or keys.count(None) > 1
    return tally


async def _take_acks(ws: aiohttp.ClientWebSocketResponse, unacked: dict[str, str],
                     seconds: float, shown: dict[str, list[str | None]], *,
                     until_empty: bool = False) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (remaining := deadline - loop.time()) > 0 and not (until_empty and not unacked):
        try:
            frame = await ws.receive_json(timeout=remaining)
        except (TimeoutError, TypeError, aiohttp.ClientError):
            return
        _note(frame, unacked, shown)


async def _take_the_rest(ws: aiohttp.ClientWebSocketResponse, unacked: dict[str, str],
                         shown: dict[str, list[str | None]]) -> None:
    """Every frame the daemon has sent this tab: a frame it refuses is answered at once,
    after all those before it."""
    await ws.send_json({"type": "end-of-test"})
    while True:
        frame = await ws.receive_json(timeout=30)
        if frame.get("type") == "error":  # the refusal: nothing was sent after it
            return
        _note(frame, unacked, shown)


def _note(frame: dict, unacked: dict[str, str], shown: dict[str, list[str | None]]) -> None:
    if frame.get("type") == "ack":
        unacked.pop(frame["id"], None)
    elif frame.get("kind") in ("reply", "system"):
        text = frame.get("text", "")
        if text.startswith("Received: msg-"):
            shown.setdefault(text.split()[1], []).append(frame.get("key"))
        elif "may not have finished" in text:
            shown.setdefault(text.split("“", 1)[1].split("”", 1)[0], []).append(
                frame.get("key"))


async def _settled_counts(env: dict[str, str], http: aiohttp.ClientSession, url: str,
                          timeout: float = 30.0) -> dict[str, int]:
    """The counts once the daemon has nothing left to do — every message it took in
    handled — or, after ``timeout``, as they are (what is missing then is lost)."""
    try:
        await daemon_settled(env, timeout)
    except AssertionError:
        pass  # not settled in time: counted as they are, what is missing is lost
    return await _counts(http, url)


async def _counts(http: aiohttp.ClientSession, url: str) -> dict[str, int]:
    """How often each message was handled (answered, or told "may not have finished")."""
    async with http.get(f"{url}api/sessions?archived=include") as resp:
        sessions = [s for s in (await resp.json())["sessions"]
                    if s["conversation"] == CONVERSATION]
    counts: dict[str, int] = {}
    for session in sessions:
        async with http.get(f"{url}api/sessions/{session['id']}/messages") as resp:
            for line in (await resp.json())["messages"]:
                text = line["text"]
                if line["role"] == "reply" and text.startswith("Received: msg-"):
                    key = text.split()[1]
                elif line["role"] == "system" and "may not have finished" in text:
                    key = text.split("“", 1)[1].split("”", 1)[0]
                else:
                    continue
                counts[key] = counts.get(key, 0) + 1
    return counts
