"""Gateway slash commands: the ones that work the same for every agent."""

from __future__ import annotations

import re
import time

from gateway.contract.approval import Decision
from gateway.delivery.outbox import waiting_notices
from gateway.errors import HomingError
from gateway.messages.turn import Turn


class CompressionFailed(HomingError):
    """The agent could not carry the context over; the session is unchanged."""

GATEWAY_COMMANDS: dict[str, str] = {
    "help": "list the commands",
    "status": "this conversation's session key, session id and what is running",
    "new": "end this session and start a fresh one (alias /reset)",
    "compress": "compress the context: continue in a new session linked to this one",
    "stop": "stop the turn under way here (its model call and command)",
    "start": "a welcome, with your user id",
    "approve": "approve what the agent asked to run: /approve <id> [session]",
    "deny": "refuse what the agent asked to run: /deny <id>",
}
#: not offered in group chats' command menus (a welcome is for a private chat)
PRIVATE_ONLY = frozenset({"start"})
_ALIASES = {"reset": "new"}


def parse_command(text: str) -> tuple[str, str] | None:
    """``/name@bot args`` → ``("name", "args")``; None when not a command."""
    stripped = text.strip()
    if not stripped.startswith("/") or len(stripped) < 2:
        return None
    head, _, args = stripped[1:].partition(" ")
    name = head.split("@", 1)[0].lower()
    if not name or not all(c.isalnum() or c == "_" for c in name):
        return None
    return _ALIASES.get(name, name), args.strip()


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


def new_session_text(session_id: str, previous_id: str) -> str:
    """What ``/new`` says (:func:`new_session_ids` reads it back)."""
    return f"Started a new session ({session_id}). The previous one ({previous_id}) is closed."


_NEW_SESSION = re.compile(
    r"Started a new session \(([\w-]+)\)\. The previous one \(([\w-]+)\) is closed\.")


#: what the web page calls the line ``/new`` answers with, in its sidebar (the bubble
#: adds the time)
NEW_SESSION_WORDS = "New session"


def new_session_ids(kind: str, text: str) -> tuple[str, str] | None:
    """The new and the previous session id when this is the line ``/new`` answers with
    (a ``system`` line); None for any other. The one test of it: the web page says "New
    session" for that line, in its bubble and its sidebar line, the ids under details."""
    if kind != "system":
        return None
    found = _NEW_SESSION.fullmatch(text.strip())
    return (found[1], found[2]) if found else None


async def _new(turn: Turn) -> None:
    old = turn.session
    turn.session = await turn.runner.rotate_session(old, "new", route=turn.route)
    await turn.reply(new_session_text(turn.session.id, old.id), kind="system")


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
