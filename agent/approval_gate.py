"""The gate in front of the model's actions: what must wait for a human, and how an
action approved after its turn is gone is carried out.

Only the model's tool calls pass here — ``terminal``, ``delegate_task`` and the
commands of the schedules it creates (a sub-agent's shell too). What a user
types (``/run``, ``/bg``, ``/watch``) goes to the command agent and is that
user's own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from gateway.approvals.decisions import Approvals, Decide, Restarting
from gateway.contract.approval import ApprovalRecord

if TYPE_CHECKING:
    from tools.delegation import DelegationManager
    from tools.scheduler import Scheduler
    from tools.terminal import Terminal


class ApprovalGate:
    def __init__(self, approvals: Approvals, terminal: Terminal, *,
                 delegations: DelegationManager | None = None,
                 scheduler: Scheduler | None = None) -> None:
        self.approvals = approvals
        self.terminal = terminal
        self.delegations = delegations
        self.scheduler = scheduler
        approvals.late_run = self.run_late

    async def clear(self, tool: str, args: BaseModel) -> str | None:
        """None when the call may go ahead (now, after a human approved it); otherwise
        why it was not run, for the model."""
        text = _action_text(tool, args)
        if text is None:
            return None
        need = await self.approvals.need(tool, text)
        if need is None:
            return None
        try:
            record = await self.approvals.ask(tool, text, args.model_dump(), need)
        except Restarting as exc:
            return (f"not run yet: the gateway is restarting. Approval {exc} stays open "
                    f"until it expires; if it is approved, the command runs in the "
                    f"background and its result comes to this conversation.")
        if record.state == "approved":
            return None
        return _refusal(record, self.approvals.config.timeout_seconds)

    async def run_late(self, record: ApprovalRecord, decide: Decide) -> None:
        """An approval decided after its turn ended (a restart came between): the action
        runs in the background and reports to the conversation like any other."""
        action, address = record.action, record.address
        if record.tool == "terminal":
            origin = {"approval": record.id}
            if action.get("artifact"):
                origin["artifact"] = action["artifact"]
            await self.terminal.jobs.start(
                record.command, address,
                notify_on_complete=bool(action.get("notify_on_complete", True)),
                watch_patterns=action.get("watch_patterns") or None, cwd=self.terminal.cwd,
                origin=origin,
                in_registration=lambda conn, job_id: decide(
                    conn, f"running as background job {job_id}; it reports here"))
            return
        db = self.approvals.db
        if record.tool == "delegate_task" and self.delegations is not None:
            await db.write(lambda conn: decide(conn, "handed to a sub-agent; its summary "
                                                     "comes here"))
            await self.delegations.delegate(record.command, address)
            return
        if record.tool == "schedule" and self.scheduler is not None:
            await db.write(lambda conn: decide(conn, "the schedule is created"))
            await self.scheduler.create(
                address, every=action.get("every"), cron=action.get("cron"),
                at=action.get("at"), command=action.get("command"),
                prompt=action.get("prompt"), timezone=action.get("timezone"))
            return
        raise RuntimeError(f"{record.tool} is not available in this gateway")


def _action_text(tool: str, args: Any) -> str | None:
    """What a call would run, as the policy reads it; None for calls that run nothing."""
    if tool == "terminal":
        return str(args.command)
    if tool == "delegate_task":
        return str(args.task)
    if tool == "schedule" and args.action == "create" and args.command:
        return str(args.command)
    return None


def _refusal(record: ApprovalRecord, timeout: float) -> str:
    if record.state == "denied":
        return (f"not run: {record.decided_by or 'the user'} denied it (approval "
                f"{record.id}). Do not try it another way; ask the user what they want.")
    if record.state == "expired":
        return (f"not run: nobody approved it within {timeout:g} s "
                f"(approvals.timeout_seconds; approval {record.id}). Tell the user it "
                f"needs their approval.")
    return f"not run: the approval was cancelled ({record.ran or 'no reason'})."
