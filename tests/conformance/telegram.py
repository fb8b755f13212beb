"""Telegram's harness: the real python-telegram-bot against the fake Bot API.

Places: topics 42 and 17 of one forum supergroup, and the person's private chat. A
preview is the bot's message edited as the reply grows; a button press is a
``callback_query``; the cursor is ``getUpdates``' offset.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, ClassVar

from gateway.contract.approval import button_data
from gateway.daemon.assembly import Gateway
from gateway.platforms.preview import WRITING
from tests.conformance.harness import (
        GatewayHarness,
    Place,
    Places,
    Promise,
    Shown,
    approval_id_in,
)
from tests.fakes.telegram_entities import render
from tests.fakes.telegram_server import FakeTelegram
from tests.helpers import eventually

FORUM = -1001
PERSON = 1
_TOPIC = dict(chat_type="supergroup", is_forum=True, is_topic_message=True)


class TelegramHarness(GatewayHarness):
    name = "telegram"
    does_not_apply: ClassVar[dict[Promise, str]] = {}

    def __init__(self) -> None:
        super().__init__()
        self._fake: FakeTelegram | None = None

    @property
    def fake(self) -> FakeTelegram:
        assert self._fake is not None, "the fake Bot API is not serving"
        return self._fake

    # -------------------------------------------------------------- lifecycle

    def serving(self) -> AbstractAsyncContextManager[object]:
        return self._serving()

    @asynccontextmanager
    async def _serving(self) -> AsyncIterator[FakeTelegram]:
        async with FakeTelegram() as fake:
            self._fake = fake
            yield fake

    def platform_section(self) -> dict[str, Any]:
        fake = self.fake
        return {"token": fake.token, "base_url": fake.base_url,
                "base_file_url": fake.base_file_url, "allowed_users": [str(PERSON)],
                # no flood control of the gateway's own: the fake's answers decide
                "messages_per_second": 1000, "group_messages_per_minute": 1000,
                "stream_edit_interval_seconds": 0.2}

    async def connected(self, gw: Gateway) -> None:
        await gw.runner.adapters["telegram"].wait_connected()

    def quiet(self) -> bool:
        return not self.fake.pending_updates  # every update acknowledged

    # -------------------------------------------------------------- places

    def places(self) -> Places:
        return Places(Place("topic-42", (FORUM, 42)), Place("topic-17", (FORUM, 17)),
                      Place("dm", (PERSON, None)))

    @staticmethod
    def _options(place: Place) -> dict[str, Any]:
        chat, thread = place.where
        if thread is None:
            return dict(chat_id=chat)
        return dict(chat_id=chat, thread_id=thread, **_TOPIC)

    # -------------------------------------------------------------- the person

    async def say(self, place: Place, text: str) -> None:
        self.fake.user_message(text=text, user_id=PERSON, **self._options(place))

    async def send_file(self, place: Place, name: str, data: bytes,
                        caption: str | None = None) -> None:
        self.fake.user_document(data=data, file_name=name, caption=caption, user_id=PERSON,
                                **self._options(place))

    async def press(self, place: Place, approval_id: str, choice: str) -> None:
        chat, _ = place.where
        (request,) = [s for s in self.fake.sent if approval_id_in(s.text) == approval_id]
        query = self.fake.press(chat, request.message_id, button_data(approval_id, choice),  # type: ignore[arg-type]
                                user_id=PERSON)
        await eventually(lambda: [a for a in self.fake.callback_answers if a.id == query],
                         what=f"the answer to the press on {approval_id}")

    # -------------------------------------------------------------- what is seen

    def bot_texts(self, place: Place) -> list[str]:
        chat, thread = place.where
        return self.fake.visible(chat, thread)

    def previews(self, place: Place) -> list[str]:
        chat, thread = place.where
        shown = [s.text for s in self.fake.sent
                 if (s.chat_id, s.message_thread_id) == (chat, thread)]
        shown += [e.text for e in self.fake.edits
                  if (e.chat_id, e.message_thread_id) == (chat, thread)]
        return [_without_mark(render(t, "HTML").text) for t in shown if t.endswith(WRITING)]

    def files_posted(self, place: Place) -> list[tuple[str, bytes]]:
        chat, thread = place.where
        return [(f.filename or "", f.data) for f in self.fake.sent_files
                if (f.chat_id, f.message_thread_id) == (chat, thread)]

    def approvals_shown(self, place: Place) -> list[Shown]:
        chat, thread = place.where
        shown = []
        for sent in self.fake.sent:
            approval_id = approval_id_in(sent.text)
            if (sent.chat_id, sent.message_thread_id) != (chat, thread) or approval_id is None:
                continue
            waiting = self.fake.message_markup(chat, sent.message_id) is not None
            text = self.fake.visible_text(chat, sent.message_id)
            shown.append(Shown(approval_id, None if waiting else text))
        return shown

    def fail_sends(self, place: Place, status: int, *, count: int = 1,
                   retry_after: float | None = None, containing: str | None = None) -> None:
        chat, _ = place.where  # Telegram's failures are scripted per chat
        description = ("Too Many Requests: retry after" if status == 429
                       else "Bad Gateway")
        self.fake.fail_next_send(
            chat_id=chat, status=status, count=count, text=containing,
            retry_after=None if retry_after is None else max(1, round(retry_after)),
            description=description)

    def confirmed(self, place: Place, text: str) -> bool:
        chat, thread = place.where
        for update in self.fake.pending_updates:
            message = update.get("message") or {}
            if (message.get("text") == text and message.get("chat", {}).get("id") == chat
                    and message.get("message_thread_id") == thread):
                return False
        return True


def _without_mark(text: str) -> str:
    return text.removesuffix(WRITING.strip()).rstrip()


HARNESS = TelegramHarness
