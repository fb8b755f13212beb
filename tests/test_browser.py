"""The web chat page in a real browser: headless Chromium driven by Playwright.

Needs Debian's chromium (``apt-get install chromium``); ``.ci/run`` installs it
and sets HOMING_REQUIRE_BROWSER=1, so in CI a missing browser fails the run.
Screenshots (phone 390x844, desktop 1280x800) go to $HOMING_ARTIFACTS, else to
each test's temporary directory; their paths are printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
import pytest_asyncio

from gateway.daemon.assembly import Gateway, running_gateway
from tests.conftest import make_config
from tests.fakes.media import png
from tests.helpers import eventually
from tests.model_support import web_base

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

# one Chromium for the module (see ``browser``): its tests and their gateways run in the
# module's event loop, where the browser's connection lives
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(loop_scope="module")
async def gateway(tmp_path: Path) -> AsyncIterator[Gateway]:
    """The real gateway with the built-in command agent (it echoes what it is sent)."""
    async with running_gateway(make_config(tmp_path / "home")) as gw:
        yield gw


@pytest.fixture
def site(gateway: Gateway) -> str:
    return web_base(gateway)


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    """Where screenshots go: $HOMING_ARTIFACTS when set (CI keeps it), else the test's
    temporary directory."""
    root = Path(os.environ.get("HOMING_ARTIFACTS") or tmp_path / "screenshots")
    root.mkdir(parents=True, exist_ok=True)
    return root


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chromium() -> AsyncIterator[object]:
    async with playwright_api.async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        await b.close()


@pytest_asyncio.fixture(loop_scope="module")
async def browser(chromium) -> AsyncIterator[object]:
    """The module's Chromium, started once; a test opens contexts of its own in it (each
    with its own cookies, storage and cache), and whatever it left open is closed after
    it, so no tab of one test is still there in the next."""
    yield chromium
    for context in list(chromium.contexts):
        await context.close()


async def open_page(context, url: str):
    page = await context.new_page()
    await page.goto(url)
    await expect(page.locator("#conn")).to_have_text("connected")
    # (polled from here: a predicate polled in the page is eval, which its CSP refuses)
    await expect(page).to_have_url(re.compile(r"[?&]c="))
    return page


async def say(page, text: str) -> None:
    await page.locator("#input").fill(text)
    await page.locator("#send").click()


def conversation_of(page) -> str:
    return re.search(r"[?&]c=([\w-]+)", page.url).group(1)


async def screenshot(page, artifacts: Path, name: str) -> Path:
    path = artifacts / f"{name}.png"
    await page.screenshot(path=str(path))
    print(f"screenshot: {path}")
    return path


def saved_files(home: Path) -> list[Path]:
    """What the gateway kept under its files/ directory."""
    return sorted(p for p in (home / "files").rglob("*") if p.is_file())


def free_port() -> int:
    """A port for two gateways in turn, so the page finds the second where the first was."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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
    expect.set_options(timeout=15_000)
    port = free_port()
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
    from tests.fakes.openai_server import FakeOpenAI, Say
    from tests.model_support import model_config, web_base

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


async def test_a_streamed_reply_is_formatted_in_its_bubble_while_it_is_written(
        tmp_path: Path, browser, artifacts: Path) -> None:
    from tests.fakes.openai_server import FakeOpenAI, Say
    from tests.model_support import model_config
    from tests.previews_support import ANSWERS

    expect.set_options(timeout=20_000)
    answer = ANSWERS[1]  # a heading, bold, a list, a quote, a table, a code block
    async with FakeOpenAI(lambda req: Say(answer), chunk_delay=0.1) as model, \
            running_gateway(model_config(tmp_path / "home", model)) as gw:
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        page = await open_page(context, web_base(gw) + "/")
        # every form the growing bubble takes, as the page shows it
        await page.evaluate("""() => {
          window.__forms = [];
          new MutationObserver(() => {
            const body = document.querySelector('div.msg.writing .body');
            if (body) window.__forms.push(body.innerText);
          }).observe(document.getElementById('messages'),
                     {childList: true, subtree: true, characterData: true});
        }""")
        await say(page, "why did it fail")
        writing = page.locator("div.msg.writing")
        await expect(writing.locator("h2")).to_have_text("Why the deploy failed")
        await expect(writing.locator("strong").first).to_have_text("migration")
        await expect(writing.locator("table td").first).to_have_text("users")
        await screenshot(page, artifacts, "streaming-formatted-desktop")
        await expect(writing).to_have_count(0)  # the final message took its place
        reply = page.locator('div.msg[data-kind="reply"]')
        await expect(reply).to_have_count(1)
        await expect(reply.locator("h2")).to_have_text("Why the deploy failed")
        await expect(reply.locator(".code .lang")).to_have_text("sh")
        forms = await page.evaluate("window.__forms")
        await context.close()
    assert len(forms) > 5
    for form in forms:  # never the Markdown as typed
        assert not [raw for raw in ("**", "## ", "---", "~~", "`", "](") if raw in form], form

# what a reply could carry to run script on the page
INJECTED = ('<img src=x onerror="window.__pwned=1"> <script>window.__pwned=2</script> '
            '[click me](javascript:window.__pwned=3) <a href="javascript:window.__pwned=4">raw</a>')
MARKDOWN = ("**bold** and `inline`, see [the docs](https://example.invalid/docs)\n\n"
            "| job | state |\n|---|---|\n| deploy | done |\n\n"
            "```python\nprint('hi')\n```\n\n" + INJECTED)


