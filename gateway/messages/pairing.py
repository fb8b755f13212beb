"""Pairing: how an unknown user in a direct message asks to be let in.

The user gets a one-time code; the operator approves it on the machine with
``homing pairing approve <platform> <code>``. Codes expire, a user is sent at
most one reminder per interval, and only a few codes may be pending at once,
so a stranger cannot make the bot spam or fill the database.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from gateway.errors import RefusedInput
from gateway.store.row_locks import lock_key, locking
from gateway.store.state import StateDatabase
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.config.settings import Config
    from gateway.sessions.store import SessionStore

log = structlog.get_logger(__name__)

_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I to misread
CODE_LENGTH = 8


class PairingError(RefusedInput):
    """An approval that cannot be carried out; the message says why."""


@dataclass(frozen=True, slots=True)
class PairingRequest:
    code: str
    platform: str
    user_id: str
    user_name: str | None
    expires_at: float
    #: where the user asked (their direct message), to tell them they are in
    route: Route | None = None


class Pairing:
    def __init__(self, db: StateDatabase, *, ttl_seconds: float = 3600.0, max_pending: int = 5,
                 reminder_seconds: float = 600.0) -> None:
        self.db = db
        self.ttl = ttl_seconds
        self.max_pending = max_pending
        self.reminder = reminder_seconds

    async def is_approved(self, platform: str, user_id: str | None) -> bool:
        if user_id is None:
            return False
        # approvals (and revocations) are made by the CLI, in another process: looked
        # up every time, so a revoked user is out at their next message
        row = await self.db.fetchone(
            "SELECT 1 FROM approved_users WHERE platform = ? AND user_id = ?",
            (platform, user_id))
        return bool(row)

    async def pin(self, platform: str, username: str, user_id: str | None) -> bool:
        """An ``@username`` entry belongs to the first user id seen with it: True when
        ``user_id`` is that user (pinning it now if nobody was)."""
        if user_id is None:
            return False

        def pin(conn: sqlite3.Connection) -> str:
            conn.execute("INSERT INTO username_pins (platform, username, user_id, pinned_at) "
                         "VALUES (?,?,?,?) ON CONFLICT DO NOTHING",
                         (platform, username, user_id, time.time()))
            owner: str = conn.execute("SELECT user_id FROM username_pins WHERE platform = ? "
                                      "AND username = ?", (platform, username)).fetchone()[0]
            return owner

        owner = await self.db.write(pin)
        if owner != user_id:
            log.warning("username_taken_over", platform=platform, username=username,
                        user_id=user_id, pinned_to=owner)
        return owner == user_id

    async def revoke(self, platform: str, user_id: str) -> bool:
        """Take a paired user's access away; False when they were not approved."""
        def revoke(conn: sqlite3.Connection) -> bool:
            return conn.execute("DELETE FROM approved_users WHERE platform = ? AND "
                                "user_id = ?", (platform, user_id)).rowcount > 0

        return await self.db.write(revoke)

    async def approved(self) -> list[tuple[str, str, str | None, float]]:
        """(platform, user id, user name, approved at) of every paired user."""
        rows = await self.db.fetchall(
            "SELECT platform, user_id, user_name, approved_at FROM approved_users "
            "ORDER BY approved_at")
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    async def request(self, platform: str, user_id: str, user_name: str | None,
                      route: Route | None = None) -> PairingRequest | None:
        """The code to send this user now, or None when nothing should be sent."""
        now = time.time()
        where = json.dumps(route.to_dict()) if route is not None else None

        def issue(conn: sqlite3.Connection) -> PairingRequest | None:
            # what is pending decides, and no row stands for it: the platform's pairing
            # is held until this commits, so two messages at once make one code, and
            # strangers no more than max_pending
            lock_key(conn, f"pairing:{platform}")
            mine = conn.execute(
                "SELECT code, last_sent_at, expires_at FROM pairing_codes WHERE platform = ? "
                "AND user_id = ? AND approved_at IS NULL AND expires_at > ?",
                (platform, user_id, now)).fetchone()
            if mine is not None:
                code, last_sent, expires = mine
                if now - last_sent < self.reminder:
                    return None  # rate limited: they have the code already
                conn.execute("UPDATE pairing_codes SET last_sent_at = ?, "
                             "route = COALESCE(?, route) WHERE code = ?", (now, where, code))
                return PairingRequest(code, platform, user_id, user_name, expires)
            (pending,) = conn.execute(
                "SELECT COUNT(*) FROM pairing_codes WHERE platform = ? AND approved_at IS NULL "
                "AND expires_at > ?", (platform, now)).fetchone()
            if pending >= self.max_pending:
                return None
            code = "".join(secrets.choice(_ALPHABET) for _ in range(CODE_LENGTH))
            conn.execute(
                "INSERT INTO pairing_codes (code, platform, user_id, user_name, created_at, "
                "last_sent_at, expires_at, route) VALUES (?,?,?,?,?,?,?,?)",
                (code, platform, user_id, user_name, now, now, now + self.ttl, where))
            return PairingRequest(code, platform, user_id, user_name, now + self.ttl)

        request = await self.db.write(issue)
        if request is None:
            log.warning("pairing_not_sent", platform=platform, user_id=user_id,
                        reason="a code was sent recently, or too many codes are pending",
                        hint="homing pairing list")
        else:
            log.warning("pairing_requested", platform=platform, user_id=user_id,
                        user_name=user_name, code=request.code,
                        approve=f"homing pairing approve {platform} {request.code}")
        return request

    async def approve(self, platform: str, code: str) -> PairingRequest:
        now = time.time()
        wanted = code.strip().upper()

        def approve(conn: sqlite3.Connection) -> PairingRequest:
            row = conn.execute(  # held until this commits: a code is approved once
                "SELECT code, platform, user_id, user_name, expires_at, approved_at, route "
                f"FROM pairing_codes WHERE code = ?{locking(conn)}", (wanted,)).fetchone()
            if row is None or row[1] != platform:
                raise PairingError(f"no pairing code {wanted} for {platform}")
            if row[5] is not None:
                raise PairingError(f"code {wanted} was already approved")
            if row[4] <= now:
                raise PairingError(f"code {wanted} has expired; ask the user to message the "
                                   f"bot again for a new one")
            conn.execute("UPDATE pairing_codes SET approved_at = ? WHERE code = ?", (now, wanted))
            conn.execute("INSERT INTO approved_users (platform, user_id, user_name, "
                         "approved_at) VALUES (?,?,?,?) ON CONFLICT (platform, user_id) "
                         "DO UPDATE SET user_name = excluded.user_name, "
                         "approved_at = excluded.approved_at", (platform, row[2], row[3], now))
            route = Route.from_dict(json.loads(row[6])) if row[6] else None
            return PairingRequest(row[0], row[1], row[2], row[3], row[4], route)

        return await self.db.write(approve)

    async def pending(self) -> list[PairingRequest]:
        rows = await self.db.fetchall(
            "SELECT code, platform, user_id, user_name, expires_at FROM pairing_codes "
            "WHERE approved_at IS NULL AND expires_at > ? ORDER BY created_at", (time.time(),))
        return [PairingRequest(*row) for row in rows]


