"""Bad input from outside gets a 4xx, an error frame or a reply naming what is wrong —
never a 500, a dropped socket or "send it again" — and nothing of it is stored."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.contract.approval import button_data
from gateway.daemon.assembly import Gateway, running_gateway
from gateway.inbound.checks import MAX_JSON_DEPTH, InputRefused, load_json, string_members
from gateway.platforms.telegram.adapter import TelegramAdapter
from gateway.platforms.web.adapter import MAX_FRAME_BYTES
from gateway.words.route import Route
from tests.approval_support import runs
from tests.conftest import make_config
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import eventually, settled
from tests.model_support import web_base
from tests.test_telegram import FORUM
from tests.test_telegram_approvals import TOPIC, answer_to, asked, replies, telegram_gateway
from tests.test_web import open_tab

NESTED = "[" * 1000 + "]" * 1000
LONG_NUMBER = "1" * 5000
ALICE = 1


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[Gateway]:
    async with running_gateway(make_config(tmp_path / "home")) as gateway:
        yield gateway


def _part(disposition: str) -> bytes:
    return (f"--x\r\nContent-Disposition: form-data; name=\"file\"; {disposition}\r\n"
            f"Content-Type: text/plain\r\n\r\nhello\r\n--x--\r\n").encode()


@pytest.mark.parametrize(("body", "problem"), [
    (_part('filename="a\x00b.txt"'), "malformed header"),
    (_part('filename="a\nb.txt"'), "malformed header"),
    (_part(f'filename="{"x" * 10_000}.txt"'), "header line of the form is too long"),
    (_part(f'filename="{"x" * 300}.txt"'), "the file name is 304 characters long (at most 255)"),
    (_part("filename*=UTF-8''a%00b.txt"), "the file name holds a control character (U+0000"),
    (_part("filename*=UTF-8''a%0Ab.txt"), "the file name holds a control character (U+000A"),
    (_part('filename="ok.txt"').replace(b"hello", "caf\xe9".encode("latin-1"))
     .replace(b'filename="ok.txt"', 'filename="caf\xe9.txt"'.encode("latin-1")),
     "the file name is not UTF-8"),
    (b"--x\r\n", "the form is cut short or malformed"),
    # the file is in, then the form breaks off: the saved file goes again
    (_part('filename="ok.txt"')[:-len(b"--x--\r\n")]
     + b'--x\r\nContent-Disposition: form-data; name="text"\r\n\r\nhal', "cut short"),
    (b'--x\r\nContent-Disposition: form-data; name="text"\r\n\r\na\x00b\r\n--x\r\n'
     b'Content-Disposition: form-data; name="file"; filename="ok.txt"\r\n\r\nhi\r\n--x--\r\n',
     "the text holds a NUL character (U+0000, character 2)"),
])
async def test_a_bad_upload_is_a_400_naming_the_problem_and_keeps_nothing(
        tmp_path: Path, gw: Gateway, http: aiohttp.ClientSession, body: bytes,
        problem: str) -> None:
    base = web_base(gw)
    tab = await open_tab(http, base)
    async with http.post(f"{base}/api/sessions/{tab.ready['session_id']}/files", data=body,
                         headers={"Content-Type": "multipart/form-data; boundary=x"}) as r:
        assert r.status == 400
        assert problem in (await r.json())["error"]
    await tab.no_frame()  # nothing was handed to the conversation
    files = tmp_path / "home" / "files"
    assert [p for p in files.rglob("*") if p.is_file()] == []
    assert await gw.store.messages(tab.ready["session_id"]) == []


async def test_a_path_with_a_nul_is_a_400(gw: Gateway, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{web_base(gw)}/api/files?path=%00") as r:
        assert r.status == 400
        assert "NUL" in (await r.json())["error"]


@pytest.mark.parametrize(("body", "problem"), [
    (NESTED, "nests arrays or objects more than 32 deep"),
    ('{"title": ' + LONG_NUMBER + "}", "a number 5000 characters long (at most 100)"),
    ('{"paused": ' + LONG_NUMBER + ".5}", "a number 5002 characters long"),
    ('{"title": "\\ud800"}', "lone surrogate"),
    ('{"title": "a\\u0000b"}', "NUL character"),
    ('{"title": NaN}', "NaN, which is not a JSON number"),
    ('{"title": 1e400}', "1e400, which is out of range for a number"),
])
@pytest.mark.parametrize("path", ["/api/sessions/{sid}", "/api/schedules/{sid}",
                                  "/api/conversations/{conversation}"])
async def test_a_json_body_past_the_limits_is_a_400_and_changes_nothing(
        gw: Gateway, http: aiohttp.ClientSession, path: str, body: str, problem: str) -> None:
    base = web_base(gw)
    tab = await open_tab(http, base)
    url = base + path.format(sid=tab.ready["session_id"],
                             conversation=tab.ready["conversation"])
    async with http.patch(url, data=body, headers={"Content-Type": "application/json"}) as r:
        assert r.status == 400
        assert problem in (await r.json())["error"]
    session = await gw.store.get(tab.ready["session_id"])
    assert session is not None and session.title is None


@pytest.mark.parametrize(("raw", "problem"), [
    (NESTED, "nests arrays or objects more than 32 deep"),
    (json.dumps({"type": "message", "text": "hi", "sent_at": 0})[:-2] + LONG_NUMBER + "}",
     "a number 5000 characters long (at most 100)"),
    ('{"type": "message", "text": "hi \\ud800"}', "lone surrogate, which is not valid Unicode"),
    ('{"type": "message", "text": "a\\u0000b"}', "NUL character (U+0000, character 2)"),
])
async def test_a_frame_past_the_limits_gets_an_error_frame_and_the_tab_stays_open(
        gw: Gateway, http: aiohttp.ClientSession, raw: str, problem: str) -> None:
    tab = await open_tab(http, web_base(gw))
    await tab.ws.send_str(raw)
    frame = await tab.frame()
    assert frame["type"] == "error" and problem in frame["error"]
    await tab.say("still here?")
    assert "still here?" in (await tab.frame())["text"]
    lines = await gw.store.messages(tab.ready["session_id"])
    assert [line.text for line in lines if line.role == "user"] == ["still here?"]


@pytest.mark.parametrize(("text", "problem"), [
    ("a\\u0000b", "NUL character"), ("hi \\ud800", "lone surrogate"), ("", "non-empty"),
])
async def test_a_message_frame_refused_for_what_it_holds_names_its_id_not_to_resend(
        gw: Gateway, http: aiohttp.ClientSession, text: str, problem: str) -> None:
    """The page keeps a message until it is acknowledged and sends it again on every
    reconnect: a refusal for its content names it, and says that resending cannot help."""
    tab = await open_tab(http, web_base(gw))
    await tab.ws.send_str('{"type": "message", "text": "' + text + '", "id": "m-1"}')
    frame = await tab.frame()
    assert frame["type"] == "error" and problem in frame["error"]
    assert (frame["id"], frame["retry"]) == ("m-1", False)
    await tab.ws.send_str('{"type": "message", "text": "x\\u0000", "id": 5}')
    assert "id" not in await tab.frame()  # no message id to name: nothing to hold back
    assert await gw.store.messages(tab.ready["session_id"]) == []


LONG = "x" * (MAX_FRAME_BYTES + 1)


@pytest.mark.parametrize("raw", [
    # as the page sends it: the text first, its id after
    json.dumps({"type": "message", "text": LONG, "id": "m-big", "sent_at": 1.5}),
    json.dumps({"id": "m-big", "text": LONG, "type": "message"}),
    json.dumps({"type": "message", "text": '"\\{[' * 20_000 + "é🙂", "id": "m-big"}),
    json.dumps({"type": "message", "extra": {"a": [[["]"]], {}]}, "n": -1.5e300,
                "flag": None, "text": LONG, "id": "m-big"}, indent=4),
])
async def test_a_message_frame_over_the_limit_is_refused_by_its_id_not_to_resend(
        gw: Gateway, http: aiohttp.ClientSession, raw: str) -> None:
    """Too large to decode, the frame is still named by its id (and said to be a message
    too long), so the page drops it instead of sending it on every reconnect; the same
    frame again is refused the same way, and nothing of it is taken."""
    tab = await open_tab(http, web_base(gw))
    for _ in range(2):
        await tab.ws.send_str(raw)
        frame = await tab.frame()
        assert frame["type"] == "error" and frame["error"].startswith("message too long: ")
        assert f"over the limit of {MAX_FRAME_BYTES}" in frame["error"]
        assert (frame["id"], frame["retry"]) == ("m-big", False)
    await tab.say("still here?")
    assert "still here?" in (await tab.frame())["text"]
    lines = await gw.store.messages(tab.ready["session_id"])
    assert [line.text for line in lines if line.role == "user"] == ["still here?"]


@pytest.mark.parametrize(("raw", "error"), [
    (json.dumps({"type": "message", "text": LONG}), "message too long"),  # no id to name
    (json.dumps({"type": "message", "text": LONG, "id": "\ud800"}), "message too long"),
    (json.dumps({"type": "message", "text": LONG, "id": "x" * 65}), "message too long"),
    (json.dumps({"type": "message", "text": LONG, "id": 7}), "message too long"),
    (json.dumps({"type": "approve", "text": LONG, "id": "a1"}), "frame too large"),
    (json.dumps([{"type": "message", "id": "m-big"}, LONG]), "frame too large"),
])
async def test_a_frame_over_the_limit_without_a_message_id_names_none(
        gw: Gateway, http: aiohttp.ClientSession, raw: str, error: str) -> None:
    tab = await open_tab(http, web_base(gw))
    await tab.ws.send_str(raw)
    frame = await tab.frame()
    assert frame["type"] == "error" and frame["error"].startswith(error)
    assert "id" not in frame and "retry" not in frame


NAMES = ("type", "id")


@pytest.mark.parametrize(("data", "found"), [
    ('{"type": "message", "text": "hi", "id": "a1"}', {"type": "message", "id": "a1"}),
    (' {\n "text" : "x\\"}{[" ,"n":-1.5e10, "meta": {"a": [1, {"b": "]"}]}, "ok": true, '
     '"no": null, "id" : "z", "type": "message"}', {"id": "z", "type": "message"}),
    ('{"id": "\\u0041\\u00e9\\ud83d\\ude42"}', {"id": "Aé🙂"}),  # escapes, a whole pair
    ('{"id": "\\ud800", "type": "message"}', {"type": "message"}),  # cannot be stored
    ('{"id": "a\\u0000", "type": "message"}', {"type": "message"}),
    ('{"id": 5, "type": ["message"]}', {}),  # named, but not strings
    ('{"id": "first", "id": "second"}', {"id": "first"}),
    ('{"type": "message", "id": "a\x01"}', {"type": "message"}),  # a raw control character
    ('{"type": "message", "id": "bad \\x escape"}', {"type": "message"}),
    ('{"type": "message", "id": "unclosed', {"type": "message"}),
    ('{"type": "message", "id" "no colon"}', {"type": "message"}),
    ('{"type": "message" "id": "no comma"}', {"type": "message"}),
    ('["type", "message"]', {}), ("", {}), ("{", {}), ('"{"', {}),
    ('{"n": \u0661, "id": "a"}', {}),  # an Arabic-Indic digit: no JSON number
    ('{"type": "message", "x": {"y": [', {"type": "message"}),  # never closed
    # the scan ends once both are read: what follows them is never looked at
    ('{"type": "message", "id": "a1", "text": "' + "\\" * 9, {"type": "message", "id": "a1"}),
])
def test_string_members_reads_the_named_strings_and_passes_over_the_rest(
        data: str, found: dict[str, str]) -> None:
    assert string_members(data, NAMES) == found


# (built in the test: a dozen frames of 16 MiB held from collection on would weigh)
HOSTILE = {
    # nesting millions deep: given up on, never recursed into
    "deep nesting": (lambda n: '{"type": "message", "x": ' + "[" * (n // 2) + "]" * (n // 2)
                     + ', "id": "a"}', {"type": "message"}),
    "deep nesting, unclosed strings": (lambda n: '{"type": "message", "x": ' + '["' * (n // 2),
                                       {"type": "message"}),
    "deep nesting, unclosed": (lambda n: '{"type": "message", "x": ' + "[{" * (n // 2),
                               {"type": "message"}),
    "unclosed string of escaped quotes": (
        lambda n: '{"type": "message", "text": "' + '\\"' * (n // 2), {"type": "message"}),
    "unclosed string": (lambda n: '{"type": "message", "text": "' + "x" * n,
                        {"type": "message"}),
    "escaped quotes": (lambda n: '{"type": "message", "text": "' + '\\"' * (n // 2)
                       + '", "id": "a"}', {"type": "message", "id": "a"}),
    # lone surrogates in a value passed over do not matter
    "lone surrogates": (lambda n: '{"type": "message", "text": "' + "\\ud800" * (n // 6)
                        + '", "id": "a"}', {"type": "message", "id": "a"}),
    # a number never converted
    "huge number": (lambda n: '{"type": "message", "n": ' + "9" * n + ', "id": "a"}',
                    {"type": "message", "id": "a"}),
    "unfinished number": (lambda n: '{"type": "message", "n": 1' + "e" * n,
                          {"type": "message"}),
    "millions of members": (lambda n: "{" + '"k": 1, ' * (n // 8)
                            + '"id": "a", "type": "message"}', {}),
    "space": (lambda n: "{" + " " * n + '"id": "a", "type": "message"}',
              {"id": "a", "type": "message"}),
    "huge key": (lambda n: '{"' + "k" * n + '": 1, "id": "a"}', {"id": "a"}),
}


@pytest.mark.parametrize("shape", HOSTILE)
def test_string_members_reads_sixteen_mebibytes_of_hostile_json_once(shape: str) -> None:
    """Each as large as the transport lets a frame be. Read again from every quote,
    bracket or member, any of them would run for hours and fail the test's timeout."""
    build, found = HOSTILE[shape]
    assert string_members(build(16 * 1024 * 1024), NAMES) == found


