"""Versioned schema migrations for the state database.

Append a new entry to ``MIGRATIONS`` to change the schema; never edit one
that has shipped. ``PRAGMA user_version`` records how far a database got.

The same list migrates PostgreSQL (gateway/store/postgres.py): each script is written
in SQL both speak, and :func:`postgres_statements` maps SQLite's column types to
PostgreSQL's (64-bit integers, 8-byte floats, identity ids).
"""

from __future__ import annotations

import re

import aiosqlite

from gateway.errors import StoreError

MIGRATIONS: list[str] = [
    # 1: sessions and their transcripts
    """
    CREATE TABLE sessions (
        id                TEXT PRIMARY KEY,
        session_key       TEXT NOT NULL,
        platform          TEXT NOT NULL,
        route             TEXT NOT NULL,
        created_at        REAL NOT NULL,
        last_active_at    REAL NOT NULL,
        ended_at          REAL,
        end_reason        TEXT,
        parent_session_id TEXT REFERENCES sessions(id),
        title             TEXT,
        archived          INTEGER NOT NULL DEFAULT 0
    );
    -- at most one live session per key: the guard for concurrent get_or_create
    CREATE UNIQUE INDEX sessions_live_key ON sessions(session_key) WHERE ended_at IS NULL;
    CREATE INDEX sessions_key ON sessions(session_key);
    CREATE INDEX sessions_parent ON sessions(parent_session_id);
    CREATE TABLE messages (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        role       TEXT NOT NULL,
        text       TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX messages_session ON messages(session_id, id);
    """,
    # 2: background jobs and the notification outbox
    """
    CREATE TABLE jobs (
        id                 TEXT PRIMARY KEY,
        command            TEXT NOT NULL,
        cwd                TEXT NOT NULL,
        state              TEXT NOT NULL,          -- running, exited, lost
        pid                INTEGER,
        proc_start         TEXT,                   -- /proc start time: tells a reused pid apart
        started_at         REAL NOT NULL,
        ended_at           REAL,
        exit_code          INTEGER,
        killed             INTEGER NOT NULL DEFAULT 0,
        notify_on_complete INTEGER NOT NULL,
        watch_patterns     TEXT NOT NULL,          -- JSON list of regular expressions
        watch_notices      INTEGER NOT NULL DEFAULT 0,
        watch_disabled     INTEGER NOT NULL DEFAULT 0,
        session_key        TEXT NOT NULL,
        session_id         TEXT NOT NULL,
        return_address     TEXT NOT NULL,          -- JSON, captured when the job started
        log_path           TEXT NOT NULL,
        exit_path          TEXT NOT NULL
    );
    CREATE INDEX jobs_state ON jobs(state);
    CREATE INDEX jobs_session_key ON jobs(session_key);
    CREATE TABLE notifications (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        idempotency_key TEXT NOT NULL UNIQUE,      -- job + kind + sequence
        kind            TEXT NOT NULL,
        job_id          TEXT,
        session_key     TEXT NOT NULL,
        session_id      TEXT NOT NULL,
        tab_id          TEXT,
        return_address  TEXT NOT NULL,
        text            TEXT NOT NULL,
        state           TEXT NOT NULL DEFAULT 'pending'
                        CHECK (state IN ('pending', 'claimed', 'delivered', 'parked')),
        reason          TEXT,
        attempts        INTEGER NOT NULL DEFAULT 0,
        last_error      TEXT,
        not_before      REAL,
        claimed_by      TEXT,
        claimed_at      REAL,
        sent_message_id TEXT,
        created_at      REAL NOT NULL,
        delivered_at    REAL
    );
    CREATE INDEX notifications_state ON notifications(state, id);
    CREATE INDEX notifications_session ON notifications(session_id);
    """,
    # 3: sub-agent delegations
    """
    CREATE TABLE delegations (
        id             TEXT PRIMARY KEY,
        task           TEXT NOT NULL,
        state          TEXT NOT NULL,      -- dispatched, running, finished, interrupted, lost
        session_key    TEXT NOT NULL,
        session_id     TEXT NOT NULL,      -- the spawning session
        tab_id         TEXT,
        return_address TEXT NOT NULL,
        result         TEXT,
        exit_code      INTEGER,
        created_at     REAL NOT NULL,
        started_at     REAL,
        finished_at    REAL
    );
    CREATE INDEX delegations_session ON delegations(session_id, state);
    CREATE INDEX delegations_state ON delegations(state);
    """,
    # 4: notices waiting for a retry, by conversation (they hold back later ones)
    """
    CREATE INDEX notifications_waiting ON notifications(session_key, id)
        WHERE state = 'pending' AND not_before IS NOT NULL;
    """,
    # 5: pairing unknown users, and the users the operator approved
    """
    CREATE TABLE pairing_codes (
        code         TEXT PRIMARY KEY,
        platform     TEXT NOT NULL,
        user_id      TEXT NOT NULL,
        user_name    TEXT,
        created_at   REAL NOT NULL,
        last_sent_at REAL NOT NULL,
        expires_at   REAL NOT NULL,
        approved_at  REAL
    );
    CREATE INDEX pairing_codes_user ON pairing_codes(platform, user_id);
    CREATE TABLE approved_users (
        platform    TEXT NOT NULL,
        user_id     TEXT NOT NULL,
        user_name   TEXT,
        approved_at REAL NOT NULL,
        PRIMARY KEY (platform, user_id)
    );
    """,
    # 6: places told "the gateway is restarting", to be told "back online"
    """
    CREATE TABLE restart_notices (
        place    TEXT PRIMARY KEY,   -- platform, chat and thread
        route    TEXT NOT NULL,
        told_at  REAL NOT NULL
    );
    """,
    # 7: the model agent's context: chat messages as the endpoint sees them (tool calls
    # included), apart from the transcript people read
    """
    CREATE TABLE agent_messages (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL REFERENCES sessions(id),
        message    TEXT NOT NULL,
        tokens     INTEGER NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX agent_messages_session ON agent_messages(session_id, id);
    """,
    # 8: how far a watched job's log has been reported, processes a job left running,
    # and which daemon process runs a delegation (recovery leaves live ones alone)
    """
    ALTER TABLE jobs ADD COLUMN watch_offset INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN left_running INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE delegations ADD COLUMN owner TEXT;
    """,
    # 9: schedules, owned by a conversation; each run keyed by (schedule, scheduled time)
    """
    CREATE TABLE schedules (
        id           TEXT PRIMARY KEY,
        session_key  TEXT NOT NULL,        -- the conversation it belongs to
        route        TEXT NOT NULL,        -- its place (topic, thread) and the creating message
        kind         TEXT NOT NULL,        -- every, cron, at
        spec         TEXT NOT NULL,
        timezone     TEXT NOT NULL,
        anchor       REAL NOT NULL,        -- every: the first run, at: the one run
        command      TEXT,                 -- a shell run, or
        prompt       TEXT,                 -- an agent turn
        created_at   REAL NOT NULL,
        next_run_at  REAL,                 -- NULL: no runs left
        paused       INTEGER NOT NULL DEFAULT 0,
        pause_reason TEXT,
        last_run_for REAL,
        last_result  TEXT,
        skipped      INTEGER NOT NULL DEFAULT 0  -- runs skipped for overlap, not told yet
    );
    CREATE INDEX schedules_key ON schedules(session_key);
    CREATE INDEX schedules_due ON schedules(next_run_at) WHERE paused = 0;
    CREATE TABLE schedule_runs (
        schedule_id   TEXT NOT NULL,
        scheduled_for REAL NOT NULL,
        state         TEXT NOT NULL,      -- claimed, started, finished, skipped, cancelled
        reason        TEXT,               -- due, manual, missed, overlap
        job_id        TEXT,
        claimed_at    REAL NOT NULL,
        started_at    REAL,
        finished_at   REAL,
        result        TEXT,
        PRIMARY KEY (schedule_id, scheduled_for)
    );
    CREATE INDEX schedule_runs_open ON schedule_runs(state) WHERE state IN ('claimed', 'started');
    -- the schedule run that started a job (JSON)
    ALTER TABLE jobs ADD COLUMN origin TEXT;
    """,
    # 10: the inbound journal: each accepted message, committed before it is acknowledged
    """
    CREATE TABLE inbound (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        platform    TEXT NOT NULL,
        platform_id TEXT NOT NULL,    -- update id, message id, or the web frame's id
        session_key TEXT NOT NULL,
        event       TEXT NOT NULL,    -- JSON: text, route, message id, metadata
        sent_at     REAL,             -- when the platform says it was sent
        received_at REAL NOT NULL,
        state       TEXT NOT NULL,    -- received, started, acted, replied, handled, skipped
        handled_at  REAL,
        UNIQUE (platform, platform_id)
    );
    CREATE INDEX inbound_open ON inbound(id)
        WHERE state IN ('received', 'started', 'acted', 'replied');
    CREATE INDEX inbound_chat ON inbound(platform, received_at);
    """,
    # 11: where the health check proves it can write
    """
    CREATE TABLE store_health (
        id         INTEGER PRIMARY KEY CHECK (id = 1),
        checked_at REAL NOT NULL
    );
    """,
    # 12: notices in the model's history move from the system role to the user role
    # (templates refuse a system message after the first); the JSON was written by
    # json.dumps, so each such row starts exactly so
    """
    UPDATE agent_messages
       SET message = '{"role": "user"' || substr(message, 18)
     WHERE substr(message, 1, 79) =
           '{"role": "system", "content": "[Background notice: not a message from the user]';
    """,
    # 13: how a notice's work went (a failed job's notice looks different), kept with the
    # notification and with the transcript line that said it
    """
    ALTER TABLE notifications ADD COLUMN outcome TEXT;
    ALTER TABLE messages ADD COLUMN notice TEXT;
    """,
    # 14: a file a notice carries (a job's artifact), posted with it
    """
    ALTER TABLE notifications ADD COLUMN file_path TEXT;
    """,
    # 15: an @username in allowed_users belongs to the first user id seen with it
    """
    CREATE TABLE username_pins (
        platform  TEXT NOT NULL,
        username  TEXT NOT NULL,
        user_id   TEXT NOT NULL,
        pinned_at REAL NOT NULL,
        PRIMARY KEY (platform, username)
    );
    """,
    # 16: where a pairing code was asked for, so the approved user is told they are in
    """
    ALTER TABLE pairing_codes ADD COLUMN route TEXT;
    """,
    # 17: approvals: an action of the model waiting for a human, durable across restarts;
    # and what "approve for this session" granted
    """
    CREATE TABLE approvals (
        id             TEXT PRIMARY KEY,
        tool           TEXT NOT NULL,
        command        TEXT NOT NULL,
        action         TEXT NOT NULL,
        reason         TEXT NOT NULL,
        grant_key      TEXT NOT NULL,
        session_key    TEXT NOT NULL,
        session_id     TEXT NOT NULL,
        return_address TEXT NOT NULL,
        requester      TEXT,
        state          TEXT NOT NULL,
        decision       TEXT,
        decided_by     TEXT,
        message_id     TEXT,
        ran            TEXT,
        created_at     REAL NOT NULL,
        expires_at     REAL NOT NULL,
        decided_at     REAL
    );
    CREATE INDEX approvals_by_state ON approvals (state, expires_at);
    CREATE TABLE approval_grants (
        session_id  TEXT NOT NULL,
        grant_key   TEXT NOT NULL,
        approval_id TEXT NOT NULL,
        granted_at  REAL NOT NULL,
        PRIMARY KEY (session_id, grant_key)
    );
    """,
    # 18: instances sharing the store, each with a lease it renews, and the single
    # connections (a Telegram poller, a Discord session) one of them holds at a time
    # (gateway/cluster/instances.py). Times are the store's clock, as float seconds. A lease
    # names its holder with the holder's epoch: a restarted instance (same name, next
    # epoch) does not inherit what its previous life held, and waits for it to expire
    # like anyone else, since that life may not be over (two processes under one name).
    # holder NULL: free (released). epoch counts the holders a lease has had: a fencing
    # token that a new holder's work carries.
    """
    CREATE TABLE instances (
        name             TEXT PRIMARY KEY,
        epoch            INTEGER NOT NULL,    -- this name's lives: one more at each start
        host             TEXT,
        pid              INTEGER,
        started_at       REAL NOT NULL,
        renewed_at       REAL NOT NULL,
        lease_expires_at REAL NOT NULL,
        stopped_at       REAL                 -- a clean stop (NULL while running, or dead)
    );
    CREATE TABLE leases (
        name         TEXT PRIMARY KEY,        -- telegram:<bot id>, discord:<application id>
        holder       TEXT,                    -- an instance name, NULL when free
        holder_epoch INTEGER,                 -- that instance's epoch when it took the lease
        epoch        INTEGER NOT NULL,        -- one more at each new holder
        acquired_at  REAL,
        expires_at   REAL NOT NULL            -- never later than the holder's own lease
    );
    """,
    # 19: (PostgreSQL only) a notice committed by any instance wakes every router
    # (POSTGRES_EXTRAS); SQLite has one host, whose other processes the poll finds
    """
    """,
    # 20: work belongs to an instance on a shared store: a journal entry to the life of
    # the instance handling it (``i:<name>:<epoch>:…``, as claims), a job to the instance
    # whose host runs it, an approval to the life whose turn waits for it. NULL: the one
    # process of an SQLite store. A web frame too big
    # for a NOTIFY payload waits in web_frames for the other instances' tabs.
    """
    ALTER TABLE inbound ADD COLUMN handler TEXT;
    ALTER TABLE jobs ADD COLUMN instance TEXT;
    ALTER TABLE approvals ADD COLUMN waiter TEXT;
    CREATE INDEX jobs_instance ON jobs(instance, state);
    CREATE TABLE web_frames (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        payload    TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    """,
    # 21: (PostgreSQL only) a job another instance asked to stop (its ``killed`` mark,
    # which a restart finishes a kill from too) wakes the instance whose host runs it
    """
    """,
    # 22: the journal entry whose message a transcript line, or the model-history row
    # that opens a turn, is: each written once per entry, so a message replayed after a
    # crash keeps what the life that died wrote of it instead of writing it again
    """
    ALTER TABLE messages ADD COLUMN inbound_id INTEGER;
    ALTER TABLE agent_messages ADD COLUMN inbound_id INTEGER;
    CREATE UNIQUE INDEX messages_inbound ON messages(inbound_id)
        WHERE inbound_id IS NOT NULL;
    CREATE UNIQUE INDEX agent_messages_inbound ON agent_messages(inbound_id)
        WHERE inbound_id IS NOT NULL;
    """,
    # 23: notices that go out together in one message (a conversation's send budget was
    # short) name the first of them, before that message is sent: a crash before its
    # record sends them together again, never one by one as well
    """
    ALTER TABLE notifications ADD COLUMN merged_into INTEGER;
    """,
    # 24: a cursor a platform's client holds (Matrix's sync token), saved once what came
    # before it is journaled (gateway/inbound/cursors.py)
    """
    CREATE TABLE platform_cursors (
        platform   TEXT NOT NULL,
        name       TEXT NOT NULL,
        value      TEXT NOT NULL,
        updated_at REAL NOT NULL,
        PRIMARY KEY (platform, name)
    );
    """,
    # 25: the trace a unit of background work belongs to (a W3C traceparent), kept with
    # the rows it goes through (a schedule run's is its job's or its prompt notice's),
    # so a notice delivered by another instance or after a restart joins it
    # (gateway/tracing.py); and each delivery attempt that did not deliver, with what
    # became of it, for `homing trace`
    """
    ALTER TABLE jobs ADD COLUMN trace_parent TEXT;
    ALTER TABLE notifications ADD COLUMN trace_parent TEXT;
    ALTER TABLE delegations ADD COLUMN trace_parent TEXT;
    CREATE TABLE delivery_attempts (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        notification_id INTEGER NOT NULL,
        at              REAL NOT NULL,
        claimer         TEXT,
        outcome         TEXT NOT NULL,
        detail          TEXT,
        retry_in        REAL,
        repeats         INTEGER NOT NULL DEFAULT 1,
        last_at         REAL
    );
    CREATE INDEX delivery_attempts_notification ON delivery_attempts(notification_id);
    """,
]