async def test_markdown_renders_with_a_copy_button_on_code_and_injected_html_never_runs(
        tmp_path: Path, browser, artifacts: Path) -> None:
    from tests.fakes.openai_server import FakeOpenAI, Say
    from tests.model_support import model_config

    expect.set_options(timeout=10_000)
    async with FakeOpenAI(lambda req: Say(MARKDOWN)) as model, \
            running_gateway(model_config(tmp_path / "home", model)) as gw:
        context = await browser.new_context(viewport={"width": 1280, "height": 800},
                                            permissions=["clipboard-read", "clipboard-write"])
        page = await open_page(context, web_base(gw) + "/")
        await say(page, INJECTED)  # the user's own markup, too
        reply = page.locator('div.msg[data-kind="reply"]')
        await expect(reply.locator("strong")).to_have_text("bold")
        await expect(reply.locator("code").first).to_have_text("inline")
        await expect(reply.locator("table th")).to_have_text(["job", "state"])
        await expect(reply.locator("table td")).to_have_text(["deploy", "done"])
        link = reply.locator('a[href="https://example.invalid/docs"]')
        await expect(link).to_have_attribute("target", "_blank")
        await expect(link).to_have_attribute("rel", re.compile("noopener"))

        code = reply.locator("pre")
        await expect(code).to_have_text("print('hi')")
        await expect(reply.locator(".code .lang")).to_have_text("python")
        copy = reply.locator(".code button.copy")
        await expect(copy).to_have_text("Copy")
        await copy.click()
        await expect(copy).to_have_text("Copied")
        assert await page.evaluate("navigator.clipboard.readText()") == "print('hi')\n"

        # the markup arrived as text: shown, never run, never a javascript: link
        for bubble in (reply, page.locator('div.msg[data-kind="user"]')):
            await expect(bubble).to_contain_text("<script>window.__pwned=2</script>")
            await expect(bubble).to_contain_text('<img src=x onerror="window.__pwned=1">')
        await expect(page.locator("#messages img, #messages script")).to_have_count(0)
        await expect(page.locator('#messages a[href^="javascript"]')).to_have_count(0)
        await expect(page.locator("#title")).to_contain_text("<img src=x")  # as text
        await reply.get_by_text("click me").click()
        await page.reload()  # the transcript, rendered from the server's HTML the same way
        await expect(reply.locator("table td")).to_have_text(["deploy", "done"])
        await expect(reply.locator(".code button.copy")).to_have_text("Copy")
        await expect(page.locator("#messages img, #messages script")).to_have_count(0)
        await screenshot(page, artifacts, "markdown-desktop")
        assert await page.evaluate("typeof window.__pwned") == "undefined"
        await context.close()


async def test_the_title_is_the_first_message_and_every_message_shows_its_time(
        gateway: Gateway, site: str, browser) -> None:
    expect.set_options(timeout=10_000)
    context = await browser.new_context()
    page = await open_page(context, site + "/")
    conversation = conversation_of(page)
    await expect(page.locator("#title")).to_have_text("New conversation")
    await expect(page.locator("#hint")).to_contain_text("/help")  # how to start

    await say(page, "Plan the deploy\nwith the details below")
    await expect(page.locator("#title")).to_have_text("Plan the deploy")
    await expect(page.locator("#hint")).to_have_count(0)
    item = page.locator(f'#sessions li[data-conversation="{conversation}"]')
    await expect(item.locator(".name")).to_have_text("Plan the deploy")
    # the last message on one line (the command agent joins what it echoes into one)
    await expect(item.locator(".preview")).to_have_text(re.compile(
        r"^Received: Plan the deploy with the details below \(I am the built-in"))
    await expect(item.locator(".when")).to_have_text(re.compile(r"^\d{2}:\d{2}$"))
    await expect(item).to_have_class(re.compile(r"\bcurrent\b"))

    times = page.locator("div.msg .head time")
    await expect(times).to_have_count(2)  # the message and its reply
    for stamp in await times.all():
        await expect(stamp).to_have_text(re.compile(r"^\d{2}:\d{2}$"))
        await expect(stamp).to_have_attribute("title", re.compile(r"\d{4}"))  # the full date

    # ids are details, never names
    session = await gateway.store.live_session(f"agent:main:web:dm:{conversation}")
    header = page.locator("#chat > header")
    await expect(page.locator("#ids")).to_be_hidden()
    assert session.id not in await header.inner_text()
    assert conversation not in await page.locator("#sidebar").inner_text()
    await page.locator("#details summary").click()
    await expect(page.locator("#ids")).to_contain_text(session.id)
    await expect(page.locator("#ids")).to_contain_text(f"agent:main:web:dm:{conversation}")
    await context.close()


async def test_a_late_notice_from_an_ended_session_shows_and_the_page_stays_on_the_live_one(
        gateway: Gateway, site: str, browser, artifacts: Path) -> None:
    expect.set_options(timeout=10_000)
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await open_page(context, site + "/")
    conversation = conversation_of(page)
    key = f"agent:main:web:dm:{conversation}"
    await say(page, "Watch the nightly build")
    await expect(page.locator('div.msg[data-kind="reply"]')).to_have_count(1)
    ended = await gateway.store.live_session(key)
    await say(page, "/bg sleep 1; echo late")
    await say(page, "/new")  # the job's session ends before the job does
    await expect(page.locator('div.msg[data-kind="system"]',
                              has_text="New session, started")).to_have_count(1)
    notice = page.locator('div.msg[data-kind="notification"]')
    await expect(notice).to_contain_text("late")
    await expect(notice.locator(".earlier")).to_have_text("from an earlier session")
    await expect(notice).to_have_attribute("data-outcome", "ok")

    # still on the live session, under the same title, selected in the sidebar
    live = await gateway.store.live_session(key)
    assert live.id != ended.id
    await page.locator("#details summary").click()
    await expect(page.locator("#ids")).to_contain_text(live.id)
    assert ended.id not in await page.locator("#ids").inner_text()
    await expect(page.locator("#title")).to_have_text("Watch the nightly build")
    item = page.locator(f'#sessions li[data-conversation="{conversation}"]')
    await expect(item).to_have_class(re.compile(r"\bcurrent\b"))
    page.once("dialog", lambda dialog: dialog.accept("Nightly build"))
    await page.locator("#rename").click()  # renames the conversation, whichever session
    await expect(page.locator("#title")).to_have_text("Nightly build")
    await expect(item.locator(".name")).to_have_text("Nightly build")

    # a reload shows both sessions, a separator where the first ended
    await page.reload()
    await expect(page.locator("#conn")).to_have_text("connected")
    separator = page.locator("#messages .separator")
    await expect(separator).to_have_count(1)
    await expect(separator).to_contain_text("session ended (new)")
    await expect(page.locator('div.msg[data-kind="notification"] .earlier')).to_have_count(1)
    order = await page.evaluate("""[...document.querySelectorAll('#messages > *')].map((e) =>
        e.classList.contains('separator') ? 'separator'
        : e.dataset.kind + (e.dataset.earlier ? ' (earlier)' : ''))""")
    cut = order.index("separator")
    assert sorted(order[:cut]) == ["reply", "reply", "user", "user", "user"], order
    assert order[cut + 1:] == ["system", "notification (earlier)"], order
    await screenshot(page, artifacts, "two-sessions-desktop")
    await context.close()


