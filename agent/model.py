"""The model agent: a tool-calling conversation over an OpenAI-compatible endpoint.

A turn loads the session's history, runs the tool loop (in the turn's task,
so whatever the tools start carries the turn's return address) and sends the
model's words to the turn's route. A delivered notification is a turn too,
with the notice as a marked user-role message, and the answer goes to the
notice's route — never under whatever message came last. Slash commands the
command agent knows (/bg, /jobs, /kill, …) still go to it, without a model
round trip.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import structlog

from agent.command import CommandAgent
from agent.compression import Compressor
from agent.history import History, Message, estimate_tokens, notice_message
from agent.loop import ToolLoop
from agent.model_client import ModelClient, ModelUnavailable
from agent.titles import model_title
from agent.toolbox import ToolBox, ToolContext
from agent.transcription import Transcriber
from agent.wire import wire_messages
from gateway.config.settings import AgentConfig
from gateway.delivery.notifications import Notification
from gateway.inbound.files import file_lines, files_of
from gateway.messages.command_line import parse_command
from gateway.messages.commands import CompressionFailed
from gateway.messages.pairing import APPROVED_KIND
from gateway.messages.turn import Turn
from gateway.words.events import MessageKind, SendResult
from tools.delegation import SubAgent

log = structlog.get_logger(__name__)

#: notifications that are the gateway's own words, posted as they are
GATEWAY_NOTES = frozenset({"schedule_note", APPROVED_KIND})

SYSTEM_PROMPT = """\
You are the assistant behind Homing, a chat gateway: people talk to you from Telegram, \
Discord or a web chat, and you can run shell commands for them with your tools.