#: every table the migrations make: the health check misses none of them
TABLES = frozenset(re.findall(r"CREATE TABLE (\w+)", "\n".join(MIGRATIONS)))


#: SQLite's column types as PostgreSQL spells them: SQLite integers are 64-bit and its
#: REAL is 8 bytes (PostgreSQL's ``real`` is 4, which would break the equality tests
#: on stored times); AUTOINCREMENT ids become identity columns
_POSTGRES_TYPES = (
    (re.compile(r"\bINTEGER PRIMARY KEY AUTOINCREMENT\b"),
     "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"),
    (re.compile(r"\bINTEGER\b"), "BIGINT"),
    (re.compile(r"\bREAL\b"), "DOUBLE PRECISION"),
)


class ForeignDatabase(StoreError, RuntimeError):
    """The file is some other program's SQLite database: Homing will not change it."""


async def migrate(db: aiosqlite.Connection) -> int:
    """Bring the schema up to date; return the version reached.

    The version is read inside the write lock, so two processes starting on
    a new database do not both apply the same migration.
    """
    while True:
        await db.execute("BEGIN IMMEDIATE")
        try:
            async with db.execute("PRAGMA user_version") as cur:
                row = await cur.fetchone()
            version = int(row[0]) if row else 0
            if version == 0:
                async with db.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                      "AND name NOT LIKE 'sqlite_%'") as cur:
                    found = [r[0] for r in await cur.fetchall()]
                if found:
                    raise ForeignDatabase(
                        f"it is not a Homing state database (it has other tables: "
                        f"{', '.join(sorted(found)[:5])}); point HOMING_HOME elsewhere")
            if version > len(MIGRATIONS):
                raise RuntimeError(
                    f"state database is at schema version {version}, newer than this "
                    f"homing ({len(MIGRATIONS)}); upgrade homing")
            if version == len(MIGRATIONS):
                await db.commit()
                return version
            for statement in _statements(MIGRATIONS[version]):
                await db.execute(statement)
            await db.execute(f"PRAGMA user_version = {version + 1}")
            await db.commit()
        except BaseException:
            if db.in_transaction:
                await db.rollback()
            raise


