"""Gateway slash commands: the ones that work the same for every agent."""

from __future__ import annotations

import time

from gateway.contract.approval import Decision
from gateway.delivery.outbox import waiting_notices
from gateway.errors import HomingError
from gateway.messages.command_line import new_session_text
from gateway.messages.conversations import TITLE_CHARS
from gateway.messages.session_list import (
    LISTED,
    SessionLine,
    listing,
    matching,
    pick,
    session_lines,
)
from gateway.messages.turn import Turn
from gateway.sessions.store import CannotResume
from gateway.words.events import Choice


class CompressionFailed(HomingError):
    """The agent could not carry the context over; the session is unchanged."""

GATEWAY_COMMANDS: dict[str, str] = {
    "help": "list the commands",
    "status": "this conversation's session key, session id and what is running",
    "new": "end this session and start a fresh one (alias /reset)",
    "compress": "compress the context: continue in a new session linked to this one",
    "stop": "stop the turn under way here (its model call and command)",
    "sessions": "this conversation's sessions, newest first: /sessions [all] [words]",
    "resume": "make an earlier session live again: /resume <number or session id>",
    "title": "name this conversation: /title <text>",
    "archive": "archive this conversation (as the web page's Archive does)",
    "start": "a welcome, with your user id",
    "approve": "approve what the agent asked to run: /approve <id> [session]",
    "deny": "refuse what the agent asked to run: /deny <id>",
}
#: a button's words, at most (Discord takes 80 characters, Telegram shows about 40)
CHOICE_LABEL = 40
#: not offered in group chats' command menus (a welcome is for a private chat)
PRIVATE_ONLY = frozenset({"start"})


async def run_gateway_command(turn: Turn, name: str, args: str) -> bool:
    """Answer a gateway command; False when ``name`` is not one of ours."""
    if name == "new":
        await _new(turn)
    elif name == "compress":
        await _compress(turn)
    elif name == "status":
        await _status(turn)
    elif name == "help":
        await _help(turn)
    elif name == "start":
        await _start(turn)
    elif name in ("approve", "deny"):
        await _decide(turn, name, args)
    elif name == "sessions":
        await _sessions(turn, args)
    elif name == "resume":
        await _resume(turn, args)
    elif name == "title":
        await _title(turn, args)
    elif name == "archive":
        await _archive(turn)
    elif name == "stop":
        stopped = turn.runner.stop_turn(turn.session.session_key)
        await turn.reply("Stopped the turn under way." if stopped
                         else "Nothing is running in this conversation.", kind="system")
    else:
        return False
    return True


async def _start(turn: Turn) -> None:
    """A platform's "start" (Telegram sends /start first): a welcome, not agent input."""
    route = turn.route
    who = f"Your {route.platform} user id is {route.user_id}." if route.user_id else ""
    await turn.reply(f"Hello{' ' + route.user_name if route.user_name else ''}! I am the agent "
                     f"behind this chat: ask me anything, or have me run things in the "
                     f"background; they report back here. {who} Send /help to see the "
                     f"commands.", kind="system")


async def _decide(turn: Turn, name: str, args: str) -> None:
    """``/approve <id> [session]`` and ``/deny <id>``: the buttons' words, typed. Without
    an id, the one approval waiting in this conversation (when there is one)."""
    approvals = turn.runner.approvals
    words = args.split()
    if approvals is None:
        await turn.reply("Nothing here asks for approval.", kind="system")
        return
    if not words or words[0].lower() == "session":
        pending = await approvals.pending_in(turn.session.session_key)
        if len(pending) != 1:
            listed = ", ".join(p.id for p in pending)
            await turn.reply(f"Which one? Send /{name} <id>; waiting here: {listed}." if pending
                             else "Nothing is waiting for approval here.", kind="system")
            return
        words.insert(0, pending[0].id)
    decision: Decision = "deny" if name == "deny" else (
        "session" if [w.lower() for w in words[1:2]] == ["session"] else "once")
    route = turn.route
    pressed = await approvals.press(words[0], decision, platform=route.platform,
                                    user_id=route.user_id, user_name=route.user_name)
    await turn.reply(pressed.note, kind="system")


async def _new(turn: Turn) -> None:
    old = turn.session
    turn.session = await turn.runner.rotate_session(old, "new", route=turn.route)
    await turn.reply(new_session_text(turn.session.id, old.id), kind="system")