def test_an_unclosed_string_is_read_once_not_from_every_quote() -> None:
    """A string left open runs to the end, brackets and all, as the decoder reads it.
    Scanned again from each escaped quote, a megabyte took hours on the event loop;
    read once, it is refused as the broken JSON it is, within the test's timeout."""
    for size in (10, 500_000):  # 1 MB, the most a REST body may be (aiohttp's limit)
        data = '{"text": "' + '\\"' * size + "[" * (MAX_JSON_DEPTH + 1)
        with pytest.raises(InputRefused, match="Unterminated string"):
            load_json(data)
    with pytest.raises(InputRefused, match="more than 32 deep"):
        load_json('["a\\"b", ' + "[" * 33 + "]" * 34)  # an escaped quote closes nothing


async def test_brackets_and_digits_inside_text_are_only_text(
        gw: Gateway, http: aiohttp.ClientSession) -> None:
    tab = await open_tab(http, web_base(gw))
    text = 'see [[[[' + "[" * 100 + ' "quoted \\" {{{' + "9" * 200
    await tab.ws.send_str(json.dumps({"type": "message", "text": text}))
    frame = await tab.frame()
    assert (frame["type"], frame["kind"]) == ("message", "reply")
    lines = await gw.store.messages(tab.ready["session_id"])
    assert [line.text for line in lines if line.role == "user"] == [text]


