"""The files of the message a turn answers: fetched from the platform into the
conversation's folder when the turn runs (gateway/inbound/files.py has how), each
one that cannot be saved said in the conversation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from gateway.inbound.files import FILES, FileRefused, IncomingFile, conversation_dir, files_of, save

if TYPE_CHECKING:
    from gateway.config.settings import Config
    from gateway.contract.adapter import Adapter
    from gateway.messages.turn import Turn

log = structlog.get_logger(__name__)


async def take_files(turn: Turn, adapter: Adapter | None, config: Config) -> bool:
    """Save the files of the turn's message and give the turn their paths; say why any
    could not be. False when nothing is left to answer (no text, no file saved)."""
    wanted = files_of(turn.event.metadata)
    if not wanted:
        return True
    directory = conversation_dir(config.files_dir, turn.route)
    saved: list[IncomingFile] = []
    for file in wanted:
        try:
            if file.path is not None:  # uploaded straight into place (the web chat)
                if directory.resolve() not in Path(file.path).resolve().parents:
                    raise FileRefused(f"{file.name} was not taken: it is not in this "
                                      f"conversation's files.")
                saved.append(file)
                continue
            if adapter is None:
                raise FileRefused(f"{file.name} was not saved: its platform is not running.")
            saved.append(await save(file, await adapter.download(file), directory,
                                    config.attachments.max_bytes))
        except FileRefused as exc:
            await turn.reply(str(exc), kind="system")
        except Exception as exc:
            log.warning("file_not_saved", kind=file.kind, error=repr(exc)[:300])
            await turn.reply(f"{file.name} could not be read from {turn.route.platform}; "
                             f"send it again.", kind="system")
    metadata = {**turn.event.metadata, FILES: [f.to_dict() for f in saved]}
    turn.event = replace(turn.event, metadata=metadata)
    return bool(saved or turn.event.text.strip())
