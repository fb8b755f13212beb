"""Health, readiness and metrics on the web server."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gateway.daemon.assembly import running_gateway
from tests.conftest import make_config
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import eventually_async
from tests.test_web import open_tab


def samples(text: str) -> dict[tuple[str, tuple], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_parse_and_move_when_messages_and_notifications_flow(web, http) -> None:
    runner, base = web
    async with http.get(f"{base}/metrics") as resp:
        assert resp.status == 200
        before = samples(await resp.text())
    tab = await open_tab(http, base)
    await tab.say("/bg sleep 0.2; echo metered")
    await tab.frame()
    assert (await tab.frame())["kind"] == "notification"

    async def delivered() -> dict:
        async with http.get(f"{base}/metrics") as resp:
            now = samples(await resp.text())
        key = ("homing_notifications", (("kind", "completion"), ("state", "delivered")))
        return now if now.get(key) == 1 else {}

    after = await eventually_async(delivered, what="the delivered notice in the metrics")
    web_in = ("homing_messages_in_total", (("platform", "web"),))
    web_out = ("homing_messages_out_total", (("platform", "web"),))
    assert after[web_in] == before.get(web_in, 0) + 1
    assert after[web_out] >= before.get(web_out, 0) + 2  # the reply and the notice
    assert after[("homing_turns_total", (("trigger", "notification"),))] == 1
    assert after[("homing_notification_delivery_seconds_count", ())] == 1
    assert after[("homing_platform_connected", (("platform", "web"),))] == 1
    assert ("homing_jobs_running", ()) in after


async def test_healthz_and_readyz_when_all_is_up(web, http) -> None:
    _, base = web
    async with http.get(f"{base}/healthz") as resp:
        assert resp.status == 200
    async with http.get(f"{base}/readyz") as resp:
        assert resp.status == 200
        assert (await resp.json())["platforms"] == {"web": True}


async def test_readyz_is_503_while_a_platform_has_not_connected(tmp_path) -> None:
    server = FakeTelegram()
    await server.start()
    config = make_config(
        tmp_path / "home", platforms__telegram__enabled=True,
        platforms__telegram__token=server.token, platforms__telegram__base_url=server.base_url,
        platforms__telegram__base_file_url=server.base_file_url)
    await server.stop()  # Telegram is unreachable
    async with running_gateway(config) as gw, aiohttp.ClientSession() as http:
        base = f"http://127.0.0.1:{gw.runner.adapters['web'].port}"
        async with http.get(f"{base}/readyz") as resp:
            assert resp.status == 503
            body = await resp.json()
        assert body["platforms"] == {"web": True, "telegram": False}
        async with http.get(f"{base}/healthz") as resp:
            assert resp.status == 200  # alive, just not ready