async def test_a_conversation_id_with_a_trailing_newline_is_refused_everywhere(
        gw: Gateway, http: aiohttp.ClientSession) -> None:
    base = web_base(gw)
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await http.ws_connect(f"{base}/ws?conversation=abc%0A")
    assert refused.value.status == 400
    for request in (http.get(f"{base}/api/conversations/abc%0A/messages"),
                    http.patch(f"{base}/api/conversations/abc%0A", json={"title": "x"})):
        async with request as r:
            assert r.status == 400
            assert "conversation ids are 1-64" in (await r.json())["error"]
    assert await gw.store.list_sessions("include") == []


@pytest.mark.parametrize(("command", "problem"), [
    ("/every 99999999999d echo x",
     "the interval '99999999999d' is out of range: at most 36500d (100 years)"),
    ("/at +99999999999999d echo x", "is out of range: at most 36500d (100 years)"),
    (f"/at +{LONG_NUMBER}d echo x", "is out of range: at most 36500d"),
    ("/at 9999-12-31 23:59 echo x", "is out of range: at most 36500d (100 years) ahead"),
])
async def test_a_schedule_out_of_range_is_answered_with_the_limit(
        gw: Gateway, http: aiohttp.ClientSession, command: str, problem: str) -> None:
    tab = await open_tab(http, web_base(gw))
    await tab.say(command)
    answer = await tab.frame()
    assert problem in answer["text"] and "could not be handled" not in answer["text"]
    assert await gw.scheduler.list() == []