async def test_a_failed_job_and_a_watch_match_each_look_their_own(
        site: str, browser, artifacts: Path) -> None:
    expect.set_options(timeout=10_000)
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await open_page(context, site + "/")
    await say(page, "/watch READY echo READY; sleep 0.5; exit 3")
    match = page.locator('div.msg[data-kind="notification"][data-outcome="match"]')
    failed = page.locator('div.msg[data-kind="notification"][data-outcome="failed"]')
    await expect(match).to_contain_text("READY")
    await expect(failed).to_contain_text("exit code 3")
    await expect(failed.locator(".flag")).to_have_text("failed")
    await expect(match.locator(".flag")).to_have_text("match")
    await say(page, "/bg true")
    ok = page.locator('div.msg[data-kind="notification"][data-outcome="ok"]')
    await expect(ok).to_have_count(1)
    await expect(ok.locator(".flag")).to_have_count(0)
    colours = {await n.evaluate("e => getComputedStyle(e).borderLeftColor")
               for n in (match, failed, ok)}
    assert len(colours) == 3, colours
    await screenshot(page, artifacts, "notices-desktop")
    await context.close()


async def test_the_sign_in_form_takes_the_new_token_when_the_gateway_refuses_the_old(
        tmp_path: Path, browser, artifacts: Path) -> None:
    expect.set_options(timeout=15_000)
    port = free_port()
    home = tmp_path / "home"
    context = await browser.new_context(viewport={"width": 390, "height": 844})
    async with running_gateway(make_config(home, platforms__web__port=port,
                                           platforms__web__token="secret")):
        page = await open_page(context, f"http://127.0.0.1:{port}/?token=secret")
        await say(page, "before the token changed")
        await expect(page.locator('div.msg[data-kind="reply"]')).to_have_count(1)
    await expect(page.locator("#banner")).to_contain_text("Restarting")  # it went away (1001)
    async with running_gateway(make_config(home, platforms__web__port=port,
                                           platforms__web__token="rotated")):
        signin = page.locator("#signin")
        await expect(signin).to_be_visible()  # the socket was refused: a form, not JSON
        await expect(page.locator("#token")).to_have_attribute("type", "password")
        await screenshot(page, artifacts, "sign-in-phone")
        await page.locator("#token").fill("wrong")
        await page.locator("#signin-submit").click()
        await expect(page.locator("#signin-error")).to_contain_text("not accepted")
        await expect(signin).to_be_visible()
        await page.locator("#token").fill("rotated")
        await page.locator("#signin-submit").click()
        await expect(signin).to_be_hidden()
        await expect(page.locator("#conn")).to_have_text("connected")
        await expect(page.locator("#banner")).to_have_text("Back online")
        replies = page.locator('div.msg[data-kind="reply"]')
        await expect(replies).to_have_count(1)  # the transcript, read with the new token
        await say(page, "after signing in")
        await expect(replies).to_have_count(2)
        await expect(replies.nth(1)).to_contain_text("after signing in")
        assert await page.evaluate("sessionStorage.getItem('homing-token')") == "rotated"
        await page.reload()  # the tab keeps the new token
        await expect(page.locator("#conn")).to_have_text("connected")
        await expect(replies).to_have_count(2)
    await context.close()


async def test_the_page_fits_a_phone_and_a_desktop(site: str, browser, artifacts: Path) -> None:
    expect.set_options(timeout=10_000)
    title = "A long conversation about deploying the payments service to every region tonight"
    desktop = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await open_page(desktop, site + "/")
    conversation = conversation_of(page)
    await say(page, title)
    await expect(page.locator('div.msg[data-kind="reply"]')).to_have_count(1)
    await say(page, "/bg echo deploy/payments successfully rolled out")
    notice = page.locator('div.msg[data-kind="notification"]')
    await expect(notice.locator("pre")).to_contain_text("rolled out")  # its output, as code
    await expect(page.locator("#title")).to_have_text(title)
    await expect(page.locator("#sidebar")).to_be_visible()  # both panes
    await expect(page.locator("#messages")).to_be_visible()
    await expect(page.locator("#menu")).to_be_hidden()
    await screenshot(page, artifacts, "layout-desktop-1280x800")

    phone = await browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True,
                                      has_touch=True, reduced_motion="reduce")
    small = await open_page(phone, f"{site}/?c={conversation}")
    await expect(small.locator("#title")).to_have_text(title)
    await expect(small.locator("#sidebar")).to_be_hidden()  # behind the menu button
    await expect(small.locator("#menu")).to_be_visible()
    fits = await small.evaluate("""() => {
        const t = document.getElementById('title'), box = t.getBoundingClientRect();
        return {right: box.right, page: document.documentElement.scrollWidth,
                ellipsis: getComputedStyle(t).textOverflow, clipped: t.scrollWidth > t.clientWidth};
    }""")
    assert fits["right"] <= 390 and fits["page"] <= 390, fits
    assert fits["ellipsis"] == "ellipsis" and fits["clipped"], fits
    await screenshot(small, artifacts, "layout-phone-390x844")
    await small.locator("#menu").click()
    item = small.locator(f'#sessions li[data-conversation="{conversation}"]')
    await expect(item).to_be_visible()
    await screenshot(small, artifacts, "layout-phone-390x844-menu")
    await item.locator(".name").click()  # the conversation open already: the menu closes
    await expect(small.locator("#sidebar")).to_be_hidden()
    await phone.close()
    await desktop.close()


