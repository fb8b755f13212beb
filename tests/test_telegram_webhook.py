"""Telegram in webhook mode: the real python-telegram-bot against the fake Bot API, which
posts each update to Homing's listener as Telegram does (one update a request, the
secret token in ``X-Telegram-Bot-Api-Secret-Token``, tried again until it is answered
2xx), through a "reverse proxy" the test declares for the webhook's public host.

Pinned here: updates come in by webhook and are answered where they were written; a
request without the secret token, or with another, is refused 401 and nothing is
journaled; an update is answered 200 only once journaled (a failed journal write is
answered 5xx, and Telegram's next try is handled once); switching modes works both
ways; ``homing doctor`` shows what Telegram says of the webhook; a real daemon killed
with SIGKILL while updates are being posted loses none and handles each once; on a
shared store every instance takes requests, with no lease. And the fake itself: it
answers setWebhook, deleteWebhook and getWebhookInfo as the Bot API does.
"""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, closing
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
import yaml
from aiohttp import web
from telegram import Bot
from telegram.error import BadRequest, Conflict

from gateway.config.settings import Config, ConfigError, parse_config
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.platforms.telegram.adapter import TelegramAdapter
from gateway.telemetry.logs import secrets_of
from tests.conftest import make_config
from tests.fakes.telegram_server import FakeTelegram
from tests.fakes.telegram_webhook import SECRET_HEADER, WEBHOOK_ACTIVE
from tests.helpers import eventually, eventually_async, settled
from tests.real_daemon import daemon_settled, home_env, run_cli, start_daemon
from tests.test_telegram import (  # noqa: F401  (fixture)
    ALICE,
    FORUM,
    all_taken_and_settled,
    fake,
    telegram_config,
    to,
)

ORIGIN = "https://bot.example.org"
PATH = "/telegram/p4th-s3cret"
URL = ORIGIN + PATH
SECRET = "wh-secret-0123456789abcdef"
TOPIC = dict(chat_id=FORUM, chat_type="supergroup", is_forum=True, thread_id=42,
             is_topic_message=True)


def free_port() -> int:
    """A port free now on the loopback (the listener binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def webhook_section(port: int, **webhook: object) -> dict[str, Any]:
    return {"url": URL, "secret_token": SECRET,
            "listen": {"host": "127.0.0.1", "port": port, "path": PATH}, **webhook}


def webhook_config(home: Path, fake: FakeTelegram, port: int,  # noqa: F811
                   **overrides: object) -> Config:
    """Telegram in webhook mode, its listener on ``port`` behind the fake's proxy."""
    fake.reverse_proxy(ORIGIN, f"http://127.0.0.1:{port}")
    return telegram_config(home, fake, platforms__telegram__mode="webhook",
                           platforms__telegram__webhook=webhook_section(port), **overrides)


def write_webhook_config(home: Path, fake: FakeTelegram, port: int) -> None:  # noqa: F811
    """``webhook_config`` as a config file, for a daemon of its own (and the CLI)."""
    (home / "config.yaml").write_text(yaml.safe_dump({"platforms": {
        "web": {"port": 0},
        "telegram": {"enabled": True, "token": fake.token, "base_url": fake.base_url,
                     "base_file_url": fake.base_file_url, "allowed_users": [str(ALICE)],
                     "mode": "webhook", "webhook": webhook_section(port)}}}))


def adapter_of(gw: Gateway) -> TelegramAdapter:
    adapter = gw.runner.adapters["telegram"].inner  # the platform's own, behind the fence
    assert isinstance(adapter, TelegramAdapter)
    return adapter


def answered(fake: FakeTelegram, text: str) -> list[str]:  # noqa: F811
    return [s.text for s in fake.sent if s.text.split("\n")[0] == f"Received: {text}"]


async def journal(gw: Gateway) -> list[str]:
    """The platform ids of the journaled messages."""
    return [str(row[0]) for row in await gw.store.db.fetchall(
        "SELECT platform_id FROM inbound ORDER BY id")]


