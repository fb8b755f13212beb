"""The getUpdates transport: one update the library cannot parse must not stall the bot."""

from __future__ import annotations

import json

import structlog
from telegram import Update
from telegram._utils.types import ODVInput
from telegram.request import BaseRequest, HTTPXRequest, RequestData

log = structlog.get_logger(__name__)


class SkippingMalformedUpdates(HTTPXRequest):
    """The getUpdates transport, minus updates that cannot be parsed.

    The library parses a whole batch at once, so one malformed update would
    fail every poll and stall the bot on it for good. Each bad update is
    logged and reduced to its bare ``update_id``, so it is acknowledged and
    skipped while the rest of the batch is served.
    """

    async def do_request(self, url: str, method: str, request_data: RequestData | None = None,
                         read_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
                         write_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
                         connect_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
                         pool_timeout: ODVInput[float] = BaseRequest.DEFAULT_NONE,
                         ) -> tuple[int, bytes]:
        code, payload = await super().do_request(url, method, request_data, read_timeout,
                                                 write_timeout, connect_timeout, pool_timeout)
        if code != 200 or not url.endswith("/getUpdates"):
            return code, payload
        try:
            body = json.loads(payload)
        except ValueError:
            return code, payload
        results = body.get("result") if isinstance(body, dict) else None
        if not isinstance(results, list):
            return code, payload
        kept = []
        for raw in results:
            try:
                Update.de_json(raw, None)
                kept.append(raw)
            except Exception as exc:  # anything the library cannot read
                update_id = raw.get("update_id") if isinstance(raw, dict) else None
                log.warning("telegram_malformed_update_skipped", update_id=update_id,
                            error=repr(exc))
                if isinstance(update_id, int):
                    kept.append({"update_id": update_id})
        body["result"] = kept
        return code, json.dumps(body).encode()