def pairing_message(request: PairingRequest) -> str:
    minutes = max(1, int((request.expires_at - time.time()) // 60))
    return (f"Hello! I don't know you yet. To be let in, ask the operator of this bot to "
            f"run:\n\nhoming pairing approve {request.platform} {request.code}\n\n"
            f"The code is valid for {minutes} minutes.")


#: the notification kind that tells an approved user they are in (the gateway's words)
APPROVED_KIND = "pairing_approved"


async def tell_approved(store: SessionStore, config: Config, request: PairingRequest) -> bool:
    """Queue "you are in" for the user, in the direct message they asked from, through
    the outbox (the daemon, another process, delivers it). False when the route is not
    known (a code issued by an older version)."""
    from gateway.delivery.notifications import NewNotification
    from gateway.delivery.outbox import Outbox
    from gateway.words.return_address import ReturnAddress
    from gateway.words.session_key import build_session_key

    route = request.route
    if route is None:
        return False
    key = build_session_key(route, group_sessions_per_user=config.sessions.group_sessions_per_user,
                            thread_sessions_per_user=config.sessions.thread_sessions_per_user)
    session = await store.get_or_create(key, route)
    await Outbox(store.db).produce([NewNotification(
        idempotency_key=f"pairing:{request.code}", kind=APPROVED_KIND,
        address=ReturnAddress(key, session.id, route),
        text="You are in: your pairing code was approved. Send /help to see what I can do.")])
    return True