def update_body(update_id: int, text: str) -> bytes:
    """A private message from Alice, as Telegram posts it, sent now."""
    person = {"id": ALICE, "is_bot": False, "first_name": "Alice"}
    return json.dumps({"update_id": update_id, "message": {
        "message_id": update_id % 1000, "date": int(time.time()), "text": text,
        "chat": {"id": ALICE, "type": "private", "first_name": "Alice"},
        "from": person}}).encode()


async def post(port: int, body: bytes, secret: str | None = SECRET) -> int:
    """A request to the listener as anyone might make it; its status."""
    headers = {"Content-Type": "application/json"}
    if secret is not None:
        headers[SECRET_HEADER] = secret
    async with aiohttp.ClientSession() as http, http.post(
            f"http://127.0.0.1:{port}{PATH}", data=body, headers=headers) as resp:
        return resp.status


@pytest.fixture
async def webhook_gateway(tmp_path: Path, fake: FakeTelegram  # noqa: F811
                          ) -> AsyncIterator[tuple[Gateway, int]]:
    port = free_port()
    async with running_gateway(webhook_config(tmp_path / "home", fake, port)) as gw:
        await adapter_of(gw).wait_connected()
        yield gw, port


# ---------------------------------------------------------------------- settings


def test_webhook_mode_names_the_secret_token_it_needs_and_masks_it() -> None:
    section = {"enabled": True, "token": "123456789:" + "A" * 35, "mode": "webhook",
               "webhook": {"url": URL}}
    with pytest.raises(ConfigError) as missing:
        parse_config({"platforms": {"telegram": section}}, {})
    fields = [field for field, _ in missing.value.problems]
    assert "platforms.telegram.webhook.secret_token" in fields
    section["webhook"] = {"url": URL, "secret_token": "base64+/="}
    with pytest.raises(ConfigError) as shape:
        parse_config({"platforms": {"telegram": section}}, {})
    (problem,) = [p for f, p in shape.value.problems
                  if f == "platforms.telegram.webhook.secret_token"]
    assert "A-Z, a-z, 0-9, _ and -" in problem and "base64+/=" not in problem
    section["webhook"] = {"url": URL, "secret_token": "${TELEGRAM_WEBHOOK_SECRET}"}
    config = parse_config({"platforms": {"telegram": section}},
                          {"TELEGRAM_WEBHOOK_SECRET": SECRET})
    assert SECRET in secrets_of(config)  # masked in every log line
    # polling (the default) needs none of it
    parse_config({"platforms": {"telegram": {**section, "mode": "polling",
                                             "webhook": {}}}}, {})


# ---------------------------------------------------------------------- updates in


async def test_updates_arrive_by_webhook_and_are_answered_where_they_were_written(
        webhook_gateway: tuple[Gateway, int], fake: FakeTelegram) -> None:  # noqa: F811
    gw, _ = webhook_gateway
    # set as the issue asks: the secret token, the updates wanted, the connections
    assert (fake.webhook_url, fake.webhook_secret) == (URL, SECRET)
    assert fake.allowed_updates == ["message", "callback_query"]
    (set_call,) = [p for m, p in fake.calls if m == "setWebhook"]
    assert int(set_call["max_connections"]) == 40
    in_dm = fake.user_message(chat_id=ALICE, text="by webhook")
    in_topic = fake.user_message(text="in the topic", **TOPIC)
    await eventually(lambda: answered(fake, "by webhook") and answered(fake, "in the topic"),
                     what="both answers")
    await all_taken_and_settled(gw, fake)
    (dm,) = to(fake, ALICE)
    (topic,) = to(fake, FORUM, 42)
    assert dm.reply_to_message_id == in_dm["message_id"]
    assert topic.reply_to_message_id == in_topic["message_id"]
    assert not [m for m, _ in fake.calls if m == "getUpdates"]  # nothing polled
    assert all(a.status == 200 for a in fake.webhook_attempts)
    # the journal knows them by their update ids, as it does a polled update
    assert await journal(gw) == [str(u) for u in fake.webhook_taken]


