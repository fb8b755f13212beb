"""``kill -9`` of the real daemon serving Matrix on a real Synapse, round after round:
people write in two threads of a room while a turn runs, the daemon is killed in the
middle of it at a random moment, they write again while it is dead, and it starts
again. Every message must be answered once, in its own thread — its reply, or the
gateway's word that it stopped while handling it (when the kill came before its reply
went out) — and every job's notice sent once. A reply sent with the kill before its
record is found in the room by the next life (``MatrixAdapter.delivered``), so it is not
followed by that word: a reply and the word both, two replies, a lost message, or an
answer in another thread fail the test.

The figures (messages, kills, answered once and of those told it was interrupted,
doubled, lost, wrong thread) are printed; ``-s`` shows them.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.helpers import eventually_async
from tests.matrix_homeserver import Homeserver, HumanClient, MakeUser, Message
from tests.real_daemon import home_env, start_daemon

ROUNDS = int(os.environ.get("HOMING_MATRIX_KILL_ROUNDS", "4"))
#: how the gateway tells a conversation it stopped while handling a message
_STOPPED_NOTE = "(The gateway stopped while it was handling"


@dataclass
class Tally:
    messages: int = 0
    notices: int = 0
    kills: int = 0
    once: int = 0
    #: of those: answered by the word that the gateway stopped while handling it
    interrupted: int = 0
    #: answered, and then told the gateway stopped while handling it: a reply the next
    #: life did not find
    told_twice: int = 0
    doubled: int = 0
    lost: int = 0
    wrong_thread: int = 0

    def line(self) -> str:
        return (f"messages {self.messages}, notices {self.notices}, kills {self.kills}: "
                f"answered once {self.once} (of those, told it was interrupted "
                f"{self.interrupted}), answered and then told it may not have finished "
                f"{self.told_twice}, doubled {self.doubled}, lost {self.lost}, "
                f"wrong thread {self.wrong_thread}")


def _home(home: Path, homeserver: Homeserver, bot_token: str, bot: str, device: str,
          person: str) -> dict[str, str]:
    home.mkdir()
    config = {"platforms": {"web": {"port": 0}, "matrix": {
        "enabled": True, "homeserver": homeserver.url, "user_id": bot,
        "access_token": "${MATRIX_ACCESS_TOKEN}", "device_id": device,
        "allowed_users": [person]}}}
    (home / "config.yaml").write_text(yaml.safe_dump(config))
    env_file = home / "homing.env"
    env_file.write_text(f"MATRIX_ACCESS_TOKEN={bot_token}\n")
    env_file.chmod(0o600)
    return home_env(home)


async def test_killed_mid_turn_and_while_stopped_each_message_is_answered_once_in_its_thread(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser) -> None:
    seed = int(os.environ.get("HOMING_MATRIX_KILL_SEED", time.time()))
    rng = random.Random(seed)
    bot = await homeserver.register(f"homing-kill-{seed % 100000}")
    person = await matrix_user("person")
    env = _home(tmp_path / "home", homeserver, bot.access_token, bot.user_id, bot.device_id,
                person.user_id)
    room = await person.create_room(invite=[bot.user_id], name="kill")
    tally = Tally()
    #: marker -> the thread it was said in
    said: dict[str, str] = {}
    notices: dict[str, str] = {}
    daemon, _ = await start_daemon(env)
    try:
        await eventually_async(lambda: _joined(person, room, bot.user_id), 60,
                               "the bot in the room")
        roots = [await person.send_text(room, f"thread {name} starts") for name in "ab"]
        for number in range(ROUNDS):
            for thread, root in zip("ab", roots, strict=True):
                marker = f"r{number:02d}{thread}"
                said[marker] = root
                # a turn that runs a while: the kill lands in it, or just before or after
                await person.reply_in_thread(room, root, f"/run echo {marker}; sleep 0.4")
                job = f"j{number:02d}{thread}"
                notices[job] = root
                await person.reply_in_thread(room, root, f"/bg sleep 0.5; echo {job}")
            await asyncio.sleep(rng.uniform(0.05, 0.8))
            daemon.send_signal(signal.SIGKILL)
            await daemon.wait()
            tally.kills += 1
            for thread, root in zip("ab", roots, strict=True):  # nobody there to be told
                marker = f"d{number:02d}{thread}"
                said[marker] = root
                await person.reply_in_thread(room, root, f"while down {marker}")
            daemon, _ = await start_daemon(env)

        async def all_answered() -> bool:
            messages = await person.messages(room)
            return all(_answers(messages, bot.user_id, m) for m in said) and all(
                _notices(messages, bot.user_id, j) for j in notices)

        await eventually_async(all_answered, 120, "every message answered, every notice")
        await asyncio.sleep(2)  # what would come twice comes now (a wait, not a measure)
        messages = await person.messages(room)
    finally:
        if daemon.returncode is None:
            daemon.send_signal(signal.SIGTERM)
            await daemon.wait()
    twice = []
    for marker, root in said.items():
        tally.messages += 1
        answers = _answers(messages, bot.user_id, marker)
        if len(answers) > 1:
            twice.append(f"{marker}: " + " | ".join(m.body[:80] for m in answers))
        tally.once += len(answers) == 1
        notes = [m for m in answers if m.body.startswith(_STOPPED_NOTE)]
        tally.interrupted += len(answers) == 1 and len(notes) == 1
        if len(answers) == 2 and len(notes) == 1 and not answers[0].body.startswith(
                _STOPPED_NOTE):
            tally.told_twice += 1
        else:
            tally.doubled += len(answers) > 1
        tally.lost += not answers
        tally.wrong_thread += any(m.thread_root != root for m in answers)
    for job, root in notices.items():
        tally.notices += 1
        sent = _notices(messages, bot.user_id, job)
        tally.doubled += len(sent) > 1
        tally.lost += not sent
        tally.wrong_thread += any(m.thread_root != root for m in sent)
    print(f"matrix kill -9 (seed {seed}; HOMING_MATRIX_KILL_SEED repeats it): {tally.line()}")
    assert (tally.told_twice, tally.doubled, tally.lost, tally.wrong_thread) == (
        0, 0, 0, 0), f"{tally.line()} (seed {seed}): " + "; ".join(twice)
    assert tally.once == tally.messages


async def _joined(person: HumanClient, room: str, bot: str) -> bool:
    events = await person.events(room)
    return any(e.get("type") == "m.room.member" and e.get("state_key") == bot
               and (e.get("content") or {}).get("membership") == "join" for e in events)


def _answers(messages: list[Message], bot: str, marker: str) -> list[Message]:
    """The bot's answers to the message that holds ``marker``: its reply or output, or
    the word that the gateway stopped while handling it."""
    word = re.compile(rf"\b{re.escape(marker)}\b")
    return [m for m in messages if m.sender == bot and word.search(m.body)
            and not m.body.startswith("Job ")]


def _notices(messages: list[Message], bot: str, job: str) -> list[Message]:
    word = re.compile(rf"\b{re.escape(job)}\b")
    return [m for m in messages if m.sender == bot and m.body.startswith("Job ")
            and word.search(m.body)]
