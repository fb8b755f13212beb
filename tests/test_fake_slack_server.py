"""The fake Slack Web API and Socket Mode against the real slack-sdk clients."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.async_client import AsyncBaseSocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.slack_files import SIGN_IN_PAGE
from tests.fakes.slack_server import APP_TOKEN, BOT_TOKEN, FakeSlack

GENERAL = "C0GENERAL"
DM = "D0DM"


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as server:
        yield server


@pytest.fixture
def web(fake: FakeSlack) -> AsyncWebClient:
    return AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_base)


class Listener:
    """What a Socket Mode app received; it acks each envelope unless told not to."""

    def __init__(self, *, ack: bool = True) -> None:
        self.ack = ack
        self.requests: list[SocketModeRequest] = []
        self.changed = asyncio.Event()

    async def __call__(self, client: AsyncBaseSocketModeClient,
                       request: SocketModeRequest) -> None:
        self.requests.append(request)
        self.changed.set()
        if self.ack:
            await client.send_socket_mode_response(
                SocketModeResponse(envelope_id=request.envelope_id))

    async def wait_for(self, count: int, timeout: float = 30) -> list[SocketModeRequest]:
        async with asyncio.timeout(timeout):
            while len(self.requests) < count:
                self.changed.clear()
                await self.changed.wait()
        return list(self.requests)

    def events(self) -> list[dict[str, Any]]:
        return [r.payload["event"] for r in self.requests if r.type == "events_api"]


@asynccontextmanager
async def socket_mode(fake: FakeSlack, listener: Listener) -> AsyncIterator[SocketModeClient]:
    client = SocketModeClient(app_token=APP_TOKEN,
                              web_client=AsyncWebClient(base_url=fake.api_base))
    client.socket_mode_request_listeners.append(listener)
    try:
        await client.connect()  # type: ignore[no-untyped-call]
        await fake.wait_connected()
        yield client
    finally:
        await client.close()  # type: ignore[no-untyped-call]


# ---------------------------------------------------------------------- the Web API


async def test_auth_test_names_the_bot_and_its_scopes(fake: FakeSlack,
                                                      web: AsyncWebClient) -> None:
    answer = await web.auth_test()
    assert (answer["team_id"], answer["user_id"], answer["bot_id"]) == ("T0TEAM", "U0BOT",
                                                                         "B0BOT")
    assert answer.headers["x-oauth-scopes"].split(",") == list(fake.scopes)


async def test_a_wrong_or_missing_token_is_refused(fake: FakeSlack) -> None:
    with pytest.raises(SlackApiError) as wrong:
        await AsyncWebClient(token="xoxb-0-0-wrong", base_url=fake.api_base).auth_test()
    assert wrong.value.response["error"] == "invalid_auth"
    with pytest.raises(SlackApiError) as missing:
        await AsyncWebClient(base_url=fake.api_base).auth_test()
    assert missing.value.response["error"] == "not_authed"


async def test_each_token_works_only_where_it_belongs(fake: FakeSlack,
                                                      web: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as bot_on_socket:
        await web.apps_connections_open(app_token=BOT_TOKEN)
    assert bot_on_socket.value.response["error"] == "not_allowed_token_type"
    app = AsyncWebClient(token=APP_TOKEN, base_url=fake.api_base)
    with pytest.raises(SlackApiError) as app_on_web_api:
        await app.chat_postMessage(channel=GENERAL, text="hi")
    assert app_on_web_api.value.response["error"] == "not_allowed_token_type"
    assert fake.posts == []


async def test_a_method_without_its_scope_says_what_it_needs() -> None:
    async with FakeSlack(scopes=("channels:history",)) as fake:
        web = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_base)
        with pytest.raises(SlackApiError) as refused:
            await web.chat_postMessage(channel=GENERAL, text="hi")
        assert refused.value.response["error"] == "missing_scope"
        assert refused.value.response["needed"] == "chat:write"
        assert refused.value.response["provided"] == "channels:history"
        with pytest.raises(SlackApiError) as dm_history:
            await web.conversations_history(channel=DM)
        assert dm_history.value.response["needed"] == "im:history"


async def test_an_unknown_method_is_unknown(web: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as refused:
        await web.api_call("chat.teleport", json={"channel": GENERAL})
    assert refused.value.response["error"] == "unknown_method"


async def test_a_post_lands_in_the_channel_with_a_fresh_ts(fake: FakeSlack,
                                                           web: AsyncWebClient) -> None:
    first = await web.chat_postMessage(channel=GENERAL, text="one")
    second = await web.chat_postMessage(channel=GENERAL, text="two")
    assert float(second["ts"]) > float(first["ts"])
    assert first["message"]["bot_id"] == "B0BOT"
    assert [m.text for m in fake.messages(GENERAL)] == ["one", "two"]
    assert [c.params["text"] for c in await fake.wait_for_posts(2)] == ["one", "two"]


async def test_form_bodies_carry_blocks_as_json_text(fake: FakeSlack,
                                                     web: AsyncWebClient) -> None:
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*hi*"}}]
    await web.api_call("chat.postMessage",
                       data={"channel": GENERAL, "text": "hi", "blocks": json.dumps(blocks)})
    [message] = fake.messages(GENERAL)
    assert message.blocks is not None and message.blocks[0]["text"]["text"] == "*hi*"


async def test_posting_where_the_bot_is_not_is_refused(fake: FakeSlack,
                                                       web: AsyncWebClient) -> None:
    fake.add_channel("C0OTHER", member=False)
    with pytest.raises(SlackApiError) as outside:
        await web.chat_postMessage(channel="C0OTHER", text="hi")
    assert outside.value.response["error"] == "not_in_channel"
    with pytest.raises(SlackApiError) as nowhere:
        await web.chat_postMessage(channel="C0NOWHERE", text="hi")
    assert nowhere.value.response["error"] == "channel_not_found"


async def test_a_post_to_a_user_lands_in_their_dm(fake: FakeSlack,
                                                  web: AsyncWebClient) -> None:
    posted = await web.chat_postMessage(channel="U0123ABCD", text="psst")
    assert posted["channel"] == DM
    assert [m.text for m in fake.messages(DM)] == ["psst"]


async def test_reading_where_the_bot_is_not_is_refused(fake: FakeSlack,
                                                       web: AsyncWebClient) -> None:
    fake.add_channel("C0OTHER", member=False)
    fake.user_message(channel="C0OTHER", text="behind your back")
    with pytest.raises(SlackApiError) as outside:
        await web.conversations_history(channel="C0OTHER")
    assert outside.value.response["error"] == "not_in_channel"


async def test_an_empty_or_overlong_post_is_refused(fake: FakeSlack,
                                                    web: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as empty:
        await web.api_call("chat.postMessage", json={"channel": GENERAL})
    assert empty.value.response["error"] == "no_text"
    with pytest.raises(SlackApiError) as long:
        await web.chat_postMessage(channel=GENERAL, text="x" * 40_001)
    assert long.value.response["error"] == "msg_too_long"
    assert fake.messages(GENERAL) == []


@pytest.mark.parametrize("blocks", [
    [{"type": "sektion", "text": {"type": "mrkdwn", "text": "hi"}}],
    [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3001}}],
    [{"type": "divider"}] * 51,
    [{"type": "actions", "elements": [
        {"type": "button", "text": {"type": "plain_text", "text": f"b{i}"}, "action_id": f"a{i}"}
        for i in range(26)]}],
    [{"type": "actions", "elements": [
        {"type": "button", "text": {"type": "plain_text", "text": "x" * 76}, "action_id": "a"}]}],
    [{"type": "section"}],
])
async def test_blocks_slack_would_refuse_are_invalid_blocks(
        fake: FakeSlack, web: AsyncWebClient, blocks: list[dict[str, object]]) -> None:
    with pytest.raises(SlackApiError) as refused:
        await web.chat_postMessage(channel=GENERAL, text="fallback", blocks=blocks)
    assert refused.value.response["error"] == "invalid_blocks"
    assert refused.value.response["errors"]
    assert fake.messages(GENERAL) == []


async def test_a_reply_to_an_unknown_thread_is_refused(web: AsyncWebClient) -> None:
    with pytest.raises(SlackApiError) as refused:
        await web.chat_postMessage(channel=GENERAL, text="hi", thread_ts="1600000000.000100")
    assert refused.value.response["error"] == "invalid_thread_ts"


async def test_replies_stay_in_their_thread(fake: FakeSlack, web: AsyncWebClient) -> None:
    parent = fake.user_message(channel=GENERAL, text="question")
    await web.chat_postMessage(channel=GENERAL, text="answer", thread_ts=parent)
    assert fake.messages(GENERAL) == []
    assert [m.text for m in fake.messages(GENERAL, thread_ts=parent)] == ["answer"]


async def test_edits_and_deletes_change_what_people_see(fake: FakeSlack,
                                                        web: AsyncWebClient) -> None:
    posted = await web.chat_postMessage(channel=GENERAL, text="draft")
    await web.chat_update(channel=GENERAL, ts=posted["ts"], text="final")
    [message] = fake.messages(GENERAL)
    assert (message.text, message.edits) == ("final", ["draft"])
    await web.chat_delete(channel=GENERAL, ts=posted["ts"])
    assert fake.messages(GENERAL) == []
    assert len(fake.updates) == len(fake.deletes) == 1
    with pytest.raises(SlackApiError) as gone:
        await web.chat_update(channel=GENERAL, ts=posted["ts"], text="again")
    assert gone.value.response["error"] == "message_not_found"


async def test_a_persons_message_is_not_the_bots_to_edit(fake: FakeSlack,
                                                         web: AsyncWebClient) -> None:
    theirs = fake.user_message(channel=GENERAL, text="mine")
    with pytest.raises(SlackApiError) as refused:
        await web.chat_update(channel=GENERAL, ts=theirs, text="yours")
    assert refused.value.response["error"] == "cant_update_message"


async def test_edits_and_deletes_come_back_as_message_subtypes(
        fake: FakeSlack, web: AsyncWebClient) -> None:
    listener = Listener()
    async with socket_mode(fake, listener):
        posted = await web.chat_postMessage(channel=GENERAL, text="draft")
        await web.chat_update(channel=GENERAL, ts=posted["ts"], text="final")
        await web.chat_delete(channel=GENERAL, ts=posted["ts"])
        await listener.wait_for(3)
    changed, deleted = listener.events()[1:]
    assert (changed["subtype"], changed["message"]["text"]) == ("message_changed", "final")
    assert (deleted["subtype"], deleted["deleted_ts"]) == ("message_deleted", posted["ts"])


async def test_a_rate_limit_says_when_to_come_back(fake: FakeSlack,
                                                   web: AsyncWebClient) -> None:
    fake.fail_next("chat.postMessage", retry_after=1.2)
    with pytest.raises(SlackApiError) as limited:
        await web.chat_postMessage(channel=GENERAL, text="hi")
    assert limited.value.response.status_code == 429
    assert limited.value.response["error"] == "ratelimited"
    assert limited.value.response.headers["Retry-After"] == "2"
    await web.chat_postMessage(channel=GENERAL, text="hi")  # only the next one failed
    assert len(fake.posts) == 1


async def test_a_scripted_failure_can_aim_at_one_channel(fake: FakeSlack,
                                                         web: AsyncWebClient) -> None:
    fake.fail_next("chat.postMessage", status=500, error="internal_error", channel=DM)
    await web.chat_postMessage(channel=GENERAL, text="fine")
    with pytest.raises(SlackApiError) as failed:
        await web.chat_postMessage(channel=DM, text="not fine")
    assert failed.value.response.status_code == 500


async def test_history_is_newest_first_and_pages_with_cursors(fake: FakeSlack,
                                                              web: AsyncWebClient) -> None:
    sent = [fake.user_message(channel=GENERAL, text=f"m{i}") for i in range(12)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await web.conversations_history(channel=GENERAL, limit=100, cursor=cursor)
        pages += 1
        seen.extend(m["ts"] for m in page["messages"])
        if not page["has_more"]:
            break
        cursor = page["response_metadata"]["next_cursor"]
    assert seen == list(reversed(sent))
    assert pages > 1
    with pytest.raises(SlackApiError) as bad:
        await web.conversations_history(channel=GENERAL, cursor="bm9wZQ==")
    assert bad.value.response["error"] == "invalid_cursor"


async def test_history_respects_oldest_and_latest(fake: FakeSlack,
                                                  web: AsyncWebClient) -> None:
    sent = [fake.user_message(channel=GENERAL, text=f"m{i}") for i in range(4)]
    page = await web.conversations_history(channel=GENERAL, oldest=sent[0], latest=sent[3])
    assert [m["ts"] for m in page["messages"]] == [sent[2], sent[1]]
    page = await web.conversations_history(channel=GENERAL, oldest=sent[0], latest=sent[3],
                                           inclusive=True)
    assert len(page["messages"]) == 4


async def test_replies_are_oldest_first_after_their_parent(fake: FakeSlack,
                                                           web: AsyncWebClient) -> None:
    parent = fake.user_message(channel=GENERAL, text="q")
    replies = [fake.user_message(channel=GENERAL, text=f"r{i}", thread_ts=parent)
               for i in range(7)]
    history = await web.conversations_history(channel=GENERAL)
    assert [m["ts"] for m in history["messages"]] == [parent]  # replies stay in the thread
    assert history["messages"][0]["reply_count"] == 7
    seen: list[str] = []
    cursor = None
    while True:
        page = await web.conversations_replies(channel=GENERAL, ts=parent, cursor=cursor)
        assert page["messages"][0]["ts"] == parent
        seen.extend(m["ts"] for m in page["messages"][1:])
        if not page["has_more"]:
            break
        cursor = page["response_metadata"]["next_cursor"]
    assert seen == replies
    with pytest.raises(SlackApiError) as missing:
        await web.conversations_replies(channel=GENERAL, ts="1600000000.000100")
    assert missing.value.response["error"] == "thread_not_found"


async def test_conversations_info_and_users_info(web: AsyncWebClient) -> None:
    channel = (await web.conversations_info(channel=GENERAL))["channel"]
    assert (channel["name"], channel["is_member"]) == ("general", True)
    user = (await web.users_info(user="U0123ABCD"))["user"]
    assert user["name"] == "alice"
    with pytest.raises(SlackApiError) as nobody:
        await web.users_info(user="U0NOBODY")
    assert nobody.value.response["error"] == "user_not_found"


async def test_assistant_status_needs_the_assistant_feature(fake: FakeSlack,
                                                            web: AsyncWebClient) -> None:
    parent = fake.user_message(channel=DM, text="hi")
    with pytest.raises(SlackApiError) as refused:
        await web.assistant_threads_setStatus(channel_id=DM, thread_ts=parent,
                                              status="is thinking...")
    assert refused.value.response["error"] == "no_permission"
    async with FakeSlack(assistant=True) as assistant:
        client = AsyncWebClient(token=BOT_TOKEN, base_url=assistant.api_base)
        parent = assistant.user_message(channel=DM, text="hi")
        await client.assistant_threads_setStatus(channel_id=DM, thread_ts=parent,
                                                 status="is thinking...")
        assert [c.params["status"] for c in assistant.statuses] == ["is thinking..."]


# ---------------------------------------------------------------------- files


async def test_files_upload_v2_shares_the_file_in_the_thread(fake: FakeSlack,
                                                             web: AsyncWebClient) -> None:
    parent = fake.user_message(channel=GENERAL, text="send me the log")
    await web.files_upload_v2(channel=GENERAL, thread_ts=parent, content=b"line 1\nline 2\n",
                              filename="run.log", title="The log",
                              initial_comment="here it is")
    [upload] = await fake.wait_for_uploads(1)
    assert (upload.channel, upload.thread_ts, upload.filename, upload.title,
            upload.content, upload.initial_comment) == (
        GENERAL, parent, "run.log", "The log", b"line 1\nline 2\n", "here it is")
    [shared] = fake.messages(GENERAL, thread_ts=parent)
    assert shared.text == "here it is" and shared.files[0]["name"] == "run.log"


async def test_upload_steps_by_hand_check_the_length(fake: FakeSlack,
                                                     web: AsyncWebClient) -> None:
    ticket = await web.files_getUploadURLExternal(filename="a.txt", length=5)
    async with aiohttp.ClientSession() as session:
        async with session.post(ticket["upload_url"], data=b"too long") as refused:
            assert refused.status == 400
        with pytest.raises(SlackApiError) as not_uploaded:
            await web.files_completeUploadExternal(files=[{"id": ticket["file_id"]}],
                                                   channel_id=GENERAL)
        assert not_uploaded.value.response["error"] == "file_not_found"
        async with session.post(ticket["upload_url"], data=b"12345") as accepted:
            assert accepted.status == 200
    await web.files_completeUploadExternal(files=[{"id": ticket["file_id"], "title": "A"}],
                                           channel_id=GENERAL)
    assert [u.content for u in fake.uploads] == [b"12345"]


async def test_uploading_needs_files_write() -> None:
    async with FakeSlack(scopes=("chat:write",)) as fake:
        web = AsyncWebClient(token=BOT_TOKEN, base_url=fake.api_base)
        with pytest.raises(SlackApiError) as refused:
            await web.files_upload_v2(channel=GENERAL, content=b"x", filename="x.txt")
        assert refused.value.response["needed"] == "files:write"


async def test_a_persons_file_downloads_only_with_the_bot_token(fake: FakeSlack) -> None:
    shared = fake.add_file(name="notes.txt", content=b"secret notes")
    fake.user_message(channel=GENERAL, text="look", files=[shared])
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"Bearer {BOT_TOKEN}"}
        async with session.get(shared["url_private"], headers=headers) as authorised:
            assert await authorised.read() == b"secret notes"
        async with session.get(shared["url_private_download"], headers=headers) as download:
            assert await download.read() == b"secret notes"
        async with session.get(shared["url_private"]) as anonymous:
            assert anonymous.status == 200
            assert anonymous.content_type == "text/html"
            assert await anonymous.text() == SIGN_IN_PAGE


# ---------------------------------------------------------------------- Socket Mode


async def test_a_message_arrives_as_an_events_api_envelope(fake: FakeSlack) -> None:
    listener = Listener()
    async with socket_mode(fake, listener):
        ts = fake.user_message(channel=GENERAL, text="hello bot")
        [request] = await listener.wait_for(1)
        await fake.wait_acked(request.envelope_id)
    assert request.type == "events_api"
    assert request.payload["type"] == "event_callback"
    assert request.payload["event_id"].startswith("Ev")
    event = request.payload["event"]
    assert (event["type"], event["text"], event["ts"], event["channel_type"]) == (
        "message", "hello bot", ts, "channel")
    assert event["client_msg_id"]


async def test_events_wait_for_a_connection(fake: FakeSlack) -> None:
    fake.user_message(channel=DM, text="while you were away")
    listener = Listener()
    async with socket_mode(fake, listener):
        [request] = await listener.wait_for(1)
    assert request.payload["event"]["text"] == "while you were away"
    assert request.payload["event"]["channel_type"] == "im"


async def test_the_bots_own_post_comes_back_over_the_socket(fake: FakeSlack,
                                                            web: AsyncWebClient) -> None:
    listener = Listener()
    async with socket_mode(fake, listener):
        await web.chat_postMessage(channel=GENERAL, text="from the bot")
        [request] = await listener.wait_for(1)
    event = request.payload["event"]
    assert (event["bot_id"], event["user"], event["text"]) == ("B0BOT", "U0BOT", "from the bot")


async def test_a_mention_arrives_as_message_and_app_mention(fake: FakeSlack) -> None:
    listener = Listener()
    async with socket_mode(fake, listener):
        fake.user_message(channel=GENERAL, text="<@U0BOT> help")
        requests = await listener.wait_for(2)
    assert sorted(r.payload["event"]["type"] for r in requests) == ["app_mention", "message"]
    assert requests[0].payload["event_id"] != requests[1].payload["event_id"]


async def test_an_unacked_envelope_comes_again_with_the_same_event_id(
        fake: FakeSlack) -> None:
    fake.ack_deadline = 0.2
    listener = Listener(ack=False)
    async with socket_mode(fake, listener):
        fake.user_message(channel=GENERAL, text="anyone?")
        first, again = await listener.wait_for(2)
    assert again.envelope_id != first.envelope_id
    assert again.payload["event_id"] == first.payload["event_id"]
    assert (first.retry_attempt, again.retry_attempt) == (0, 1)
    assert again.retry_reason == "timeout"


async def test_an_acked_envelope_does_not_come_again(fake: FakeSlack) -> None:
    fake.ack_deadline = 0.2
    listener = Listener()
    async with socket_mode(fake, listener):
        fake.user_message(channel=GENERAL, text="one")
        [first] = await listener.wait_for(1)
        await fake.wait_acked(first.envelope_id)
        # a later event proves the socket still delivers; the acked one is not among them
        await asyncio.sleep(fake.ack_deadline * 2)
        fake.user_message(channel=GENERAL, text="two")
        requests = await listener.wait_for(2)
    assert [r.payload["event"]["text"] for r in requests] == ["one", "two"]
    assert fake.unacked == []


async def test_a_duplicated_event_shares_its_event_id(fake: FakeSlack) -> None:
    listener = Listener()
    async with socket_mode(fake, listener):
        fake.duplicate_next_event()
        fake.user_message(channel=GENERAL, text="once")
        first, second = await listener.wait_for(2)
    assert first.envelope_id != second.envelope_id
    assert first.payload["event_id"] == second.payload["event_id"]
    assert (first.payload["event"]["client_msg_id"]
            == second.payload["event"]["client_msg_id"])
    assert (first.retry_attempt, second.retry_attempt) == (0, 1)


async def test_a_disconnect_moves_unacked_envelopes_to_the_next_connection(
        fake: FakeSlack) -> None:
    listener = Listener(ack=False)
    async with socket_mode(fake, listener):
        fake.user_message(channel=GENERAL, text="in flight")
        [first] = await listener.wait_for(1)
        fake.disconnect_socket()
        _, again = await listener.wait_for(2)
    assert fake.connections >= 2
    assert again.payload["event_id"] == first.payload["event_id"]
    assert again.retry_attempt == 1


async def test_a_button_press_arrives_as_block_actions(fake: FakeSlack,
                                                       web: AsyncWebClient) -> None:
    posted = await web.chat_postMessage(channel=GENERAL, text="approve?", blocks=[
        {"type": "section", "text": {"type": "mrkdwn", "text": "Approve the job?"}},
        {"type": "actions", "block_id": "choice", "elements": [
            {"type": "button", "text": {"type": "plain_text", "text": "Yes"},
             "action_id": "approve", "value": "job-1"}]}])
    listener = Listener()
    async with socket_mode(fake, listener):
        await listener.wait_for(1)  # the bot's own post
        envelope_id = fake.press_button(channel=GENERAL, message_ts=posted["ts"],
                                        action_id="approve", value="job-1")
        requests = await listener.wait_for(2)
        await fake.wait_acked(envelope_id)
    press = requests[1]
    assert (press.type, press.envelope_id) == ("interactive", envelope_id)
    payload = press.payload
    assert payload["type"] == "block_actions"
    assert payload["container"]["message_ts"] == posted["ts"]
    assert payload["channel"]["id"] == GENERAL
    assert payload["message"]["blocks"][1]["block_id"] == "choice"
    assert payload["actions"][0] | {"action_ts": None} == {
        "action_id": "approve", "block_id": "choice", "value": "job-1", "type": "button",
        "text": {"type": "plain_text", "text": "Yes"}, "action_ts": None}
    async with aiohttp.ClientSession() as session:
        async with session.post(payload["response_url"], json={"text": "done"}) as answer:
            assert answer.status == 200
    assert fake.responses == [{"text": "done"}]


async def test_a_socket_url_is_good_for_one_connection(fake: FakeSlack) -> None:
    app = AsyncWebClient(token=APP_TOKEN, base_url=fake.api_base)
    url = (await app.apps_connections_open(app_token=APP_TOKEN))["url"]
    async with aiohttp.ClientSession() as session:
        async with session.ws_connect(url) as ws:
            hello = await ws.receive_json()
            assert hello["type"] == "hello"
            assert hello["connection_info"]["app_id"] == "A0APP"
            assert hello["num_connections"] == 1
        with pytest.raises(aiohttp.WSServerHandshakeError):
            async with session.ws_connect(url):
                pass