async def test_an_update_posted_again_is_answered_200_and_handled_once(
        webhook_gateway: tuple[Gateway, int], fake: FakeTelegram) -> None:  # noqa: F811
    gw, port = webhook_gateway
    body = update_body(77001, "posted twice")
    assert await post(port, body) == 200
    assert await post(port, body) == 200  # Telegram's retry after a lost answer
    await eventually(lambda: answered(fake, "posted twice"), what="the answer")
    await settled(gw)
    assert len(answered(fake, "posted twice")) == 1
    assert await journal(gw) == ["77001"]


async def test_a_wrong_or_missing_secret_is_refused_with_401_and_nothing_is_journaled(
        webhook_gateway: tuple[Gateway, int], fake: FakeTelegram) -> None:  # noqa: F811
    gw, port = webhook_gateway
    body = update_body(88001, "forged")
    wrong = SECRET[:-1] + "X"
    with structlog.testing.capture_logs() as logs:
        assert await post(port, body, secret=None) == 401
        assert await post(port, body, secret=wrong) == 401
    refused = [e for e in logs if e["event"] == "telegram_webhook_refused"]
    assert [e["reason"] for e in refused] == ["no secret token", "wrong secret token"]
    assert wrong not in repr(logs) and SECRET not in repr(logs)  # never the value

    # Telegram itself, set with another secret (another setWebhook): refused until fixed
    fake.webhook_secret = "someone-elses-secret"
    fake.user_message(chat_id=ALICE, text="with the wrong secret")
    await fake.wait_for_attempts(3)
    assert {a.status for a in fake.webhook_attempts} == {401}
    async with Bot(fake.token, base_url=fake.base_url) as bot:
        info = await bot.get_webhook_info()
    assert info.last_error_message == "Wrong response from the webhook: 401 Unauthorized"
    assert info.pending_update_count == 1
    assert await journal(gw) == [] and fake.sent == []

    fake.webhook_secret = SECRET
    await eventually(lambda: answered(fake, "with the wrong secret"), what="the answer")
    await all_taken_and_settled(gw, fake)
    assert len(await journal(gw)) == 1 and len(fake.sent) == 1


async def test_an_update_not_journaled_is_answered_5xx_and_handled_once_after_the_retry(
        webhook_gateway: tuple[Gateway, int], fake: FakeTelegram,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    gw, _ = webhook_gateway
    inbound = gw.runner.inbound
    record = inbound.record
    failed: list[bool] = []

    async def failing_once(*args: Any, **kwargs: Any) -> Any:
        if not failed:  # the first write never commits
            failed.append(True)
            raise sqlite3.OperationalError("disk I/O error")
        return await record(*args, **kwargs)

    monkeypatch.setattr(inbound, "record", failing_once)
    fake.user_message(chat_id=ALICE, text="journaled at the second try")
    await eventually(lambda: answered(fake, "journaled at the second try"), what="the answer")
    await all_taken_and_settled(gw, fake)
    first, *rest = fake.webhook_attempts
    assert first.status is not None and 500 <= first.status <= 599  # Telegram tries again
    assert [a.status for a in rest] == [200]
    assert len(await journal(gw)) == 1
    assert len(answered(fake, "journaled at the second try")) == 1


async def test_a_body_that_is_no_update_is_logged_and_answered_200(
        webhook_gateway: tuple[Gateway, int], fake: FakeTelegram) -> None:  # noqa: F811
    """Telegram would post it again for a day, holding up what comes after it."""
    gw, port = webhook_gateway
    with structlog.testing.capture_logs() as logs:
        assert await post(port, b"{not json") == 200
        assert await post(port, b'{"update_id": 5, "message": {"chat": 7}}') == 200
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "telegram_webhook_malformed", "telegram_malformed_update_skipped"]
    assert await journal(gw) == []
    fake.user_message(chat_id=ALICE, text="and the next one")  # the next is served
    await eventually(lambda: answered(fake, "and the next one"), what="the answer")


# ---------------------------------------------------------------------- modes


