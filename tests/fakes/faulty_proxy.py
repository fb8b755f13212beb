"""A proxy on 127.0.0.1 in front of a real server (Synapse), passing every request on
unchanged except the ones a test has told it to refuse: so a client under test meets
the real server's answers, and, when asked, a 429 or a 5xx shaped the way that server
sends them — which a real server cannot be made to answer on cue.

A refusal is scripted by method, a piece of the path and a piece of the body
(``fail_next("PUT", "/send/", status=503, containing="RW4")``); the first request that
matches takes it, ``count`` times.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from tests.fakes.local_server import LocalServer

#: hop-by-hop headers, and the ones aiohttp sets itself (the body passes on as it came,
#: compressed or not, so its Content-Encoding stays)
_DROPPED = frozenset({"host", "content-length", "transfer-encoding", "connection",
                      "keep-alive"})


@dataclass
class Refusal:
    method: str
    path_part: str
    status: int
    body: dict[str, object]
    containing: str | None
    left: int
    headers: dict[str, str] = field(default_factory=dict)


class FaultyProxy(LocalServer):
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.refusals: list[Refusal] = []
        #: (method, path, status) of every request refused, in order
        self.refused: list[tuple[str, str, int]] = []
        self._http: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fail_next(self, method: str, path_part: str, *, status: int, count: int = 1,
                  containing: str | None = None, retry_after: float | None = None) -> None:
        """The next ``count`` requests that match answer ``status``: a 429 as Matrix's
        ``M_LIMIT_EXCEEDED`` with ``retry_after_ms`` (and ``Retry-After``), anything else
        as ``M_UNKNOWN``."""
        if status == 429:
            wait = 1.0 if retry_after is None else retry_after
            body: dict[str, object] = {"errcode": "M_LIMIT_EXCEEDED",
                                       "error": "Too Many Requests",
                                       "retry_after_ms": int(wait * 1000)}
            headers = {"Retry-After": str(max(1, round(wait)))}
        else:
            body, headers = {"errcode": "M_UNKNOWN", "error": "Internal server error"}, {}
        self.refusals.append(Refusal(method.upper(), path_part, status, body, containing,
                                     count, headers))

    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._pass)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, _: web.Application) -> None:
        if self._http is not None:
            await self._http.close()

    def _refusal(self, request: web.Request, body: bytes) -> Refusal | None:
        for refusal in self.refusals:
            if (refusal.left > 0 and refusal.method == request.method
                    and refusal.path_part in request.path
                    and (refusal.containing is None
                         or refusal.containing.encode() in body)):
                return refusal
        return None

    async def _pass(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        refusal = self._refusal(request, body)
        if refusal is not None:
            refusal.left -= 1
            self.refused.append((request.method, request.path, refusal.status))
            return web.Response(status=refusal.status, text=json.dumps(refusal.body),
                                content_type="application/json", headers=refusal.headers)
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None),
                                               auto_decompress=False)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROPPED}
        async with self._http.request(request.method, self.upstream + request.rel_url.path_qs,
                                      headers=headers, data=body or None,
                                      allow_redirects=False) as answer:
            out = web.StreamResponse(status=answer.status, headers={
                k: v for k, v in answer.headers.items() if k.lower() not in _DROPPED})
            try:
                await out.prepare(request)
                async for chunk in answer.content.iter_chunked(64 * 1024):
                    await out.write(chunk)
                await out.write_eof()
            except ConnectionResetError:  # the client went (a long poll it gave up)
                pass
            return out