# -- a message that cannot be stored, through a chat platform ---------------------------

@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def telegram(tmp_path: Path, fake: FakeTelegram) -> AsyncIterator[Gateway]:
    config = make_config(
        tmp_path / "home", platforms__telegram__enabled=True,
        platforms__telegram__token=fake.token, platforms__telegram__base_url=fake.base_url,
        platforms__telegram__base_file_url=fake.base_file_url,
        platforms__telegram__allowed_users=[str(ALICE)])
    async with running_gateway(config) as gateway:
        adapter = gateway.runner.adapters["telegram"].inner  # the platform's own, behind the fence
        assert isinstance(adapter, TelegramAdapter)
        await adapter.wait_connected()
        yield gateway


async def test_a_lone_surrogate_is_answered_with_what_is_wrong_and_the_chat_goes_on(
        telegram: Gateway, fake: FakeTelegram) -> None:
    fake.user_message(chat_id=ALICE, text="deploy \ud800 now")
    (refusal,) = await fake.wait_for_sent(1)
    assert refusal.text == (
        "That message was not taken: its text holds a lone surrogate, which is not valid "
        "Unicode (U+D800, character 8). Send it without that character.")
    # acknowledged, not handed out again and again: the next message is answered
    fake.user_message(chat_id=ALICE, text="deploy now")
    _, reply = await fake.wait_for_sent(2)
    assert reply.text.startswith("Received: deploy now")
    await eventually(lambda: not fake.pending_updates, what="every update acknowledged")
    await settled(telegram)
    assert len(fake.sent) == 2
    (session,) = await telegram.store.list_sessions("include")
    assert [line.text for line in await telegram.store.messages(session.id)
            if line.role == "user"] == ["deploy now"]