async def test_switching_modes_both_ways_deletes_only_homings_own_webhook(
        tmp_path: Path, fake: FakeTelegram) -> None:  # noqa: F811
    home, port = tmp_path / "home", free_port()
    polling = telegram_config(home, fake)
    webhook = webhook_config(home, fake, port)

    async with running_gateway(polling) as gw:
        await adapter_of(gw).wait_connected()
        fake.user_message(chat_id=ALICE, text="polled")
        await eventually(lambda: answered(fake, "polled"), what="the polled answer")
        await all_taken_and_settled(gw, fake)
    async with running_gateway(webhook) as gw:  # polling → webhook
        await adapter_of(gw).wait_connected()
        assert fake.webhook_url == URL
        fake.user_message(chat_id=ALICE, text="posted")
        await eventually(lambda: answered(fake, "posted"), what="the posted answer")
        await all_taken_and_settled(gw, fake)
    assert fake.webhook_url == URL  # a stop leaves it set: Telegram keeps posting
    fake.user_message(chat_id=ALICE, text="while switching back")
    await eventually(lambda: fake.last_webhook_error, what="a failed post while down")

    deletes_before = len([m for m, _ in fake.calls if m == "deleteWebhook"])
    async with running_gateway(polling) as gw:  # webhook → polling
        await adapter_of(gw).wait_connected()
        assert fake.webhook_url == ""
        (delete,) = [p for m, p in fake.calls if m == "deleteWebhook"][deletes_before:]
        assert str(delete.get("drop_pending_updates", "false")).lower() == "false"
        await eventually(lambda: answered(fake, "while switching back"),
                         what="what waited, polled")
        fake.user_message(chat_id=ALICE, text="polled again")
        await eventually(lambda: answered(fake, "polled again"), what="the polled answer")
        await all_taken_and_settled(gw, fake)
    assert [len(answered(fake, t)) for t in ("polled", "posted", "while switching back",
                                              "polled again")] == [1, 1, 1, 1]

    fake.webhook_url = "https://other.example.org/hook"  # another tool's, set since
    with structlog.testing.capture_logs() as logs:
        async with running_gateway(polling) as gw:
            await adapter_of(gw).wait_connected()

            async def conflict() -> list[dict[str, Any]]:
                return [e for e in logs if e["event"] == "telegram_conflict"]

            await eventually_async(conflict, what="the conflict logged")
    assert fake.webhook_url == "https://other.example.org/hook"  # not removed


# ---------------------------------------------------------------------- doctor


async def test_doctor_shows_what_telegram_says_of_the_webhook_and_the_fix(
        tmp_path: Path, fake: FakeTelegram) -> None:  # noqa: F811
    home, port = tmp_path / "home", free_port()
    async with running_gateway(webhook_config(home, fake, port)) as gw:
        await adapter_of(gw).wait_connected()
    fake.user_message(chat_id=ALICE, text="while homing is down")  # refused: nobody listens
    await eventually(lambda: fake.last_webhook_error, what="the failed post")
    write_webhook_config(home, fake, port)
    env = home_env(home)

    code, out, err = await run_cli("doctor", env=env)
    assert "Traceback" not in err, err
    lines = out.splitlines()
    (line,) = [x for x in lines if x[5:].startswith("telegram webhook:")]
    assert code == 1
    assert line.startswith("FAIL telegram webhook: set to https://bot.example.org/…; "
                           "1 update waiting; at most 40 requests at once; Telegram's last "
                           "error (")
    assert line.split("): ", 1)[1] == (
        "Connection refused — fix: Telegram cannot reach bot.example.org: check its DNS and "
        "TLS certificate, and that the proxy there forwards to "
        f"127.0.0.1:{port}{PATH} while homing runs")
    assert PATH not in line.split(" — fix: ")[0]  # the secret path is not shown
    assert "skip telegram polling: webhook mode: Telegram posts the updates, nothing polls" \
        in lines

    async with running_gateway(webhook_config(home, fake, port)) as gw:  # delivered now
        await adapter_of(gw).wait_connected()
        await all_taken_and_settled(gw, fake)
    code, out, _ = await run_cli("doctor", env=env)
    (line,) = [x for x in out.splitlines() if x[5:].startswith("telegram webhook:")]
    assert line.startswith("ok   telegram webhook: set to https://bot.example.org/…; "
                           "0 updates waiting"), line
    assert line.endswith("Connection refused — delivered since")


# ---------------------------------------------------------------------- kill -9


