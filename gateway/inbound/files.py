"""Files people send: what the platform said about them, and saving them.

An inbound message with files is journaled with their descriptions (the
platform's reference, name, type, size), not their bytes, so taking the
message stays quick; the files are fetched when its turn runs, into
``$HOMING_HOME/files/<conversation>/``, through a temporary file renamed into
place — a file too large or unreadable leaves nothing half-saved, and the
conversation is told why.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from gateway.errors import RefusedInput
from gateway.machine.private_files import private_dir
from gateway.words.route import Route

if TYPE_CHECKING:
    from gateway.words.events import MessageEvent

log = structlog.get_logger(__name__)

#: the key of a message event's metadata that holds its files
FILES = "files"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class IncomingFile:
    #: photo, document, voice, audio, video (Telegram), attachment (Discord), upload (web)
    kind: str
    name: str
    mime: str | None
    size: int | None
    #: how the platform finds it again (Telegram's file_id, Discord's URL)
    ref: str
    #: where it was saved, once it was
    path: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IncomingFile:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})  # type: ignore[arg-type]

    def describe(self) -> str:
        size = f", {human_size(self.size)}" if self.size is not None else ""
        return f"{self.name} ({self.mime or self.kind}{size})"


class FileRefused(RefusedInput):
    """A file that is not saved; ``str(exc)`` is a sentence for the conversation."""


class NotAPath(FileRefused):
    """What was given as a file's path cannot be one (a NUL in it)."""


Download = Callable[[IncomingFile], Awaitable[AsyncIterator[bytes]]]


def files_of(metadata: dict[str, Any]) -> list[IncomingFile]:
    return [IncomingFile.from_dict(f) for f in metadata.get(FILES) or []]


def conversation_dir(root: Path, route: Route) -> Path:
    parts = [route.platform, route.chat_id] + ([route.thread_id] if route.thread_id else [])
    return root / _UNSAFE.sub("_", "-".join(parts))


async def save(file: IncomingFile, chunks: AsyncIterator[bytes], directory: Path,
               max_bytes: int) -> IncomingFile:
    """Write ``chunks`` to ``directory`` under the file's (made safe) name; raises
    FileRefused when it is over ``max_bytes``, leaving nothing behind."""
    if file.size is not None and file.size > max_bytes:
        raise FileRefused(too_large(file, max_bytes))
    private_dir(directory)
    handle, temp = tempfile.mkstemp(dir=directory, prefix=".", suffix=".part")
    partial = Path(temp)
    written = 0
    try:
        with os.fdopen(handle, "wb") as out:
            async for chunk in chunks:
                written += len(chunk)
                if written > max_bytes:
                    raise FileRefused(too_large(replace(file, size=written), max_bytes))
                out.write(chunk)
        target = _link_free_name(partial, directory,
                                 f"{time.strftime('%Y%m%d-%H%M%S')}-{safe_name(file)}")
    finally:
        partial.unlink(missing_ok=True)
    log.info("file_saved", kind=file.kind, path=str(target), bytes=written)
    return replace(file, size=written, path=str(target))


async def fetch_url(url: str, hosts: set[str], timeout: float = 120.0
                    ) -> AsyncIterator[bytes]:
    """A file from a URL the platform gave (Discord's attachment CDN), in chunks: only
    from ``hosts``, and not redirected anywhere else."""
    import aiohttp
    from yarl import URL

    if URL(url).host not in hosts:
        raise FileRefused(f"a file at {URL(url).host} was not fetched: not the platform's")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as http, \
            http.get(url, allow_redirects=False) as response:
        response.raise_for_status()
        async for chunk in response.content.iter_chunked(64 * 1024):
            yield chunk


def sendable(path: str, roots: list[Path], max_bytes: int) -> Path:
    """The file at ``path`` if it may be posted: a regular file inside one of ``roots``
    (symlinks resolved first); raises FileRefused saying why not."""
    if "\x00" in path:  # the OS would raise ValueError: no file is named so
        raise NotAPath(f"{path!r} is not a path: it holds a NUL character.")
    target = Path(path).expanduser()
    try:
        resolved = target.resolve(strict=True)
    except (OSError, RuntimeError):
        raise FileRefused(f"There is no file at {path}.") from None
    if not any(resolved == root or root in resolved.parents for root in roots):
        raise FileRefused(f"{path} is outside the directories files may be sent from "
                          f"({', '.join(map(str, roots))}; attachments.send_roots).")
    if not resolved.is_file():
        raise FileRefused(f"{path} is not a regular file.")
    size = resolved.stat().st_size
    if size > max_bytes:
        raise FileRefused(f"{path} is {human_size(size)}; files over {human_size(max_bytes)} "
                          f"are not sent (attachments.max_bytes).")
    return resolved


def too_large(file: IncomingFile, max_bytes: int) -> str:
    size = f" ({human_size(file.size)})" if file.size is not None else ""
    return (f"{file.name}{size} was not saved: files over {human_size(max_bytes)} are not "
            f"taken (attachments.max_bytes).")


def human_size(size: int | None) -> str:
    if size is None:
        return "unknown size"
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size = size / 1024  # type: ignore[assignment]
    return f"{size} bytes"


def safe_name(file: IncomingFile) -> str:
    """The file's name as it is kept: its stem and extension made safe apart (so a name
    in another script keeps its ``.png``), the stem at most 100 characters."""
    name = Path(file.name).name
    stem, dot, suffix = name.rpartition(".") if "." in name.strip(".") else (name, "", "")
    stem = _UNSAFE.sub("_", stem).strip("._")[:100] or file.kind
    suffix = _UNSAFE.sub("", suffix)[:16]
    return f"{stem}.{suffix}" if dot and suffix else stem


def _link_free_name(source: Path, directory: Path, name: str) -> Path:
    """Put ``source`` in place under ``name``, or ``name~1``…: a hard link never
    replaces a file another save put there meanwhile."""
    stem, dot, suffix = name.rpartition(".") if "." in name else (name, "", "")
    n = 0
    while True:
        target = directory / (name if n == 0 else f"{stem}~{n}{dot}{suffix}")
        try:
            os.link(source, target)
            return target
        except FileExistsError:
            n += 1


def transcript_text(event: MessageEvent) -> str:
    """A message as its conversation's transcript keeps it: its text, and its files."""
    names = [f"[file: {f.name}]" for f in files_of(event.metadata)]
    return "\n".join(t for t in (event.text, *names) if t)


def file_lines(metadata: dict[str, Any]) -> list[str]:
    """The saved files of a message, a line each, as the agent is told of them."""
    return [f"[Attached file: {f.describe()}, saved at {f.path}]"
            for f in files_of(metadata) if f.path]
