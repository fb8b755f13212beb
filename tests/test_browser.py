"""The web chat page in a real browser: headless Chromium driven by Playwright.

Needs Debian's chromium (``apt-get install chromium``); ``.ci/run`` installs it
and sets HOMING_REQUIRE_BROWSER=1, so in CI a missing browser fails the run.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.daemon import running_gateway

from .conftest import make_config

CHROMIUM = os.environ.get("HOMING_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

if not Path(CHROMIUM).exists():
    if os.environ.get("HOMING_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"browser tests need chromium at {CHROMIUM} (apt-get install chromium)")
    pytest.skip(f"no chromium at {CHROMIUM}: apt-get install chromium to run the browser test",
                allow_module_level=True)

playwright_api = pytest.importorskip("playwright.async_api")
expect = playwright_api.expect


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[str]:
    async with running_gateway(make_config(tmp_path / "home")) as gw:
        yield f"http://127.0.0.1:{gw.runner.adapters['web'].port}"


@pytest.fixture
async def browser() -> AsyncIterator[object]:
    async with playwright_api.async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        await b.close()


async def open_page(context, url: str):
    page = await context.new_page()
    await page.goto(url)
    await expect(page.locator("#conn")).to_have_text("connected")
    await page.wait_for_function("location.search.includes('c=')")
    return page


async def test_a_job_notice_shows_in_both_tabs_of_its_conversation_and_never_elsewhere(
        site: str, browser) -> None:
    expect.set_options(timeout=10_000)
    context = await browser.new_context()
    a1 = await open_page(context, site + "/")
    conversation = re.search(r"[?&]c=([\w-]+)", a1.url).group(1)
    a2 = await open_page(context, f"{site}/?c={conversation}")
    b = await open_page(context, site + "/")
    assert conversation not in b.url

    await a1.bring_to_front()
    await a1.locator("#input").fill("/bg sleep 0.5; echo browser-marker")
    await a1.locator("#send").click()
    for page in (a1, a2):
        notice = page.locator('div.msg[data-kind="notification"]')
        await expect(notice).to_have_count(1)
        await expect(notice).to_contain_text("browser-marker")
    await expect(a2.locator('div.msg[data-kind="user"]')).to_contain_text("/bg sleep 0.5")
    await b.wait_for_timeout(300)
    await expect(b.locator('div.msg[data-kind="notification"]')).to_have_count(0)
    assert "browser-marker" not in await b.locator("#messages").inner_text()

    # rename from the page
    await a1.bring_to_front()
    a1.once("dialog", lambda dialog: dialog.accept("Deploy watch"))
    await a1.locator("#rename").click()
    await expect(a1.locator("#title")).to_have_text("Deploy watch")
    item = a1.locator(f'#sessions li[data-conversation="{conversation}"]')
    await expect(item).to_contain_text("Deploy watch")

    # archive from the page: hidden from the list unless archived ones are shown
    await a1.locator("#archive").click()
    await expect(a1.locator("#archive")).to_have_text("Unarchive")
    await expect(item).to_have_count(0)
    await a1.locator("#show-archived").check()
    await expect(item).to_have_count(1)
    await context.close()


async def test_a_message_typed_while_the_gateway_is_down_waits_and_is_sent_once_after(
        tmp_path: Path, browser) -> None:
    import socket

    expect.set_options(timeout=15_000)
    with socket.socket() as probe:  # one port for both gateways, so the page finds the second
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = make_config(tmp_path / "home", platforms__web__port=port)
    context = await browser.new_context()
    async with running_gateway(config):
        page = await open_page(context, f"http://127.0.0.1:{port}/")
        conversation = re.search(r"[?&]c=([\w-]+)", page.url).group(1)
    await expect(page.locator("#conn")).to_contain_text("reconnecting")
    await page.locator("#input").fill("typed while away")
    await page.locator("#send").click()
    waiting = page.locator('div.msg[data-kind="user"][data-pending="1"]')
    await expect(waiting).to_have_count(1)
    await expect(waiting).to_contain_text("not sent yet")  # the pending state, shown
    async with running_gateway(config) as gw:  # the page reconnects and sends it again
        await expect(page.locator("#conn")).to_have_text("connected")
        reply = page.locator('div.msg[data-kind="reply"]')
        await expect(reply).to_have_count(1)
        await expect(reply).to_contain_text("typed while away")
        await expect(page.locator('div.msg[data-pending="1"]')).to_have_count(0)
        await page.reload()  # the transcript holds it once, and nothing is sent again
        await expect(page.locator("#conn")).to_have_text("connected")
        await expect(page.locator('div.msg[data-kind="reply"]')).to_have_count(1)
        session = await gw.store.live_session(f"agent:main:web:dm:{conversation}")
        said = [line.text for line in await gw.store.messages(session.id)
                if line.role == "user"]
        assert said == ["typed while away"]
    await context.close()


async def test_a_streamed_reply_grows_in_one_bubble_that_the_final_text_replaces(
        tmp_path: Path, browser) -> None:
    from .fakes.openai_server import FakeOpenAI, Say
    from .model_support import model_config, web_base

    expect.set_options(timeout=10_000)
    answer = " ".join(f"piece{i}" for i in range(30))
    async with FakeOpenAI(lambda req: Say(answer), chunk_delay=0.1) as model, \
            running_gateway(model_config(tmp_path / "home", model)) as gw:
        context = await browser.new_context()
        page = await open_page(context, web_base(gw) + "/")
        await page.locator("#input").fill("write slowly")
        await page.locator("#send").click()
        replies = page.locator('div.msg[data-kind="reply"]')
        await expect(replies).to_have_count(1)
        await expect(replies).to_contain_text("piece3")
        partial = await replies.inner_text()
        assert "piece29" not in partial  # still being written
        await expect(replies).to_contain_text("piece29")
        await expect(page.locator("div.msg.writing")).to_have_count(0)
        await page.wait_for_timeout(300)
        await expect(replies).to_have_count(1)  # the final text took the bubble's place
        assert answer in await replies.inner_text()
        await context.close()