def handled_counts(home: Path) -> dict[str, int]:
    """How often each message was handled, from the transcript: answered, or told it may
    not have finished."""
    counts: dict[str, int] = {}
    with closing(sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)) as db:
        for role, text in db.execute("SELECT role, text FROM messages"):
            first = text.split("\n")[0]
            if role == "reply" and first.startswith("Received: "):
                key = first.removeprefix("Received: ")
            elif role == "system" and "may not have finished" in text:
                key = text.split("“", 1)[1].split("”", 1)[0]
            else:
                continue
            counts[key] = counts.get(key, 0) + 1
    return counts


async def test_a_kill_9_while_updates_are_posted_loses_none_and_handles_each_once(
        tmp_path: Path, fake: FakeTelegram) -> None:  # noqa: F811
    port = free_port()
    fake.reverse_proxy(ORIGIN, f"http://127.0.0.1:{port}")
    home = tmp_path / "home"
    home.mkdir()
    write_webhook_config(home, fake, port)
    env = home_env(home)
    texts = [f"msg-{i}" for i in range(40)]
    first, _ = await start_daemon(env)
    second = None
    try:
        await eventually(lambda: fake.webhook_url == URL, timeout=60, what="the webhook set")
        for text in texts[:30]:
            fake.user_message(chat_id=ALICE, text=text)
        await fake.wait_for_attempts(3)
        first.send_signal(signal.SIGKILL)  # while the rest are being posted
        await first.wait()
        assert fake.pending_updates, "every update was taken before the kill"
        for text in texts[30:]:  # said while it is down: Telegram keeps trying
            fake.user_message(chat_id=ALICE, text=text)
        await eventually(lambda: any(a.error == "Connection refused"
                                     for a in fake.webhook_attempts),
                         what="a post refused while the daemon is down")

        second, _ = await start_daemon(env)
        await eventually(lambda: not fake.pending_updates, timeout=60,
                         what="every update taken after the restart")
        await daemon_settled(env, timeout=60)
        counts = handled_counts(home)
        assert counts == {text: 1 for text in texts}  # none lost, none handled twice
        assert all(answered(fake, text) for text in texts)  # each answered on Telegram
        with closing(sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)) as db:
            ids = [row[0] for row in db.execute(
                "SELECT platform_id FROM inbound WHERE platform = 'telegram'")]
        assert sorted(ids) == sorted({str(u) for u in fake.webhook_taken})
        assert len(ids) == len(texts)
    finally:
        for proc in (first, second):
            if proc is not None and proc.returncode is None:
                proc.terminate()
                await proc.wait()


# ---------------------------------------------------------------------- instances


async def test_on_a_shared_store_every_instance_takes_requests_and_none_holds_a_lease(
        tmp_path: Path, fake: FakeTelegram, pg_fresh_url: str) -> None:  # noqa: F811
    ports = free_port(), free_port()
    async with AsyncExitStack() as stack:
        gateways = []
        for name, port in zip(("vps1", "vps2"), ports, strict=True):
            config = make_config(
                tmp_path / name, store__url=pg_fresh_url, instance__name=name,
                cluster__lease_seconds=3.0, cluster__failover_seconds=3.0,
                platforms__telegram__enabled=True, platforms__telegram__token=fake.token,
                platforms__telegram__base_url=fake.base_url,
                platforms__telegram__base_file_url=fake.base_file_url,
                platforms__telegram__allowed_users=[str(ALICE)],
                platforms__telegram__mode="webhook",
                platforms__telegram__webhook=webhook_section(port))
            gw = await stack.enter_async_context(running_gateway(config))
            await adapter_of(gw).wait_connected(timeout=30)
            assert adapter_of(gw).poll_lease is None
            gateways.append(gw)
        # a load balancer in front of both: requests go to one, then the other
        fake.reverse_proxy(ORIGIN, *(f"http://127.0.0.1:{p}" for p in ports))
        texts = [f"spread {i}" for i in range(6)]
        for text in texts:
            fake.user_message(chat_id=ALICE, text=text)
        await eventually(lambda: all(answered(fake, t) for t in texts), timeout=30,
                         what="every answer")
        await eventually(lambda: not fake.pending_updates, what="every update taken")
        for gw in gateways:
            await settled(gw)
        assert [len(answered(fake, t)) for t in texts] == [1] * len(texts)
        leases = await gateways[0].store.db.fetchall("SELECT name FROM leases")
        assert not [name for (name,) in leases if str(name).startswith("telegram")]
        assert len(await journal(gateways[0])) == len(texts)


