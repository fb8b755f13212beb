"""Message components for the fake Discord: the checks Discord makes on the ``components``
of a message post, edit or interaction response (action rows of buttons and selects).

Kept apart from the REST handlers because it is one rule set shared by three of them,
and because its answer is data: :func:`component_errors` gives the ``errors`` tree of
Discord's 400 "Invalid Form Body" (code 50035), keyed by the path of the bad field
(``{"components": {"0": {"components": {"1": {"custom_id": {"_errors": [...]}}}}}}``),
or None when the components are fine. The callers raise it.

What is checked, as on Discord: at most 5 action rows (type 1) of 1 to 5 components; a
button (type 2) has a style 1-5, a label of at most 80 characters (or an emoji), a
``custom_id`` of 1 to 100 characters — except a link button (style 5), which has a
``url`` and no ``custom_id``; selects (types 3, 5-8) a ``custom_id`` as well; custom ids
are unique within the message. The error codes follow Discord's naming; the exact codes
for the link-button and label rules are the fake's own. Components V2 (layout types,
message flag 1 << 15) and premium buttons (style 6) are not spoken: they are refused.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_CUSTOM_ID_LENGTH", "component_errors", "component_type_of"]

JSON = dict[str, Any]

MAX_CUSTOM_ID_LENGTH = 100
_MAX_ROWS = 5
_MAX_PER_ROW = 5
_MAX_LABEL = 80
_LINK = 5
_SELECTS = frozenset({3, 5, 6, 7, 8})


def component_errors(components: Any) -> JSON | None:
    """Discord's ``errors`` tree for bad ``components``; None if they are fine."""
    if components is None:
        return None
    if not isinstance(components, list):
        return _error(["components"], "LIST_TYPE_CONVERT", "Only iterables may be used in a "
                                                           "ListType.")
    if len(components) > _MAX_ROWS:
        return _error(["components"], "BASE_TYPE_MAX_LENGTH",
                      f"Must be {_MAX_ROWS} or fewer in length.")
    seen: set[str] = set()
    for r, row in enumerate(components):
        path = ["components", str(r)]
        if not isinstance(row, dict) or row.get("type") != 1:
            return _error([*path, "type"], "UNION_TYPE_CHOICES",
                          'Value of field "type" must be one of (1,).')
        items = row.get("components")
        if not isinstance(items, list) or not items:
            return _error([*path, "components"], "BASE_TYPE_MIN_LENGTH",
                          "Must be 1 or more in length.")
        if len(items) > _MAX_PER_ROW:
            return _error([*path, "components"], "BASE_TYPE_MAX_LENGTH",
                          f"Must be {_MAX_PER_ROW} or fewer in length.")
        for c, item in enumerate(items):
            error = _item_error([*path, "components", str(c)], item, seen)
            if error is not None:
                return error
    return None


def component_type_of(components: list[JSON], custom_id: str) -> int:
    """The type of the component with that ``custom_id`` (a button, 2, if none has it)."""
    for row in components:
        for item in row.get("components", []):
            if item.get("custom_id") == custom_id:
                return int(item["type"])
    return 2


def _item_error(path: list[str], item: Any, seen: set[str]) -> JSON | None:
    if not isinstance(item, dict) or item.get("type") not in {2, *_SELECTS}:
        return _error([*path, "type"], "UNION_TYPE_CHOICES",
                      'Value of field "type" must be one of (2, 3, 5, 6, 7, 8).')
    is_link = item["type"] == 2 and item.get("style") == _LINK
    if item["type"] == 2:
        if item.get("style") not in range(1, 6):
            return _error([*path, "style"], "BASE_TYPE_CHOICES",
                          "Value must be one of (1, 2, 3, 4, 5).")
        label = item.get("label")
        if label is not None and len(str(label)) > _MAX_LABEL:
            return _error([*path, "label"], "BASE_TYPE_MAX_LENGTH",
                          f"Must be {_MAX_LABEL} or fewer in length.")
        if not label and not item.get("emoji"):
            return _error([*path, "label"], "BUTTON_COMPONENT_LABEL_OR_EMOJI_REQUIRED",
                          "A button needs a label or an emoji.")
    if is_link:
        if "custom_id" in item:
            return _error([*path, "custom_id"], "BUTTON_COMPONENT_CUSTOM_ID_NOT_ALLOWED",
                          "A link button cannot have a custom id.")
        url = item.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://",
                                                            "discord://")):
            return _error([*path, "url"], "URL_TYPE_INVALID_URL", "Not a well formed URL.")
        return None
    custom_id = item.get("custom_id")
    if custom_id is None:
        return _error([*path, "custom_id"], "BASE_TYPE_REQUIRED", "This field is required")
    if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= MAX_CUSTOM_ID_LENGTH:
        return _error([*path, "custom_id"], "BASE_TYPE_BAD_LENGTH",
                      f"Must be between 1 and {MAX_CUSTOM_ID_LENGTH} in length.")
    if custom_id in seen:
        return _error([*path, "custom_id"], "COMPONENT_CUSTOM_ID_DUPLICATED",
                      "Component custom id cannot be duplicated")
    seen.add(custom_id)
    return None


def _error(path: list[str], code: str, message: str) -> JSON:
    """The ``errors`` tree with one error at ``path``."""
    tree: JSON = {"_errors": [{"code": code, "message": message}]}
    for key in reversed(path):
        tree = {key: tree}
    return tree
