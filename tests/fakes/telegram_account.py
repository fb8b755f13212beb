"""The fake Telegram's view of the bot's account: its profile and settings (getMe and
privacy mode), and the groups it is in with its standing there (getChat,
getChatMember). (Its webhook is ``telegram_webhook``'s.)

Kept apart from the server because these describe the bot rather than its messages,
and ``homing doctor`` and ``homing setup`` are what read them::

    fake.can_read_all_group_messages = True     # privacy mode off (@BotFather /setprivacy)
    fake.add_chat(-1001, is_forum=True, bot_status="restricted", can_send_messages=False)

As on Telegram: a new bot has privacy mode on; getChat of a chat the bot is not in is
400 "chat not found" (403 once it was kicked); getChatMember answers for the bot only
(the fake keeps no member lists: anyone else is 400 "user not found").
"""

from __future__ import annotations

from typing import Any

from tests.fakes.telegram_api import ApiError, as_int

__all__ = ["CHAT_NOT_FOUND", "BotAccount"]

JSON = dict[str, Any]

CHAT_NOT_FOUND = "Bad Request: chat not found"
#: what an administrator may do, as getChatMember lists it (a fresh admin's defaults)
_ADMIN_RIGHTS: JSON = {
    "can_be_edited": False, "is_anonymous": False, "can_manage_chat": True,
    "can_delete_messages": True, "can_manage_video_chats": True,
    "can_restrict_members": True, "can_promote_members": False, "can_change_info": True,
    "can_invite_users": True, "can_post_stories": False, "can_edit_stories": False,
    "can_delete_stories": False, "can_pin_messages": True, "can_manage_topics": False}
#: what a restricted member may still do (here: everything until a test says otherwise)
_RESTRICTED_RIGHTS: JSON = {
    "is_member": True, "can_send_messages": True, "can_send_audios": True,
    "can_send_documents": True, "can_send_photos": True, "can_send_videos": True,
    "can_send_video_notes": True, "can_send_voice_notes": True, "can_send_polls": True,
    "can_send_other_messages": True, "can_add_web_page_previews": True,
    "can_change_info": False, "can_invite_users": True, "can_pin_messages": False,
    "can_manage_topics": False, "can_edit_tag": False, "can_react_to_messages": True,
    "until_date": 0}
_STATUSES = frozenset({"creator", "administrator", "member", "restricted", "left", "kicked"})


class BotAccount:
    """The account half of :class:`~tests.fakes.telegram_server.FakeTelegram`; reads the
    chats it saw in users' messages (``_chats``)."""

    bot_user: JSON
    _chats: dict[int, JSON]

    def _init_account(self) -> None:
        #: privacy mode off when True; a new bot has it on (@BotFather /setprivacy)
        self.can_read_all_group_messages = False
        self.can_join_groups = True
        self._memberships: dict[int, JSON] = {}  # chat id -> the bot's ChatMember there

    def add_chat(self, chat_id: int, *, chat_type: str = "supergroup",
                 title: str | None = None, is_forum: bool = False,
                 bot_status: str = "member", **rights: Any) -> JSON:
        """A group the bot was added to, and the bot's standing there (``rights``:
        ChatMember fields such as ``can_send_messages`` or ``can_manage_topics``)."""
        chat: JSON = {"id": chat_id, "type": chat_type, "title": title or f"Group {chat_id}"}
        if is_forum:
            chat["is_forum"] = True
        self._chats[chat_id] = chat
        self.set_bot_member(chat_id, bot_status, **rights)
        return chat

    def set_bot_member(self, chat_id: int, status: str, **rights: Any) -> None:
        """The bot's ChatMember in that chat: creator, administrator (the usual rights
        unless given), member, restricted (allowed everything unless given), left or
        kicked."""
        if status not in _STATUSES:
            raise ValueError(f"unknown chat member status {status!r}")
        member: JSON = {"status": status, "user": dict(self.bot_user)}
        if status == "administrator":
            member |= _ADMIN_RIGHTS
        elif status == "restricted":
            member |= _RESTRICTED_RIGHTS
        elif status == "kicked":
            member["until_date"] = 0
        elif status == "creator":
            member["is_anonymous"] = False
        unknown = set(rights) - set(member) - set(_ADMIN_RIGHTS) - set(_RESTRICTED_RIGHTS)
        if unknown:
            raise ValueError(f"not a ChatMember field: {sorted(unknown)}")
        self._memberships[chat_id] = member | rights

    # ------------------------------------------------------------------ methods

    async def _get_me(self, params: dict[str, Any]) -> JSON:
        return {**self.bot_user, "can_join_groups": self.can_join_groups,
                "can_read_all_group_messages": self.can_read_all_group_messages,
                "supports_inline_queries": False}

    async def _get_chat(self, params: dict[str, Any]) -> JSON:
        chat_id = _chat_id(params)
        chat = self._chats.get(chat_id)
        member = self._memberships.get(chat_id)
        if chat is None or (member is not None and member["status"] == "left"):
            raise ApiError(400, CHAT_NOT_FOUND)
        if member is not None and member["status"] == "kicked":
            raise ApiError(403, f"Forbidden: bot was kicked from the {chat['type']} chat")
        return {**chat, "accent_color_id": 0, "max_reaction_count": 11,
                "accepted_gift_types": {"unlimited_gifts": False, "limited_gifts": False,
                                        "unique_gifts": False, "premium_subscription": False,
                                        "gifts_from_channels": False}}

    async def _get_chat_member(self, params: dict[str, Any]) -> JSON:
        chat_id = _chat_id(params)
        user_id = as_int(params.get("user_id"))
        if chat_id not in self._chats:
            raise ApiError(400, CHAT_NOT_FOUND)
        if user_id != self.bot_user["id"]:
            raise ApiError(400, "Bad Request: user not found")  # no member lists kept
        # a chat seen only in a user's message: the bot is an ordinary member there
        return dict(self._memberships.get(chat_id)
                    or {"status": "member", "user": dict(self.bot_user)})


def _chat_id(params: dict[str, Any]) -> int:
    try:
        return int(params.get("chat_id", ""))
    except (TypeError, ValueError):
        raise ApiError(400, CHAT_NOT_FOUND) from None