- For anything that takes more than a few seconds (builds, deploys, downloads, scrapers), \
start it with terminal and background: true. It reports back to this conversation when \
it ends, so do not wait for it or poll it.
- delegate_task hands a self-contained task to a sub-agent; its summary comes back here.
- A message that starts with "[Background notice: not a message from the user]" \
reports on work started earlier. The user did not write it: tell them in a sentence or \
two what happened and what it means; do not answer it as a question from the user. When \
it is a "Scheduled task", it is a task the user scheduled with the schedule tool: do it \
now and report the result.
- Be brief; this is a chat."""

SUBAGENT_PROMPT = """\
You are a sub-agent working on one task in the background with a shell (the terminal \
tool, foreground only). When you are done, answer with a short summary of what you did \
and found: that summary is all the requester will see."""


@dataclass(slots=True)
class _Conversation:
    """One turn's view of the session's history, kept in step with the store."""

    messages: list[Message]
    #: some of the model's words went out
    said: bool = False
    #: the model gave words, whether or not they could be posted (a preview that can be
    #: neither edited nor deleted refuses them): its answer was not empty
    spoke: bool = False
    reported_tokens: int | None = None
    #: compressed once this turn already: what is left over the budget stays till the next
    compressed: bool = False


class ModelAgent:
    def __init__(self, config: AgentConfig, client: ModelClient, history: History,
                 toolbox: ToolBox, command_agent: CommandAgent, *,
                 auto_title: bool = False) -> None:
        """``auto_title``: name a conversation after its first exchange
        (``sessions.auto_title``; agent/titles.py)."""
        self.config = config
        self.client = client
        self.auto_title = auto_title
        self.history = history
        self.toolbox = toolbox
        self.command_agent = command_agent
        self.commands = command_agent.commands
        self.compressor = Compressor(config, client, history)
        self.loop = ToolLoop(client, toolbox, config.max_tool_rounds)
        self.system_prompt = config.system_prompt or SYSTEM_PROMPT
        self.transcriber = (Transcriber(config.transcription)
                            if config.transcription is not None else None)
        #: what every request carries besides the history, in estimated tokens
        self._fixed_tokens = estimate_tokens({"content": self.system_prompt + json.dumps(
            toolbox.schemas())})

    # the Agent protocol --------------------------------------------------------

    async def run_turn(self, turn: Turn) -> None:
        command = parse_command(turn.event.text)
        if command is not None and command[0] in self.commands:
            await self.command_agent.run_turn(turn)
            return
        opening = await self._opening(turn)
        await self._converse(turn, {"role": "user", "content": opening}, "reply")
        if self.auto_title and turn.session.title is None:
            await self._name_after_first_exchange(turn)

    async def _name_after_first_exchange(self, turn: Turn) -> None:
        """After the answer went out (nobody waits but the conversation's next message):
        the model's title for the conversation, when this was its first exchange."""
        messages = await self.history.load(turn.session.id)
        said = [m for m in messages if m.get("role") == "user"]
        answers = [m for m in messages if m.get("role") == "assistant" and m.get("content")]
        if len(said) != 1 or not answers:
            return
        title = await model_title(self.client, _text_of(said[0]), _text_of(answers[-1]))
        if title is not None and await turn.runner.store.name_if_unnamed(turn.session.id,
                                                                          title):
            log.info("conversation_named", session_id=turn.session.id, title=title)

    async def _opening(self, turn: Turn) -> str | list[dict[str, object]]:
        """The user's message: its text, a line per file, what its voice notes say
        (``agent.transcription``) and (``agent.vision``) its images, kept by path (the
        request inlines them)."""
        heard = []
        if self.transcriber is not None:
            for f in files_of(turn.event.metadata):
                if self.transcriber.wants(f) and (said := await self.transcriber.transcript(f)):
                    heard.append(f"[Transcript of {f.name}: {said}]")
        text = "\n".join([turn.event.text, *heard, *file_lines(turn.event.metadata)]).strip()
        images = [f for f in files_of(turn.event.metadata)
                  if self.config.vision and f.path and (f.mime or "").startswith("image/")]
        if not images:
            return text
        parts: list[dict[str, object]] = [{"type": "text", "text": text}]
        parts += ({"type": "image_file", "path": f.path, "mime": f.mime} for f in images)
        return parts

    async def run_notification(self, turn: Turn, notification: Notification) -> None:
        if notification.kind in GATEWAY_NOTES:  # the gateway's own words: no model turn
            await _post_notice(turn, notification)
            return
        lineage = await turn.runner.store.lineage(turn.session.id)
        if await self.history.has_notice(lineage, notification.id):
            # a second delivery (its answer could not be sent): the model already had
            # its turn for this notice, so the notice goes out as it is
            await _post_notice(turn, notification)
            return
        try:
            await self._converse(turn, notice_message(notification.text, notification.id),
                                 "notification", notice=notification)
        except Exception:
            log.exception("notice_turn_failed")
            await _post_notice(turn, notification, "The model could not comment on this: an "
                                                   "internal error, logged by the gateway.")

    def posts_as_is(self, notification: Notification) -> bool:
        """The gateway's own notes; any other notice is the model's to answer."""
        return notification.kind in GATEWAY_NOTES

    async def close(self) -> None:
        if self.transcriber is not None:
            await self.transcriber.close()

    def running_jobs(self, session_key: str) -> dict[str, int]:
        return self.command_agent.running_jobs(session_key)

    def status_lines(self, turn: Turn) -> list[str]:
        return [f"model: {self.config.model} at {self.config.base_url}",
                *self.command_agent.status_lines(turn)]

    async def compress(self, turn: Turn) -> None:
        await self.compressor.compress(turn)

    # the conversation ----------------------------------------------------------

    async def _converse(self, turn: Turn, opening: Message, kind: MessageKind, *,
                        notice: Notification | None = None) -> None:
        await self.history.open_turn(turn.session.id, opening, turn.journal_id)
        convo = _Conversation(await self.history.load(turn.session.id))

        header = notice_header(notice) if notice is not None else None

        async def say(text: str) -> SendResult:
            if header and not convo.said:  # the facts first, whatever the model made of them
                text = f"{header}\n{text}"
            result = await turn.reply(text, kind=kind)
            convo.said = convo.said or result.ok
            convo.spoke = True
            return result

        async def context() -> list[Message]:
            # agent.busy: steer — what the user said meanwhile joins this turn
            steered = await turn.runner.take_steered(turn.session.session_key)
            if steered:
                added: list[Message] = [{"role": "user", "content": e.event.text}
                                        for e in steered]
                await self.history.append(turn.session.id, added,
                                          inbound_ids=[e.id for e in steered])
                for e in steered:
                    turn.runner.store.record_message(turn.session.id, "user", e.event.text,
                                                     inbound_id=e.id)
                convo.messages += added
            await self._compress_if_needed(turn, convo)  # a long tool turn may pass the budget
            return wire_messages(self.system_prompt, convo.messages, vision=self.config.vision)

        async def record(messages: list[Message], reported: int | None) -> None:
            # only this: it also runs for a round cut short, while the turn is cancelled
            await self.history.append(turn.session.id, messages)
            convo.messages += messages
            convo.reported_tokens = reported

        async def show(text: str) -> None:  # the answer as the model writes it
            await turn.show(f"{header}\n{text}" if header and not convo.said else text)

        overflowed = False
        while True:
            try:
                answer = await self.loop.run(
                    context, record, say,
                    ToolContext(reply=say, status=turn.status, send_file=turn.send_file),
                    on_text=show if turn.live is not None else None)
                break
            except ModelUnavailable as exc:
                if exc.context_overflow and not overflowed:
                    overflowed = True  # the endpoint says it is too long: compress, once
                    if await self._compress(turn, convo):
                        continue
                await self._unavailable(turn, exc, notice)
                return
        stopped = (f"stopped after {self.config.max_tool_rounds} rounds of tool calls "
                   f"without an answer (agent.max_tool_rounds)")
        if notice is not None and (answer is None or not convo.said):
            # the notice must arrive whatever the model did with it; its text goes last,
            # as the send that decides the delivery
            await _post_notice(turn, notice, f"The model {stopped}." if answer is None
                               else "The model gave no answer to this.")
        elif answer is None:
            await turn.reply(f"I {stopped}. Tell me how to go on.", kind="system")
        elif not convo.spoke:
            await turn.reply("(The model gave an empty answer.)", kind="system")
        # after the answer, so the user does not wait for it (the conversation's next
        # message does, if it comes meanwhile)
        await self._compress_if_needed(turn, convo)

    async def _unavailable(self, turn: Turn, exc: ModelUnavailable,
                           notice: Notification | None) -> None:
        if notice is not None:
            # the notice must still arrive: without the model's words, as it is
            await _post_notice(turn, notice, f"The model could not comment on this: {exc}")
            return
        await turn.reply(f"{exc} Your message is kept in this conversation; send another "
                         f"message to try again.", kind="system")

    async def _compress_if_needed(self, turn: Turn, convo: _Conversation) -> None:
        if convo.compressed:
            return
        estimated = self._fixed_tokens + sum(estimate_tokens(m) for m in convo.messages)
        if self.compressor.over_budget(max(estimated, convo.reported_tokens or 0)):
            await self._compress(turn, convo)

    async def _compress(self, turn: Turn, convo: _Conversation) -> bool:
        try:
            await self.compressor.compress(turn)
        except CompressionFailed:
            return False  # logged; the history is intact and a later round tries again
        except Exception:  # the store failed: the answer stands, the next turn tries again
            log.exception("compression_crashed", session_id=turn.session.id)
            return False
        convo.messages = await self.history.load(turn.session.id)
        convo.reported_tokens = None
        convo.compressed = True
        return True


def _text_of(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # parts: the words of it
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def notice_header(notice: Notification) -> str:
    """The notice's own first line — job id and exit code, the watch match, the
    delegation's outcome — which heads the model's answer to it."""
    first = notice.text.strip().split("\n", 1)[0].strip()
    return first if len(first) <= 300 else first[:299] + "…"


async def _post_notice(turn: Turn, notice: Notification, why: str | None = None) -> None:
    """The notice as it is, with a line saying why the model's words are not there."""
    text = notice.text if why is None else f"{notice.text}\n\n({why})"
    await turn.reply(text, kind="notification")


def model_subagent(config: AgentConfig, client: ModelClient, toolbox: ToolBox) -> SubAgent:
    """``delegate_task``'s sub-agent: a second tool loop with its own, unsaved history
    and a foreground shell; its last words are the summary that comes home."""
    loop = ToolLoop(client, toolbox, config.max_tool_rounds)

    async def nowhere(text: str) -> None:
        """A sub-agent's words in between are its own; only the summary goes home."""

    async def run(task: str) -> str:
        messages: list[Message] = [{"role": "user", "content": task}]

        async def context() -> list[Message]:
            return wire_messages(SUBAGENT_PROMPT, messages)

        async def record(new: list[Message], reported: int | None) -> None:
            messages.extend(new)

        try:
            async with asyncio.timeout(config.subagent_timeout_seconds):
                answer = await loop.run(context, record, nowhere,
                                        ToolContext(reply=_no_posting))
        except TimeoutError:
            raise TimeoutError(f"the sub-agent ran out of time "
                               f"({config.subagent_timeout_seconds:g} s, "
                               f"agent.subagent_timeout_seconds)") from None
        if answer is None:
            return (f"The sub-agent stopped after {config.max_tool_rounds} rounds of tool "
                    f"calls without a summary.")
        return answer.text or "(the sub-agent finished without a summary)"

    return run


async def _no_posting(text: str) -> SendResult:
    return SendResult.failed("a sub-agent cannot post to the conversation")
