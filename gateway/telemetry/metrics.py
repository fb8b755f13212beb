"""Prometheus metrics: counters bumped where things happen, gauges read at scrape time.

Each gateway has its own registry (so several can live in one test process);
``GET /metrics`` on the web server renders it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from gateway.delivery.notifications import NotificationState
from gateway.delivery.outbox import waiting_notices
from gateway.words.session_key import SessionKeyError, parse_session_key

if TYPE_CHECKING:
    from gateway.store.state import StateDatabase

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages_in = Counter("homing_messages_in", "Messages received, by platform",
                                   ["platform"], registry=r)
        self.messages_out = Counter("homing_messages_out", "Messages sent, by platform",
                                    ["platform"], registry=r)
        #: messages_out's child of each platform, looked up once
        self._sent: dict[str, Any] = {}
        self.turns = Counter("homing_turns", "Agent turns, by what started them",
                             ["trigger"], registry=r)
        self.notifications = Gauge("homing_notifications", "Notifications in the outbox",
                                   ["kind", "state"], registry=r)
        self.parked = Gauge("homing_notifications_parked", "Parked notifications, by reason",
                            ["reason"], registry=r)
        self.jobs_running = Gauge("homing_jobs_running", "Background jobs running", registry=r)
        self.delivery_latency = Histogram(
            "homing_notification_delivery_seconds",
            "From a notification's creation (the job's exit) to its delivery",
            buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=r)
        # by platform, not conversation: a series per chat would grow without bound
        # (each conversation's are in /status and `homing status`)
        self.waiting = Gauge("homing_notifications_waiting",
                             "Notices not delivered yet (pending or claimed), by platform",
                             ["platform"], registry=r)
        self.oldest_wait = Gauge(
            "homing_notification_oldest_wait_seconds",
            "How long the oldest notice not delivered yet has waited, by platform",
            ["platform"], registry=r)
        self.platform_up = Gauge("homing_platform_connected",
                                 "Whether a platform adapter is connected (1) or not (0)",
                                 ["platform"], registry=r)

    def sent_to(self, platform: str) -> Any:
        """The count of messages sent to ``platform`` (a send bumps it): the child of
        ``messages_out`` made once, not looked up by its label at every send."""
        child = self._sent.get(platform)
        if child is None:
            child = self._sent[platform] = self.messages_out.labels(platform)
        return child

    async def render(self, db: StateDatabase, adapters: Mapping[str, Any],
                     jobs_running: int) -> bytes:
        """Refresh the gauges from the store and the adapters (their ``connected``),
        then render."""
        rows = await db.fetchall(
            "SELECT kind, state, COUNT(*) FROM notifications GROUP BY kind, state")
        _set_all(self.notifications, ((k, s, n) for k, s, n in rows))
        rows = await db.fetchall(
            f"SELECT reason, COUNT(*) FROM notifications "
            f"WHERE state = '{NotificationState.PARKED}' GROUP BY reason")
        _set_all(self.parked, ((reason or "unknown", n) for reason, n in rows))
        count: dict[str, int] = {}
        oldest: dict[str, float] = {}
        now = time.time()
        for w in await waiting_notices(db):
            platform = _platform_of(w.session_key)
            count[platform] = count.get(platform, 0) + w.count
            oldest[platform] = max(oldest.get(platform, 0.0), w.oldest_wait(now))
        _set_all(self.waiting, count.items())
        _set_all(self.oldest_wait, oldest.items())
        self.jobs_running.set(jobs_running)
        for name, adapter in adapters.items():
            self.platform_up.labels(name).set(1 if adapter.connected else 0)
        return generate_latest(self.registry)


def _platform_of(session_key: str) -> str:
    try:
        return parse_session_key(session_key).platform
    except SessionKeyError:  # (a row the router parks as no_route)
        return "unknown"


def _set_all(gauge: Gauge, rows: Iterable[tuple[Any, ...]]) -> None:
    gauge.clear()  # a state that emptied must not keep its old count
    for *labels, value in rows:
        gauge.labels(*labels).set(value)