# ---- what a person reads: plain previews, the gateway's lines, code, the keys ---------

DESKTOP = {"viewport": {"width": 1280, "height": 800}}
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}
MARKDOWN_MARKS = re.compile(r"[#*`]|\]\(")
SESSION_ID = re.compile(r"\b[0-9a-f]{32}\b")


async def open_phone(browser, url: str, menu: bool = False):
    """The page at ``url`` on a phone, with its conversations panel open when ``menu``."""
    phone = await browser.new_context(**PHONE)
    page = await open_page(phone, url)
    if menu:
        await page.locator("#menu").click()
        await expect(page.locator("#sidebar")).to_be_visible()
    return page


async def sidebar_says(page, conversation: str, text: str | re.Pattern[str]) -> None:
    """Wait until the sidebar's line for ``conversation`` says ``text``: the sidebar is
    fetched again a moment after each frame, so a screenshot taken sooner shows the line
    before it (ends when the line is there, asserts what it says)."""
    line = page.locator(f'#sessions li[data-conversation="{conversation}"] .preview')
    await expect(line).to_have_text(text)


async def test_the_sidebar_shows_plain_words_and_a_command_never_titles_a_conversation(
        tmp_path: Path, browser, artifacts: Path) -> None:
    from tests.fakes.openai_server import FakeOpenAI, Say
    from tests.model_support import model_config

    expect.set_options(timeout=10_000)
    answer = "## Deploy plan\n\n**Approval needed** (a2293e5d): run `make deploy`"
    async with FakeOpenAI(lambda req: Say(answer)) as model, \
            running_gateway(model_config(tmp_path / "home", model)) as gw:
        context = await browser.new_context(**DESKTOP)
        page = await open_page(context, web_base(gw) + "/")
        conversation = conversation_of(page)
        item = page.locator(f'#sessions li[data-conversation="{conversation}"]')
        await say(page, "/help")
        await expect(page.locator('div.msg[data-kind="system"]')).to_contain_text("/new")
        await expect(item.locator(".preview")).to_contain_text("Commands: /help")
        await expect(page.locator("#title")).to_have_text("New conversation")  # not "/help"
        await expect(item.locator(".name")).to_have_text("New conversation")

        await say(page, "Ship the **v2** release\nwith its notes")
        reply = page.locator('div.msg[data-kind="reply"]')
        await expect(reply.locator("h2")).to_have_text("Deploy plan")  # the bubble: rendered
        await expect(reply.locator("strong")).to_have_text("Approval needed")
        await expect(page.locator("#title")).to_have_text("Ship the v2 release")
        await expect(item.locator(".name")).to_have_text("Ship the v2 release")
        preview = item.locator(".preview")
        await expect(preview).to_have_text(
            "Deploy plan Approval needed (a2293e5d): run make deploy")  # the sidebar: words
        await screenshot(page, artifacts, "sidebar-plain-desktop-1280x800")

        small = await open_phone(browser, f"{web_base(gw)}/?c={conversation}", menu=True)
        shown = small.locator(f'#sessions li[data-conversation="{conversation}"]')
        await expect(shown.locator(".name")).to_have_text("Ship the v2 release")
        await sidebar_says(small, conversation,
                           "Deploy plan Approval needed (a2293e5d): run make deploy")
        await expect(shown.locator(".preview")).to_be_visible()
        seen = await shown.inner_text()
        assert "Deploy plan Approval needed" in seen and not MARKDOWN_MARKS.search(seen), seen
        await screenshot(small, artifacts, "sidebar-plain-phone-390x844")
        await small.context.close()
        await context.close()


async def test_the_gateways_lines_read_as_messages_and_new_keeps_its_ids_under_details(
        gateway: Gateway, site: str, browser, artifacts: Path) -> None:
    expect.set_options(timeout=10_000)
    context = await browser.new_context(**DESKTOP)
    page = await open_page(context, site + "/")
    conversation = conversation_of(page)
    key = f"agent:main:web:dm:{conversation}"
    await say(page, "hello")
    reply = page.locator('div.msg[data-kind="reply"]')
    await expect(reply).to_have_count(1)
    first = await gateway.store.live_session(key)

    await say(page, "/help")
    system = page.locator('div.msg[data-kind="system"]')
    await expect(system).to_have_count(1)
    help_line = system.first
    await expect(help_line.locator(".label")).to_have_text("gateway")
    lines = (await help_line.locator(".body").inner_text()).split("\n")
    assert "/new — end this session and start a fresh one (alias /reset)" in lines, lines
    style = """e => { const s = getComputedStyle(e), b = getComputedStyle(e.querySelector('.body'));
        return {italic: s.fontStyle, size: b.fontSize, align: s.textAlign, colour: b.color,
                border: s.borderTopStyle}; }"""
    looks, agent = await help_line.evaluate(style), await reply.evaluate(style)
    assert looks["italic"] == "normal" and looks["border"] == "solid", looks  # a bubble
    for same in ("size", "align", "colour"):  # as readable as the agent's own
        assert looks[same] == agent[same], (looks, agent)
    await sidebar_says(page, conversation, re.compile(r"^Commands: /help — list the commands"))
    await screenshot(page, artifacts, "help-desktop-1280x800")

    await say(page, "/new")
    await expect(system).to_have_count(2)
    started = system.nth(1)
    await expect(started.locator(".body")).to_have_text(
        re.compile(r"^New session, started \d{2}:\d{2}\.$"))
    second = await gateway.store.live_session(key)
    assert second.id != first.id
    ids = started.locator(".session-ids dl")
    await expect(ids).to_be_hidden()  # ids are details
    assert not SESSION_ID.search(await page.locator("#messages").inner_text())
    await sidebar_says(page, conversation, "New session")  # its line says it the same way
    listed = await page.locator("#sessions").inner_text()
    assert not SESSION_ID.search(listed) and "Started a new session" not in listed, listed
    assert first.id[:8] not in listed and second.id[:8] not in listed, listed
    await screenshot(page, artifacts, "new-session-desktop-1280x800")
    await started.locator(".session-ids summary").click()
    await expect(ids).to_be_visible()
    await expect(ids.locator("dd")).to_have_text([second.id, first.id])
    await expect(ids.locator("dt")).to_have_text(["session id", "previous session"])

    small = await open_phone(browser, f"{site}/?c={conversation}")  # the transcript: the same
    again = small.locator('div.msg[data-kind="system"]')
    await expect(again).to_have_count(2)
    await expect(again.nth(1).locator(".body")).to_contain_text("New session, started")
    await expect(again.nth(0).locator(".label")).to_have_text("gateway")
    assert not SESSION_ID.search(await small.locator("#messages").inner_text())
    await screenshot(small, artifacts, "help-and-new-session-phone-390x844")
    await small.context.close()
    await context.close()