async def test_a_lone_surrogate_in_a_senders_name_is_kept_replaced_and_the_message_answered(
        telegram: Gateway, fake: FakeTelegram) -> None:
    """A name is only shown: refusing the message for it would silence a person for
    their name (and, unstored, the platform would hand it out again and again)."""
    fake.user_message(chat_id=ALICE, text="deploy now", first_name="Al\ud800ice",
                      username="ali\udfffce")
    (reply,) = await fake.wait_for_sent(1)
    assert reply.text.startswith("Received: deploy now")
    await eventually(lambda: not fake.pending_updates, what="the update acknowledged")
    await settled(telegram)
    (session,) = await telegram.store.list_sessions("include")
    stored = await telegram.store.get(session.id)  # as read back from the database
    assert stored is not None
    assert (stored.route.chat_name, stored.route.user_name) == ("Al\ufffdice", "ali\ufffdce")
    assert [line.text for line in await telegram.store.messages(session.id)
            if line.role == "user"] == ["deploy now"]


def test_a_routes_names_keep_a_replacement_for_what_cannot_be_stored() -> None:
    route = Route("telegram", "group", "-100", user_id="7", user_name="a\x00b\ud800",
                  chat_name="\udc00team")
    assert (route.user_name, route.chat_name) == ("a\ufffdb\ufffd", "\ufffdteam")
    assert Route.from_dict(route.to_dict()) == route
    kept = Route("telegram", "dm", "7", user_name="Zoë 👩‍🚀", chat_name="Zoë")
    assert (kept.user_name, kept.chat_name) == ("Zoë 👩‍🚀", "Zoë")


async def test_an_approval_tapped_by_a_name_with_a_lone_surrogate_is_decided_under_it(
        tmp_path: Path, model: FakeOpenAI) -> None:
    """Telegram names who decided by the first name when there is no username: one
    the store cannot hold is kept replaced, and the tap still decides."""
    marker = tmp_path / "marker"
    async with telegram_gateway(tmp_path, model, marker) as (_, server):
        server.user_message(text="clean up", **TOPIC)
        request, approval_id = await asked(server)
        query = server.press(FORUM, request.message_id, button_data(approval_id, "once"),
                             user_id=ALICE, username=None, first_name="Al\ud800ice")
        answer = await answer_to(server, query)
        assert answer.text == "Approved once by Al\ufffdice (run in the turn)."
        await replies(server)
        assert runs(marker) == 1
