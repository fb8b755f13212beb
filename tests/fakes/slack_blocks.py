"""Block Kit as Slack checks it on chat.postMessage and chat.update.

A message's ``blocks`` must be a JSON list of at most 50 objects of a known type; each
type has its own limits (a section's text 3000 characters, a header's 150, an actions
block 25 elements, a button's label 75). What breaks a rule is ``invalid_blocks`` with
the ``errors`` and ``response_metadata.messages`` Slack sends, each naming the place
with a JSON pointer (``[json-pointer:/blocks/0/text/text]``); blocks that are not a
JSON list at all are ``invalid_blocks_format``. A block without ``block_id`` or a
button without ``action_id`` gets one, as Slack gives them. Limits from docs.slack.dev's Block Kit
reference (blocks and the button element).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

__all__ = ["BlocksError", "parse_blocks"]

JSON = dict[str, Any]

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_SECTION_FIELDS = 10
MAX_FIELD_TEXT = 2000
MAX_HEADER_TEXT = 150
MAX_ACTIONS_ELEMENTS = 25
MAX_CONTEXT_ELEMENTS = 10
MAX_BUTTON_TEXT = 75
MAX_ACTION_ID = 255
MAX_BLOCK_ID = 255
MAX_BUTTON_VALUE = 2000
MAX_MARKDOWN_TEXT = 12_000
#: the block types a message may hold
BLOCK_TYPES = frozenset({"section", "actions", "context", "divider", "header", "image",
                         "rich_text", "markdown", "file", "video", "context_actions",
                         "table"})
#: the interactive elements of an actions block or a section's accessory
INTERACTIVE = frozenset({"button", "static_select", "external_select", "users_select",
                         "conversations_select", "channels_select", "overflow",
                         "datepicker", "timepicker", "datetimepicker", "checkboxes",
                         "radio_buttons", "multi_static_select", "multi_users_select",
                         "multi_conversations_select", "multi_channels_select",
                         "multi_external_select", "workflow_button", "image"})


class BlocksError(Exception):
    """Blocks Slack refuses: ``error`` is the API error, ``errors`` what it says of each."""

    def __init__(self, error: str, errors: list[str]) -> None:
        super().__init__(f"{error}: {errors}")
        self.error = error
        self.errors = errors


def parse_blocks(raw: Any) -> list[JSON] | None:
    """The ``blocks`` parameter as checked blocks: a list (from JSON, or the JSON text
    a form body carries), None when not given. A missing button ``action_id`` is filled
    in, as Slack does."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise BlocksError("invalid_blocks_format", ["blocks is not valid JSON"]) from None
    if not isinstance(raw, list):
        raise BlocksError("invalid_blocks_format", ["blocks must be an array"])
    errors: list[str] = []
    if len(raw) > MAX_BLOCKS:
        errors.append(f"no more than {MAX_BLOCKS} items allowed [json-pointer:/blocks]")
    block_ids: set[str] = set()
    for index, block in enumerate(raw):
        errors.extend(_block_errors(block, f"/blocks/{index}", block_ids))
    if errors:
        raise BlocksError("invalid_blocks", errors)
    return raw


def _block_errors(block: Any, at: str, block_ids: set[str]) -> list[str]:
    if not isinstance(block, dict):
        return [f"must be an object [json-pointer:{at}]"]
    kind = block.get("type")
    if kind not in BLOCK_TYPES:
        return [f"unsupported type: {kind} [json-pointer:{at}/type]"]
    errors: list[str] = []
    # Slack names every block that comes without a name
    block_id = block.setdefault("block_id", uuid.uuid4().hex[:5])
    if block_id is not None:
        if not isinstance(block_id, str) or not 0 < len(block_id) <= MAX_BLOCK_ID:
            errors.append(f"must be a string of 1 to {MAX_BLOCK_ID} characters "
                          f"[json-pointer:{at}/block_id]")
        elif block_id in block_ids:
            errors.append(f"duplicate block_id [json-pointer:{at}/block_id]")
        else:
            block_ids.add(block_id)
    if kind == "section":
        errors.extend(_section_errors(block, at))
    elif kind == "header":
        errors.extend(_text_errors(block.get("text"), f"{at}/text", MAX_HEADER_TEXT,
                                   plain_only=True))
    elif kind == "actions":
        errors.extend(_elements_errors(block, at, MAX_ACTIONS_ELEMENTS, INTERACTIVE))
    elif kind == "context":
        errors.extend(_elements_errors(block, at, MAX_CONTEXT_ELEMENTS,
                                       frozenset({"plain_text", "mrkdwn", "image"})))
    elif kind == "markdown":
        text = block.get("text")
        if not isinstance(text, str) or not 0 < len(text) <= MAX_MARKDOWN_TEXT:
            errors.append(f"must be a string of 1 to {MAX_MARKDOWN_TEXT} characters "
                          f"[json-pointer:{at}/text]")
    elif kind == "rich_text":
        if not isinstance(block.get("elements"), list):
            errors.append(f"missing required field: elements [json-pointer:{at}/elements]")
    return errors


