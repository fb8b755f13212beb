"""Matrix with two instances on one PostgreSQL store: one sync loop per account.

Two sync loops would each take every message; the lease ``matrix:<user_id>`` keeps it
to one, and the ``since`` token lives in the shared store. Both instances send. When
the holder stops, the other takes the lease and syncs from the token the holder saved
last, so what was said in between is answered, once.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

from gateway.config.settings import Config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.platforms.matrix.adapter import MatrixAdapter
from tests.helpers import eventually, eventually_async
from tests.matrix_homeserver import Account, Homeserver, HumanClient, MakeUser
from tests.test_matrix import bot_in, bot_messages, first_line, matrix_config, new_bot


def _config(home: Path, bot: Account, alice: HumanClient, url: str, name: str) -> Config:
    return matrix_config(home, bot, alice, store__url=url, instance__name=name,
                         cluster__lease_seconds=3.0, cluster__failover_seconds=3.0)


def _adapter(gw: Gateway) -> MatrixAdapter:
    adapter = gw.runner.adapters["matrix"].inner  # the platform's own, behind the fence
    assert isinstance(adapter, MatrixAdapter)
    return adapter


async def _answers(alice: HumanClient, room: str, bot: Account) -> list[str]:
    return [first_line(m) for m in await bot_messages(alice, room, bot)
            if m.body.startswith("Received: ")]


async def test_two_instances_sync_once_and_the_survivor_syncs_from_the_saved_token(
        tmp_path: Path, homeserver: Homeserver, matrix_user: MakeUser,
        pg_fresh_url: str) -> None:
    alice = await matrix_user("alice")
    bot = await new_bot(homeserver)
    room = await alice.create_room(invite=[bot.user_id], is_direct=True)
    async with AsyncExitStack() as stack:
        one = await stack.enter_async_context(running_gateway(
            _config(tmp_path / "a", bot, alice, pg_fresh_url, "vps1")))
        await eventually(lambda: _adapter(one).syncing_here, timeout=60,
                         what="the first instance syncing")
        await bot_in(alice, room, bot)
        two = await stack.enter_async_context(running_gateway(
            _config(tmp_path / "b", bot, alice, pg_fresh_url, "vps2")))
        await _adapter(two).wait_connected(timeout=60)  # logged in, for sending
        assert not _adapter(two).syncing_here

        await alice.send_text(room, "first")
        await eventually_async(lambda: _has(alice, room, bot, "Received: first"), 60,
                               "the answer")
        await alice.send_text(room, "/bg echo job-$((6*7))")
        await eventually_async(lambda: _notice(alice, room, bot, "job-42"), 60,
                               "the job's notice")

        await _adapter(one).disconnect()  # the holder stops: its lease goes with it
        await alice.send_text(room, "while moving")
        await eventually(lambda: _adapter(two).syncing_here, timeout=60,
                         what="the sync on the second instance")
        await eventually_async(lambda: _has(alice, room, bot, "Received: while moving"), 60,
                               "the message said while the sync moved")
        await alice.send_text(room, "after")
        await eventually_async(lambda: _has(alice, room, bot, "Received: after"), 60,
                               "the answer")
        answers = await _answers(alice, room, bot)
        assert not _adapter(one).syncing_here
    assert answers == ["Received: first", "Received: while moving", "Received: after"]


async def _has(alice: HumanClient, room: str, bot: Account, text: str) -> bool:
    return text in await _answers(alice, room, bot)


async def _notice(alice: HumanClient, room: str, bot: Account, text: str) -> bool:
    return any(m.body.startswith("Job ") and text in m.body
               for m in await bot_messages(alice, room, bot))