async def _sessions(turn: Turn, args: str) -> None:
    """``/sessions [all] [words]``: newest first, a button to resume each other one."""
    words = args.split()
    archived_too = bool(words) and words[0].lower() == "all"
    words = words[1:] if archived_too else words
    lines = await _lines(turn)
    if not archived_too:
        lines = [line for line in lines if line.current or not line.session.archived]
    found = await matching(turn.runner.store, lines, words)
    newest = sorted(found, key=lambda line: line.number, reverse=True)[:LISTED]
    choices = [Choice(f"{line.number}. {line.title or '(untitled)'}"[:CHOICE_LABEL],
                      f"/resume {line.session.id}") for line in newest if not line.current]
    await turn.reply(listing(found, searched=bool(words), archived_too=archived_too),
                     kind="system", choices=choices)


async def _resume(turn: Turn, args: str) -> None:
    """``/resume <number|session id>``: that session live again, this one closed."""
    if not args.strip():
        await turn.reply("Which one? /resume <number> (/sessions lists them).", kind="system")
        return
    line = pick(await _lines(turn), args)
    if line is None:
        await turn.reply(f"No session {args.strip()} in this conversation: /sessions lists "
                         f"them.", kind="system")
        return
    if line.current:
        await turn.reply("That is the session you are in.", kind="system")
        return
    old = turn.session
    try:
        turn.session = await turn.runner.resume_session(old, line.session.id)
    except CannotResume as exc:
        await turn.reply(f"Not resumed: {exc}.", kind="system")
        return
    await turn.reply(
        f"Resumed session {line.number}: {line.title or '(untitled)'} "
        f"({turn.session.id}). Its history is back. Session {old.id} is closed; its work "
        f"still reports here, as a closed session's does.", kind="system")


async def _title(turn: Turn, args: str) -> None:
    title = " ".join(args.split())[:TITLE_CHARS]
    if not title:
        shown = turn.session.title
        await turn.reply(f"This conversation is called “{shown}”. /title <text> renames it."
                         if shown else "This conversation has no name yet: /title <text>.",
                         kind="system")
        return
    turn.session = await turn.runner.store.update_session(turn.session.id, title=title)
    await turn.reply(f"This conversation is now called “{title}”.", kind="system")


async def _archive(turn: Turn) -> None:
    turn.session = await turn.runner.store.update_session(turn.session.id, archived=True)
    await turn.reply("Archived: this conversation leaves the web page's list and "
                     "/sessions (/sessions all shows it). Its session stays live: writing "
                     "here goes on as before.", kind="system")


async def _lines(turn: Turn) -> list[SessionLine]:
    key = turn.session.session_key
    return await session_lines(turn.runner.store, key, turn.runner.agent.running_jobs(key))


async def _compress(turn: Turn) -> None:
    old = turn.session
    try:
        await turn.runner.agent.compress(turn)
    except CompressionFailed as exc:
        await turn.reply(f"The context was not compressed: {exc} The session is unchanged.",
                         kind="system")
        return
    await turn.reply(
        f"Context compressed: continuing in session {turn.session.id} (follows {old.id}). "
        f"Work started earlier still reports here.", kind="system")


async def _status(turn: Turn) -> None:
    s = turn.session
    lines = [
        f"session key: {s.session_key}",
        f"session id: {s.id}",
        f"started: {_ago(s.created_at)}",
    ]
    # notices not delivered yet: under a platform's flood limits they wait, and go together
    here = await waiting_notices(turn.runner.store.db, s.session_key)
    waiting = here[0] if here else None
    lines.append("notices waiting here: none" if waiting is None else
                 f"notices waiting here: {waiting.count}, the oldest for "
                 f"{_duration(waiting.oldest_wait(time.time()))}")
    lines.extend(turn.runner.status_lines(turn))
    await turn.reply("\n".join(lines), kind="system")


async def _help(turn: Turn) -> None:
    commands = {**GATEWAY_COMMANDS, **turn.runner.agent.commands}
    lines = [f"/{name} — {what}" for name, what in commands.items()]
    await turn.reply("Commands:\n" + "\n".join(lines), kind="system")


def _ago(timestamp: float) -> str:
    return f"{_duration(time.time() - timestamp)} ago"


def _duration(seconds: float) -> str:
    whole = max(0, int(seconds))
    return f"{whole // 60} min {whole % 60} s"
