"""Pairing codes: one per user, rate limited, a few pending, expiring."""

from __future__ import annotations

import pytest

from gateway.messages.pairing import Pairing, PairingError
from gateway.sessions.store import SessionStore


async def test_one_code_per_user_reminded_at_most_once_per_interval(store: SessionStore) -> None:
    pairing = Pairing(store.db, reminder_seconds=600)
    first = await pairing.request("telegram", "7", "ann")
    assert first is not None and len(first.code) == 8
    assert await pairing.request("telegram", "7", "ann") is None  # rate limited
    reminder = Pairing(store.db, reminder_seconds=0)
    again = await reminder.request("telegram", "7", "ann")
    assert again is not None and again.code == first.code  # the same code, not a new one


async def test_only_a_few_codes_may_be_pending(store: SessionStore) -> None:
    pairing = Pairing(store.db, max_pending=3)
    codes = [await pairing.request("telegram", str(u), None) for u in range(5)]
    assert [c is not None for c in codes] == [True, True, True, False, False]
    assert len(await pairing.pending()) == 3


async def test_approval_lets_the_user_in_once(store: SessionStore) -> None:
    pairing = Pairing(store.db)
    request = await pairing.request("telegram", "7", "ann")
    assert not await pairing.is_approved("telegram", "7")
    with pytest.raises(PairingError, match="no pairing code"):
        await pairing.approve("discord", request.code)  # codes are per platform
    approved = await pairing.approve("telegram", request.code.lower())
    assert approved.user_id == "7"
    assert await Pairing(store.db).is_approved("telegram", "7")  # seen by another process too
    with pytest.raises(PairingError, match="already approved"):
        await pairing.approve("telegram", request.code)


async def test_expired_codes_are_refused(store: SessionStore) -> None:
    pairing = Pairing(store.db, ttl_seconds=-1)
    request = await pairing.request("telegram", "7", None)
    with pytest.raises(PairingError, match="expired"):
        await pairing.approve("telegram", request.code)


async def test_a_revoked_user_is_out_at_once_even_for_a_running_daemon(
        store: SessionStore) -> None:
    daemon, cli = Pairing(store.db), Pairing(store.db)
    request = await daemon.request("telegram", "7", "bob")
    assert request is not None
    await cli.approve("telegram", request.code)
    assert await daemon.is_approved("telegram", "7")
    assert [(p, u, n) for p, u, n, _ in await cli.approved()] == [("telegram", "7", "bob")]
    assert await cli.revoke("telegram", "7") and not await cli.revoke("telegram", "7")
    assert not await daemon.is_approved("telegram", "7")  # no stale cache in the daemon
    assert await cli.approved() == []