async def test_a_code_block_names_its_language_and_one_without_has_copy_in_its_corner(
        tmp_path: Path, browser, artifacts: Path) -> None:
    from tests.fakes.openai_server import FakeOpenAI, Say
    from tests.model_support import model_config

    expect.set_options(timeout=10_000)
    answer = "Two blocks:\n\n```python\nprint('hi')\n```\n\n```\nplain output\n```"
    async with FakeOpenAI(lambda req: Say(answer)) as model, \
            running_gateway(model_config(tmp_path / "home", model)) as gw:
        context = await browser.new_context(
            **DESKTOP, permissions=["clipboard-read", "clipboard-write"])
        page = await open_page(context, web_base(gw) + "/")
        await say(page, "show me code")
        blocks = page.locator('div.msg[data-kind="reply"] .code')
        await expect(blocks).to_have_count(2)
        named, bare = blocks.nth(0), blocks.nth(1)
        await expect(named.locator(".bar .lang")).to_have_text("python")
        await expect(named.locator(".bar button.copy")).to_have_text("Copy")
        await expect(bare.locator(".bar")).to_have_count(0)  # no empty bar
        copy = bare.locator("button.copy")
        await expect(copy).to_have_text("Copy")
        await expect(bare.locator("pre")).to_have_text("plain output")
        corner = await bare.evaluate("""w => { const pre = w.querySelector('pre'),
            p = pre.getBoundingClientRect(),
            c = w.querySelector('button.copy').getBoundingClientRect(),
            words = document.createRange();
            words.selectNodeContents(pre);
            return {right: p.right - c.right, top: c.top - p.top, inside: c.bottom <= p.bottom,
                    clear: c.left - words.getBoundingClientRect().right}; }""")
        assert 0 <= corner["right"] <= 8 and 0 <= corner["top"] <= 8 and corner["inside"], corner
        assert corner["clear"] >= 0, corner  # beside the output, not over it
        await sidebar_says(page, conversation_of(page), "Two blocks: print('hi') plain output")
        await screenshot(page, artifacts, "code-blocks-desktop-1280x800")
        await copy.click()
        await expect(copy).to_have_text("Copied")
        assert await page.evaluate("navigator.clipboard.readText()") == "plain output\n"

        small = await open_phone(browser, f"{web_base(gw)}/?c={conversation_of(page)}")
        shown = small.locator('div.msg[data-kind="reply"] .code')
        await expect(shown.nth(1).locator("button.copy")).to_be_visible()
        await expect(shown.nth(1).locator(".bar")).to_have_count(0)
        await screenshot(small, artifacts, "code-blocks-phone-390x844")
        await small.context.close()
        await context.close()


async def user_lines(page) -> list[str]:
    """What the user's bubbles say, in order."""
    return await page.locator('div.msg[data-kind="user"] .body').all_inner_texts()


async def test_the_keys_enter_sends_shift_enter_breaks_the_line_and_up_recalls_the_last(
        site: str, browser, artifacts: Path) -> None:
    expect.set_options(timeout=10_000)
    context = await browser.new_context(**DESKTOP)
    page = await open_page(context, site + "/")
    box = page.locator("#input")
    await expect(box).to_have_attribute("placeholder", re.compile("Enter to send"))
    await box.click()
    await page.keyboard.type("line one")
    await page.keyboard.press("Shift+Enter")
    await page.keyboard.type("line two")
    await expect(box).to_have_value("line one\nline two")  # a newline, nothing sent
    await page.keyboard.press("Enter")
    replies = page.locator('div.msg[data-kind="reply"]')
    await expect(replies).to_have_count(1)
    assert await user_lines(page) == ["line one\nline two"]
    await expect(box).to_have_value("")
    await expect(box).to_be_focused()

    await box.fill("by the button")
    await page.locator("#send").click()
    await expect(replies).to_have_count(2)
    await expect(box).to_be_focused()  # the focus came back to the box: type on

    await page.keyboard.press("ArrowUp")  # an empty box: the last message, to send again
    await expect(box).to_have_value("by the button")
    await sidebar_says(page, conversation_of(page),
                       re.compile(r"^Received: by the button \(I am the built-in"))
    await screenshot(page, artifacts, "keys-recalled-desktop-1280x800")
    await page.keyboard.press("End")
    await page.keyboard.type(", again")
    await page.keyboard.press("ArrowUp")  # not empty any more: Up moves the caret only
    await expect(box).to_have_value("by the button, again")
    assert await user_lines(page) == ["line one\nline two", "by the button"]  # not edited
    await page.keyboard.press("Escape")  # nothing under way: nothing to stop
    await page.keyboard.press("Enter")
    await expect(replies).to_have_count(3)
    assert await user_lines(page) == ["line one\nline two", "by the button",
                                      "by the button, again"]
    await context.close()


