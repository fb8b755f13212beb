"""Row states as types: every query names a table's states through its enum, and
every UPDATE that moves a row from one state to another makes a move the table's
``*_MOVES`` allows. Read from the source (the SQL as the code spells it, with the
enums put in), so a new query is checked the day it is written."""

from __future__ import annotations

import ast
import gc
import re
from enum import StrEnum
from pathlib import Path

import pytest

from gateway.contract.approval import APPROVAL_MOVES, ApprovalState
from gateway.delivery.notifications import NOTIFICATION_MOVES, NotificationState
from gateway.inbound.journal import ENTRY_MOVES, EntryState
from tools.delegation import DELEGATION_MOVES, DelegationState
from tools.job_record import JOB_MOVES, JobState
from tools.schedules import RUN_MOVES, RunState

ROOT = Path(__file__).parent.parent

MACHINES: dict[str, tuple[type[StrEnum], dict]] = {  # type: ignore[type-arg]
    "notifications": (NotificationState, NOTIFICATION_MOVES),
    "inbound": (EntryState, ENTRY_MOVES),
    "jobs": (JobState, JOB_MOVES),
    "delegations": (DelegationState, DELEGATION_MOVES),
    "schedule_runs": (RunState, RUN_MOVES),
    "approvals": (ApprovalState, APPROVAL_MOVES),
}
ENUMS = {enum.__name__: enum for enum, _ in MACHINES.values()}
#: the schema's history is fixed text: a migration is never rewritten
FROZEN = {"gateway/store/migrations.py"}
SQL = re.compile(r"\b(SELECT|UPDATE|INSERT|DELETE)\b")
COMPARED = re.compile(r"\bstate\s*(?:=|<>|!=)\s*'([a-z_]+)'|\bstate\s+(?:NOT\s+)?IN\s*\(([^)]*)\)")


def _parse(source: str) -> ast.AST:
    """``ast.parse`` with the collector held off: a finalizer it would run meanwhile (an
    earlier test's task, logged as it is collected) may format a traceback — itself an
    ``ast.parse`` in 3.11 — and upset this one's AST state (CPython gh-106905)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if enabled:
            gc.enable()


def sql_strings() -> list[tuple[str, int, str, str]]:
    """Every SQL string of the code: (file, line, as spelled, as run) — "as spelled"
    keeps the enums' placeholders, "as run" has their values."""
    found = []
    for path in sorted([*ROOT.glob("gateway/**/*.py"), *ROOT.glob("tools/**/*.py"),
                        *ROOT.glob("agent/**/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel in FROZEN:
            continue
        for node in ast.walk(_parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                spelled = run = node.value
            elif isinstance(node, ast.JoinedStr):
                spelled_parts, run_parts = [], []
                for part in node.values:
                    if isinstance(part, ast.Constant):
                        spelled_parts.append(str(part.value))
                        run_parts.append(str(part.value))
                        continue
                    assert isinstance(part, ast.FormattedValue)
                    value = part.value
                    if (isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name)
                            and value.value.id in ENUMS):
                        member = ENUMS[value.value.id][value.attr]
                        spelled_parts.append("{" + f"{value.value.id}.{value.attr}" + "}")
                        run_parts.append(member.value)
                    else:
                        spelled_parts.append("{…}")
                        run_parts.append("{…}")
                spelled, run = "".join(spelled_parts), "".join(run_parts)
            else:
                continue
            if SQL.search(spelled) and "state" in spelled:
                found.append((rel, node.lineno, spelled, run))
    return found


def test_the_state_machines_name_each_of_their_states() -> None:
    for table, (enum, moves) in MACHINES.items():
        assert set(moves) == set(enum), table
        assert all(set(targets) <= set(enum) for targets in moves.values()), table


def test_no_query_spells_a_state_out() -> None:
    spelled_out = []
    for rel, line, spelled, _run in sql_strings():
        for m in COMPARED.finditer(spelled):
            values = [m.group(1)] if m.group(1) else re.findall(r"'([a-z_]+)'", m.group(2))
            if values:
                spelled_out.append(f"{rel}:{line}: {m.group(0)}")
    assert not spelled_out, "\n".join(spelled_out)


UPDATE = re.compile(r"UPDATE\s+(\w+)\s+SET\s+(.*?)\s+WHERE\s+(.*)", re.S)


@pytest.mark.parametrize("table", sorted(MACHINES))
def test_every_update_makes_a_move_its_table_allows(table: str) -> None:
    enum, moves = MACHINES[table]
    checked, wrong = 0, []
    for rel, line, _spelled, run in sql_strings():
        for m in UPDATE.finditer(run):
            if m.group(1) != table:
                continue
            target = re.search(r"\bstate\s*=\s*'([a-z_]+)'", m.group(2))
            if target is None:
                continue  # not a move, or a state given as a parameter
            to = enum(target.group(1))
            guard = COMPARED.search(m.group(3))
            if guard is None:
                wrong.append(f"{rel}:{line}: moves to {to} from any state")
                continue
            sources = ([guard.group(1)] if guard.group(1)
                       else re.findall(r"'([a-z_]+)'", guard.group(2)))
            for source in sources:
                checked += 1
                if to not in moves[enum(source)]:
                    wrong.append(f"{rel}:{line}: {source} -> {to}")
    assert not wrong, "\n".join(wrong)
    # (the approvals' moves all have their target as a parameter: check_move runs first)
    assert checked or table == "approvals", f"no UPDATE of {table} was found to check"
