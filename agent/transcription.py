"""Voice notes as words: an OpenAI-compatible ``/audio/transcriptions`` endpoint
(``agent.transcription``), through the official client. Best effort: when it
fails the model still gets the file, and the log says why."""

from __future__ import annotations

import asyncio
from pathlib import Path

import openai
import structlog

from gateway.config.settings import TranscriptionConfig, secret
from gateway.inbound.files import IncomingFile

log = structlog.get_logger(__name__)


class Transcriber:
    def __init__(self, config: TranscriptionConfig) -> None:
        self.config = config
        self._client = openai.AsyncOpenAI(base_url=config.base_url,
                                          api_key=secret(config.api_key) or "not-needed",
                                          timeout=config.timeout_seconds, max_retries=1)

    @staticmethod
    def wants(file: IncomingFile) -> bool:
        return bool(file.path) and (file.kind == "voice" or (file.mime or "").startswith("audio/"))

    async def transcript(self, file: IncomingFile) -> str | None:
        assert file.path is not None
        try:
            audio = await asyncio.to_thread(Path(file.path).read_bytes)  # up to 20 MB
            result = await self._client.audio.transcriptions.create(
                model=self.config.model, file=(file.name, audio))
        except (OSError, openai.APIError) as exc:
            log.warning("transcription_failed", file=file.name, error=str(exc)[:300])
            return None
        return (result.text or "").strip() or None

    async def close(self) -> None:
        await self._client.close()