async def test_escape_stops_a_reply_as_it_is_written(tmp_path: Path, browser,
                                                     artifacts: Path) -> None:
    from tests.fakes.openai_server import FakeOpenAI, Say
    from tests.model_support import model_config

    expect.set_options(timeout=15_000)
    answer = " ".join(f"piece{i}" for i in range(400))
    async with FakeOpenAI(lambda req: Say(answer), chunk_delay=0.1) as model, \
            running_gateway(model_config(tmp_path / "home", model)) as gw:
        context = await browser.new_context(**DESKTOP)
        page = await open_page(context, web_base(gw) + "/")
        await say(page, "write at length")
        writing = page.locator("div.msg.writing")
        await expect(writing).to_contain_text("piece3")
        conversation = conversation_of(page)
        await sidebar_says(page, conversation, "you: write at length")  # the reply: not yet
        await screenshot(page, artifacts, "streaming-desktop-1280x800")
        await page.keyboard.press("Escape")
        await expect(page.locator('div.msg[data-kind="system"]')).to_have_text(
            re.compile("Stopped the turn under way."))
        assert await user_lines(page) == ["write at length", "/stop"]  # as if typed
        await expect(writing).to_have_count(0)  # the half-written bubble went
        await expect(page.locator("#activity")).to_have_text("")
        assert "piece399" not in await page.locator("#messages").inner_text()
        await sidebar_says(page, conversation, re.compile(r"^Stopped the turn under way\."))
        await screenshot(page, artifacts, "stopped-desktop-1280x800")
        await expect(page.locator("#input")).to_be_focused()
        await page.keyboard.press("ArrowUp")  # what was typed, not the /stop Escape sent
        await expect(page.locator("#input")).to_have_value("write at length")
        await context.close()


async def test_an_enter_that_ends_an_input_methods_word_sends_nothing(
        site: str, browser) -> None:
    """Japanese, Chinese…: Enter picks the word being composed; it is no send."""
    expect.set_options(timeout=10_000)
    context = await browser.new_context(**DESKTOP)
    page = await open_page(context, site + "/")
    box = page.locator("#input")
    await box.fill("にほんご")
    mine = page.locator('div.msg[data-kind="user"]')
    # Chromium and Firefox say isComposing; Safari's last Enter says only keyCode 229
    for composing in ({"isComposing": True}, {"keyCode": 229}):
        taken = await box.evaluate("""(box, composing) => {
            const e = new KeyboardEvent('keydown', {key: 'Enter', code: 'Enter', bubbles: true,
                                                    cancelable: true, ...composing});
            box.dispatchEvent(e);
            return {prevented: e.defaultPrevented, keyCode: e.keyCode,
                    isComposing: e.isComposing}; }""", composing)
        assert taken["prevented"] is False, (composing, taken)  # the page left it alone
        assert taken["keyCode"] == composing.get("keyCode", 0), taken  # the event said so
        await expect(mine).to_have_count(0)  # a send shows its bubble at once: none
        await expect(box).to_have_value("にほんご")
    await page.keyboard.press("Enter")  # the word chosen: this Enter sends
    await expect(mine).to_have_count(1)
    await expect(page.locator('div.msg[data-kind="reply"]')).to_have_count(1)
    assert await user_lines(page) == ["にほんご"]
    await expect(box).to_have_value("")
    await context.close()


async def test_on_a_phone_the_box_says_to_tap_send_and_enter_is_a_newline(
        site: str, browser, artifacts: Path) -> None:
    expect.set_options(timeout=10_000)
    page = await open_phone(browser, site + "/")
    box = page.locator("#input")
    await expect(box).to_have_attribute("placeholder", "Message — tap Send to send")
    await screenshot(page, artifacts, "composer-phone-390x844")
    await box.tap()
    await page.keyboard.type("first line")
    await page.keyboard.press("Enter")  # the phone keyboard's return: a new line
    await page.keyboard.type("second line")
    await expect(box).to_have_value("first line\nsecond line")
    await expect(page.locator('div.msg[data-kind="user"]')).to_have_count(0)
    await page.locator("#send").tap()
    await expect(page.locator('div.msg[data-kind="reply"]')).to_have_count(1)
    assert await user_lines(page) == ["first line\nsecond line"]
    await expect(box).to_have_value("")
    await screenshot(page, artifacts, "composer-phone-390x844-sent")
    await page.locator("#menu").tap()
    await expect(page.locator("#sidebar")).to_be_visible()
    await page.keyboard.press("Escape")  # (a keyboard on a tablet) closes the panel
    await expect(page.locator("#sidebar")).to_be_hidden()
    await page.context.close()


# ---- files: uploads from the page, files the agent posts ----------------------------