def _section_errors(block: JSON, at: str) -> list[str]:
    text, fields = block.get("text"), block.get("fields")
    if text is None and fields is None:
        return [f"must provide either text or fields [json-pointer:{at}]"]
    errors: list[str] = []
    if text is not None:
        errors.extend(_text_errors(text, f"{at}/text", MAX_SECTION_TEXT))
    if fields is not None:
        if not isinstance(fields, list) or not 0 < len(fields) <= MAX_SECTION_FIELDS:
            errors.append(f"must be an array of 1 to {MAX_SECTION_FIELDS} items "
                          f"[json-pointer:{at}/fields]")
        else:
            for index, item in enumerate(fields):
                errors.extend(_text_errors(item, f"{at}/fields/{index}", MAX_FIELD_TEXT))
    accessory = block.get("accessory")
    if accessory is not None:
        errors.extend(_element_errors(accessory, f"{at}/accessory", INTERACTIVE, set()))
    return errors


def _elements_errors(block: JSON, at: str, most: int, allowed: frozenset[str]) -> list[str]:
    elements = block.get("elements")
    if not isinstance(elements, list) or not elements:
        return [f"must be an array of at least 1 item [json-pointer:{at}/elements]"]
    if len(elements) > most:
        return [f"must be less than {most + 1} items [json-pointer:{at}/elements]"]
    errors: list[str] = []
    action_ids: set[str] = set()
    for index, element in enumerate(elements):
        errors.extend(_element_errors(element, f"{at}/elements/{index}", allowed, action_ids))
    return errors


def _element_errors(element: Any, at: str, allowed: frozenset[str],
                    action_ids: set[str]) -> list[str]:
    if not isinstance(element, dict):
        return [f"must be an object [json-pointer:{at}]"]
    kind = element.get("type")
    if kind not in allowed:
        return [f"unsupported type: {kind} [json-pointer:{at}/type]"]
    if kind in ("plain_text", "mrkdwn"):
        return _text_errors(element, at, MAX_SECTION_TEXT)
    if kind != "button":
        return []
    errors = _text_errors(element.get("text"), f"{at}/text", MAX_BUTTON_TEXT, plain_only=True)
    action_id = element.setdefault("action_id", uuid.uuid4().hex[:4])
    if not isinstance(action_id, str) or not 0 < len(action_id) <= MAX_ACTION_ID:
        errors.append(f"must be a string of 1 to {MAX_ACTION_ID} characters "
                      f"[json-pointer:{at}/action_id]")
    elif action_id in action_ids:
        errors.append(f"duplicate action_id [json-pointer:{at}/action_id]")
    else:
        action_ids.add(action_id)
    value = element.get("value")
    if value is not None and (not isinstance(value, str) or len(value) > MAX_BUTTON_VALUE):
        errors.append(f"must be a string of at most {MAX_BUTTON_VALUE} characters "
                      f"[json-pointer:{at}/value]")
    style = element.get("style")
    if style is not None and style not in ("primary", "danger"):
        errors.append(f"must be one of primary, danger [json-pointer:{at}/style]")
    return errors


def _text_errors(text: Any, at: str, most: int, *, plain_only: bool = False) -> list[str]:
    if not isinstance(text, dict):
        return [f"must be a text object [json-pointer:{at}]"]
    kinds = ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
    if text.get("type") not in kinds:
        return [f"must be one of {', '.join(kinds)} [json-pointer:{at}/type]"]
    value = text.get("text")
    if not isinstance(value, str) or not value:
        return [f"must be more than 0 characters [json-pointer:{at}/text]"]
    if len(value) > most:
        return [f"must be less than {most + 1} characters [json-pointer:{at}/text]"]
    return []
