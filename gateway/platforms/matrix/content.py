"""The content of the events the bot sends: a message (HTML with its plain body, in
its thread), an edit of one (``m.replace``), and the transaction id each is sent with.

Every message carries an empty ``m.mentions``: the bot mentions nobody, whatever its
text says (clients and servers that know intentional mentions then ignore the body).
A transaction id is derived from the gateway's dedupe key, the part's number and the
event's type, so a send made again after a crash is the same send to the homeserver
(per device, for 24 hours), and no two kinds of event ever share one.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from gateway.formatting.matrix_html import harmless, render
from gateway.platforms.matrix.routes import thread_relation
from gateway.words.route import Route

HTML = "org.matrix.custom.html"


def message(route: Route, markdown: str, *, msgtype: str = "m.text") -> dict[str, Any]:
    """One part of a reply (Markdown that fits a message) into the route's thread."""
    content = formatted(markdown, msgtype=msgtype)
    relation = thread_relation(route)
    if relation is not None:
        content["m.relates_to"] = relation
    return content


def formatted(markdown: str, *, msgtype: str = "m.text", suffix: str = "") -> dict[str, Any]:
    return {"msgtype": msgtype, "body": harmless(markdown) + suffix, "format": HTML,
            "formatted_body": render(markdown) + suffix, "m.mentions": {}}


def plain(route: Route, text: str, *, msgtype: str = "m.notice") -> dict[str, Any]:
    content: dict[str, Any] = {"msgtype": msgtype, "body": text, "m.mentions": {}}
    relation = thread_relation(route)
    if relation is not None:
        content["m.relates_to"] = relation
    return content


def edit(event_id: str, new: dict[str, Any]) -> dict[str, Any]:
    """An edit of ``event_id`` into ``new`` (a message's content, without relations)."""
    new = {k: v for k, v in new.items() if k != "m.relates_to"}
    return {"msgtype": new.get("msgtype", "m.text"), "body": f"* {new.get('body', '')}",
            "m.new_content": new, "m.mentions": {},
            "m.relates_to": {"rel_type": "m.replace", "event_id": event_id}}


#: the "event type" a final edit's transaction id is made with: an edit is an
#: ``m.room.message`` too, and must never share an id with the message it stands for
#: (a reply sent whole when its preview could not be edited)
FINAL_EDIT = "m.replace"


def txn_id(dedupe_key: str | None, part: int, event_type: str) -> str:
    """The transaction id of part ``part`` of a send; random without a dedupe key."""
    if dedupe_key is None:
        return f"homing.{uuid.uuid4().hex}"
    digest = hashlib.sha256(f"{dedupe_key}\x00{part}\x00{event_type}".encode()).hexdigest()
    return f"homing.{digest[:40]}"