async def test_a_file_attached_with_text_uploads_and_the_agent_says_where_it_is_saved(
        gateway: Gateway, site: str, browser, artifacts: Path, tmp_path: Path) -> None:
    expect.set_options(timeout=10_000)
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await open_page(context, site + "/")
    conversation = conversation_of(page)
    # the upload is held at the network until its pending state has been seen
    release = asyncio.Event()

    async def hold(route) -> None:
        await release.wait()
        await route.continue_()

    await page.route("**/api/sessions/*/files", hold)
    await expect(page.locator("#attach")).to_be_visible()
    await expect(page.locator("#file-input")).to_be_hidden()
    await page.locator("#input").fill("my notes")
    await page.locator("#file-input").set_input_files(
        {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hello from the page"})
    mine = page.locator('div.msg[data-kind="user"]')
    await expect(mine).to_have_count(1)
    await expect(mine).to_have_attribute("data-pending", "1")
    await expect(mine.locator(".state")).to_have_text("uploading notes.txt…")
    await expect(mine.locator(".body")).to_have_text("my notes")
    await expect(page.locator("#input")).to_have_value("")  # the text went with the file
    await screenshot(page, artifacts, "upload-pending-desktop")
    release.set()

    reply = page.locator('div.msg[data-kind="reply"]')
    await expect(reply).to_have_count(1)
    await expect(reply).to_contain_text("Saved:")
    await expect(reply).to_contain_text("notes.txt (text/plain, 19 bytes)")
    await expect(reply).to_contain_text("Received: my notes")
    await expect(page.locator('div.msg[data-pending="1"]')).to_have_count(0)
    await expect(mine.locator(".state")).to_have_count(0)
    await expect(mine.locator(".body")).to_have_text("my notes")
    await expect(mine.locator(".fname")).to_have_text("notes.txt")
    await expect(mine.locator(".fsize")).to_have_text("19 bytes")
    [kept] = saved_files(tmp_path / "home")
    assert kept.parent == tmp_path / "home" / "files" / f"web-{conversation}"
    assert kept.read_bytes() == b"hello from the page"
    assert str(kept) in await reply.inner_text()
    await screenshot(page, artifacts, "upload-done-desktop")
    await context.close()


async def test_files_dropped_on_the_chat_upload_one_after_another_with_the_token(
        tmp_path: Path, browser, artifacts: Path) -> None:
    expect.set_options(timeout=10_000)
    home = tmp_path / "home"
    async with running_gateway(make_config(home, platforms__web__token="secret")) as gw:
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        page = await open_page(context, web_base(gw) + "/?token=secret")
        uploads: list[str] = []  # sent | finished, as the browser did them
        headers: list[dict[str, str]] = []

        def seen(event: str):
            def record(request) -> None:
                if request.method == "POST" and request.url.endswith("/files"):
                    uploads.append(event)
                    if event == "sent":
                        headers.append(request.headers)
            return record

        page.on("request", seen("sent"))
        page.on("requestfinished", seen("finished"))
        await page.locator("#input").fill("two files")
        dropped = await page.evaluate_handle("""() => {
            const dt = new DataTransfer();
            dt.items.add(new File(['alpha bytes'], 'alpha.txt', { type: 'text/plain' }));
            dt.items.add(new File(['b,c\\n1,2\\n'], 'beta.csv', { type: 'text/csv' }));
            return dt;
        }""")
        zone = page.locator("#dropzone")
        await expect(zone).to_be_hidden()
        await page.locator("#messages").dispatch_event("dragenter", {"dataTransfer": dropped})
        await page.locator("#messages").dispatch_event("dragover", {"dataTransfer": dropped})
        await expect(zone).to_be_visible()  # the chat shows where to drop
        await expect(page.locator("#chat")).to_have_class(re.compile(r"\bdropping\b"))
        await screenshot(page, artifacts, "upload-dropzone-desktop")
        await page.locator("#messages").dispatch_event("drop", {"dataTransfer": dropped})
        await expect(zone).to_be_hidden()

        replies = page.locator('div.msg[data-kind="reply"]')
        await expect(replies).to_have_count(2)
        await expect(replies.nth(0)).to_contain_text("alpha.txt (text/plain, 11 bytes)")
        await expect(replies.nth(0)).to_contain_text("Received: two files")  # the text: once
        await expect(replies.nth(1)).to_contain_text("beta.csv (text/csv, 8 bytes)")
        assert "Received" not in await replies.nth(1).inner_text()
        mine = page.locator('div.msg[data-kind="user"]')
        await expect(mine.locator(".fname")).to_have_text(["alpha.txt", "beta.csv"])
        await expect(mine.nth(0).locator(".body")).to_have_text("two files")
        await expect(mine.nth(1).locator(".body")).to_have_text("")
        await expect(page.locator('div.msg[data-pending="1"]')).to_have_count(0)
        await expect(page.locator("#input")).to_have_value("")
        await eventually(lambda: len(uploads) == 4, what="both uploads finished")
        assert uploads == ["sent", "finished", "sent", "finished"], uploads  # one at a time
        for sent in headers:  # the page's token, and the browser's own multipart boundary
            assert sent["authorization"] == "Bearer secret"
            assert sent["content-type"].startswith("multipart/form-data; boundary=")
        kept = {p.name.split("-", 2)[-1]: p.read_bytes() for p in saved_files(home)}
        assert kept == {"alpha.txt": b"alpha bytes", "beta.csv": b"b,c\n1,2\n"}
        await context.close()


async def test_a_file_over_the_limit_shows_the_gateways_reason_and_nothing_is_kept(
        tmp_path: Path, browser) -> None:
    expect.set_options(timeout=10_000)
    home = tmp_path / "home"
    async with running_gateway(make_config(home, attachments__max_bytes=100)) as gw:
        context = await browser.new_context()
        page = await open_page(context, web_base(gw) + "/")
        await page.locator("#input").fill("the big one")
        await page.locator("#file-input").set_input_files(
            {"name": "big.bin", "mimeType": "application/octet-stream", "buffer": b"x" * 5000})
        error = page.locator('div.msg[data-kind="error"]')
        await expect(error).to_contain_text("big.bin")
        await expect(error).to_contain_text("attachments.max_bytes")  # the 413's own words
        await expect(error).to_contain_text("100 bytes")
        await expect(page.locator('div.msg[data-kind="user"]')).to_have_count(0)  # replaced
        await expect(page.locator("#input")).to_have_value("the big one")  # given back
        assert saved_files(home) == []

        # a file within the limit still goes, with the text given back
        await page.locator("#file-input").set_input_files(
            {"name": "small.txt", "mimeType": "text/plain", "buffer": b"tiny"})
        reply = page.locator('div.msg[data-kind="reply"]')
        await expect(reply).to_contain_text("small.txt (text/plain, 4 bytes)")
        await expect(reply).to_contain_text("Received: the big one")
        assert [p.read_bytes() for p in saved_files(home)] == [b"tiny"]
        await expect(error).to_have_count(1)
        await context.close()


async def test_a_message_refused_for_what_it_holds_shows_why_and_is_never_sent_again(
        gateway: Gateway, site: str, browser) -> None:
    expect.set_options(timeout=10_000)
    context = await browser.new_context()
    page = await open_page(context, site + "/")
    await page.evaluate("document.getElementById('input').value = 'deploy \\u0000 now'")
    await page.locator("#send").click()
    refused = page.locator('div.msg[data-kind="user"][data-not-taken="1"]')
    await expect(refused).to_contain_text("not sent: frame refused")
    await expect(refused).to_contain_text("NUL character")
    await expect(page.locator('div.msg[data-pending="1"]')).to_have_count(0)
    await page.reload()  # a reconnect sends what is still unacknowledged: not that one
    await expect(page.locator("#conn")).to_have_text("connected")
    await say(page, "deploy now")
    await expect(page.locator('div.msg[data-kind="reply"]')).to_contain_text("deploy now")
    await expect(page.locator('div.msg[data-pending="1"]')).to_have_count(0)
    await expect(page.locator('div.msg[data-kind="error"]')).to_have_count(0)
    session = await gateway.store.live_session(f"agent:main:web:dm:{conversation_of(page)}")
    assert [line.text for line in await gateway.store.messages(session.id)
            if line.role == "user"] == ["deploy now"]
    await context.close()


async def test_a_file_the_agent_posts_is_a_download_link_and_an_image_shows_inline(
        tmp_path: Path, browser, artifacts: Path) -> None:
    expect.set_options(timeout=10_000)
    out = (tmp_path / "out").resolve()
    out.mkdir()
    report = out / "report.txt"
    report.write_bytes(b"numbers\n1 2 3\n")
    chart = out / "chart.png"
    chart.write_bytes(png(40, 20))
    config = make_config(tmp_path / "home", attachments__send_roots=[str(out)],
                         platforms__web__token="secret")
    async with running_gateway(config) as gw:
        context = await browser.new_context(viewport={"width": 1280, "height": 800})
        page = await open_page(context, web_base(gw) + "/?token=secret")
        await say(page, f"/send {report}")
        posted = page.locator('div.msg[data-kind="reply"]')
        await expect(posted).to_have_count(1)
        link = posted.locator("a.fname")
        await expect(link).to_have_text("report.txt")
        await expect(posted.locator(".fsize")).to_have_text("14 bytes")
        await expect(posted.locator(".body")).to_have_text("")  # the name shows once
        await expect(posted.locator("img")).to_have_count(0)  # not an image
        href = await link.get_attribute("href")
        assert href == "/api/files?" + urlencode({"path": str(report)}) + "&token=secret"
        async with page.expect_download() as info:
            await link.click()
        download = await info.value
        assert download.suggested_filename == "report.txt"
        assert Path(await download.path()).read_bytes() == b"numbers\n1 2 3\n"
        fetched = await page.evaluate("""async (href) => {
            const r = await fetch(href), bare = await fetch(href.replace(/&token=[^&]*/, ''));
            return [r.status, await r.text(), bare.status];
        }""", href)
        assert fetched == [200, "numbers\n1 2 3\n", 401]  # the link carries the token

        await say(page, f"/send {chart} the chart")
        await expect(posted).to_have_count(2)
        picture = posted.nth(1)
        await expect(picture.locator(".body")).to_have_text("the chart")
        await expect(picture.locator("a.fname")).to_have_text("chart.png")
        preview = picture.locator("img.file-preview")
        await expect(preview).to_be_visible()
        await expect(preview).to_have_js_property("naturalWidth", 40)  # it loaded
        await expect(preview).to_have_attribute(
            "src", "/api/files?" + urlencode({"path": str(chart)}) + "&token=secret")
        await screenshot(page, artifacts, "agent-files-desktop")
        await context.close()


async def test_a_message_too_long_shows_why_and_is_never_sent_again(
        gateway: Gateway, site: str, browser) -> None:
    """Over the frame limit the message is refused by its id: the page shows it as not
    sent, too long, and a reconnect does not send it again (the server sees it once)."""
    from gateway.platforms.web.adapter import MAX_FRAME_BYTES, WebAdapter

    expect.set_options(timeout=10_000)
    adapter = gateway.runner.adapters["web"].inner
    assert isinstance(adapter, WebAdapter)
    oversize: list[int] = []
    on_frame = adapter._on_frame

    async def counted(ws, data: str, route, tab: str) -> None:
        if len(data.encode()) > MAX_FRAME_BYTES:
            oversize.append(len(data))
        await on_frame(ws, data, route, tab)

    adapter._on_frame = counted  # type: ignore[method-assign]
    try:
        context = await browser.new_context()
        page = await open_page(context, site + "/")
        await say(page, "long " * (MAX_FRAME_BYTES // 5 + 10))
        refused = page.locator('div.msg[data-kind="user"][data-not-taken="1"]')
        await expect(refused).to_contain_text("not sent: message too long")
        await expect(refused).to_contain_text("send it as a file instead")
        await expect(page.locator('div.msg[data-pending="1"]')).to_have_count(0)
        await expect(page.locator('div.msg[data-kind="error"]')).to_have_count(0)
        await page.reload()  # a reconnect sends what is still unacknowledged: not that one
        await expect(page.locator("#conn")).to_have_text("connected")
        await say(page, "a short one")
        await expect(page.locator('div.msg[data-kind="reply"]')).to_contain_text("a short one")
        await expect(page.locator('div.msg[data-pending="1"]')).to_have_count(0)
        assert len(oversize) == 1, oversize
        session = await gateway.store.live_session(
            f"agent:main:web:dm:{conversation_of(page)}")
        assert [line.text for line in await gateway.store.messages(session.id)
                if line.role == "user"] == ["a short one"]
        await context.close()
    finally:
        adapter._on_frame = on_frame  # type: ignore[method-assign]
