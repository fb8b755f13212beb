"""Approval requests on Matrix, which has no buttons: the request is a message in the
turn's thread, answered by ``/approve`` or ``/deny`` (the core reads those), or by a ✅
(approve once) or ❌ (deny) reaction on it from someone who may decide — decided once,
by the core (``ApprovalDesk.press``). The request is then edited into its outcome.

A reaction names only the event it is on: the request's approval id is read from the
request's own text (kept in memory as well), so a request posted before a restart is
still answered.
"""

from __future__ import annotations

import re

from gateway.contract.approval import ApprovalRecord

_ID = re.compile(r"\((a[0-9a-f]{7})\)")


def request_markdown(record: ApprovalRecord) -> str:
    """The request, and how to answer it here."""
    minutes = max(1, round((record.expires_at - record.created_at) / 60))
    return (f"{record.request_text(settled=True)}\n"
            f"React \u2705 to approve once or \u274c to deny, or answer /approve {record.id} "
            f"(once), /approve {record.id} session, /deny {record.id}. "
            f"No answer within {minutes} min means no.")


def outcome_markdown(record: ApprovalRecord) -> str:
    """The request once decided: what was asked, and what became of it."""
    return f"{record.request_text(settled=True)}\n{record.outcome_text()}"


def approval_id_in(body: str) -> str | None:
    """The approval id a request's text names."""
    match = _ID.search(body)
    return match.group(1) if match else None