# ---------------------------------------------------------------------- the fake


async def test_the_fake_answers_the_webhook_methods_as_the_bot_api_does(
        fake: FakeTelegram) -> None:  # noqa: F811
    async with Bot(fake.token, base_url=fake.base_url) as bot:
        fake.user_message(chat_id=ALICE, text="waiting")
        info = await bot.get_webhook_info()
        assert (info.url, info.pending_update_count) == ("", 1)  # counted without one too
        for url, said in (("http://bot.example.org/x", "an https url must be provided"),
                          ("https://bot.example.org:8080/x", "only on ports 80, 88, 443")):
            with pytest.raises(BadRequest, match=f"(?i){said}"):
                await bot.set_webhook(url)
        with pytest.raises(BadRequest, match="(?i)secret token contains unallowed characters"):
            await bot.set_webhook(URL, secret_token="a+b/c=")
        assert await bot.set_webhook(URL, secret_token=SECRET, max_connections=500,
                                     allowed_updates=["message"])
        info = await bot.get_webhook_info()
        assert (info.url, info.max_connections, info.allowed_updates) == (
            URL, 100, ("message",))
        with pytest.raises(Conflict, match="webhook is active"):
            await bot.get_updates()
        assert WEBHOOK_ACTIVE.startswith("Conflict: ")
        await fake.wait_for_attempts(1)  # no proxy for the host: it does not resolve
        info = await bot.get_webhook_info()
        assert info.last_error_message == "Failed to resolve host: Name or service not known"
        assert info.pending_update_count == 1
        assert await bot.delete_webhook()
        (update,) = await bot.get_updates()  # kept for the poll
        assert update.message is not None and update.message.text == "waiting"
    said = [await _described(fake, method, params) for method, params in (
        ("setWebhook", {"url": URL}), ("setWebhook", {"url": URL}),
        ("deleteWebhook", {}), ("deleteWebhook", {}), ("setWebhook", {"url": ""}))]
    assert said == ["Webhook was set", "Webhook is already set", "Webhook was deleted",
                    "Webhook is already deleted", "Webhook is already deleted"]


async def test_the_fake_posts_in_order_with_the_secret_and_tries_again_until_taken(
        fake: FakeTelegram) -> None:  # noqa: F811
    taken: list[tuple[int, str | None]] = []
    answers = iter([503, 200, 200, 200])

    async def bot_side(request: web.Request) -> web.Response:
        body = await request.json()
        status = next(answers)
        if status == 200:
            taken.append((body["update_id"], request.headers.get(SECRET_HEADER)))
        return web.Response(status=status)

    app = web.Application()
    app.router.add_post(PATH, bot_side)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        fake.reverse_proxy(ORIGIN, f"http://127.0.0.1:{runner.addresses[0][1]}")
        ids = [fake.user_message(chat_id=ALICE, text=f"u{i}") for i in range(3)]
        async with Bot(fake.token, base_url=fake.base_url) as bot:
            assert await bot.set_webhook(URL, secret_token=SECRET)
        await eventually(lambda: len(taken) == 3, what="three updates taken")
        assert [u for u, _ in taken] == sorted(u for u, _ in taken)  # in order
        assert {s for _, s in taken} == {SECRET}
        assert [a.status for a in fake.webhook_attempts] == [503, 200, 200, 200]
        assert len(ids) == 3 and fake.pending_updates == []
    finally:
        await runner.cleanup()


async def _described(fake: FakeTelegram, method: str,  # noqa: F811
                     params: dict[str, Any]) -> str:
    async with aiohttp.ClientSession() as http, http.post(
            f"{fake.base_url}{fake.token}/{method}", json=params) as resp:
        body = await resp.json()
    assert body["ok"] is True and body["result"] is True
    return str(body["description"])