#: what only PostgreSQL runs, by migration (0-based): whole statements, not split
POSTGRES_EXTRAS: dict[int, list[str]] = {
    18: [
        # NOTIFY is sent at commit, and the same one twice in a transaction once
        "CREATE FUNCTION homing_outbox_wake() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN PERFORM pg_notify('homing_outbox', ''); RETURN NULL; END $$",
        "CREATE TRIGGER notifications_added AFTER INSERT ON notifications "
        "FOR EACH ROW EXECUTE FUNCTION homing_outbox_wake()",
        # given back, or left by a dead instance: due again somewhere
        "CREATE TRIGGER notifications_pending_again AFTER UPDATE OF state ON notifications "
        "FOR EACH ROW WHEN (NEW.state = 'pending' AND OLD.state <> 'pending') "
        "EXECUTE FUNCTION homing_outbox_wake()",
    ],
    19: [
        # a session ended by one instance drops out of every instance's cache
        "CREATE FUNCTION homing_session_ended() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN PERFORM pg_notify('homing_sessions', NEW.id); RETURN NULL; END $$",
        "CREATE TRIGGER sessions_ended AFTER UPDATE OF ended_at ON sessions "
        "FOR EACH ROW WHEN (NEW.ended_at IS NOT NULL AND OLD.ended_at IS NULL) "
        "EXECUTE FUNCTION homing_session_ended()",
        # a choice made through one instance reaches the turn waiting on another
        "CREATE FUNCTION homing_approval_decided() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN PERFORM pg_notify('homing_approvals', NEW.id); RETURN NULL; END $$",
        "CREATE TRIGGER approvals_decided AFTER UPDATE OF state ON approvals "
        "FOR EACH ROW WHEN (OLD.state = 'pending' AND NEW.state <> 'pending') "
        "EXECUTE FUNCTION homing_approval_decided()",
        # a turn ended: a notice of its conversation that other instances left to this
        # one's lane (gateway/delivery/affinity.py) may be claimed by any of them now
        "CREATE FUNCTION homing_turn_ended() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN IF EXISTS (SELECT 1 FROM notifications WHERE session_key = NEW.session_key "
        "AND state = 'pending') THEN PERFORM pg_notify('homing_outbox', ''); END IF; "
        "RETURN NULL; END $$",
        "CREATE TRIGGER inbound_finished AFTER UPDATE OF state ON inbound FOR EACH ROW "
        "WHEN (NEW.state IN ('handled', 'skipped') AND OLD.state NOT IN ('handled', 'skipped')) "
        "EXECUTE FUNCTION homing_turn_ended()",
    ],
    20: [
        "CREATE FUNCTION homing_job_kill_asked() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN PERFORM pg_notify('homing_jobs', NEW.id); RETURN NULL; END $$",
        "CREATE TRIGGER jobs_kill_asked AFTER UPDATE OF killed ON jobs FOR EACH ROW "
        "WHEN (NEW.killed = 1 AND OLD.killed = 0 AND NEW.state = 'running') "
        "EXECUTE FUNCTION homing_job_kill_asked()",
    ],
}
OUTBOX_CHANNEL = "homing_outbox"
SESSIONS_CHANNEL = "homing_sessions"
APPROVALS_CHANNEL = "homing_approvals"
JOBS_CHANNEL = "homing_jobs"
#: journal entries a stopping instance handed over (gateway/inbound/journal.py)
INBOUND_CHANNEL = "homing_inbound"


def postgres_statements(version: int) -> list[str]:
    """The statements of migration ``version`` (0-based) as PostgreSQL runs them."""
    statements = []
    for statement in _statements(MIGRATIONS[version]):
        for pattern, replacement in _POSTGRES_TYPES:
            statement = pattern.sub(replacement, statement)
        statements.append(statement)
    return statements + POSTGRES_EXTRAS.get(version, [])


def _statements(script: str) -> list[str]:
    lines = [line for line in script.splitlines() if not line.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
