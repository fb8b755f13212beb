"""An OpenTelemetry collector's OTLP/HTTP receiver on 127.0.0.1, keeping what it is
sent in memory: the spans (flattened, one :class:`ReceivedSpan` each) and the metric
names and points.

As strict as the collector's own receiver: only ``POST`` to ``/v1/traces`` and
``/v1/metrics``; a body in protobuf (``application/x-protobuf``, gzip or deflate as
``Content-Encoding`` says) — JSON it also takes, as the collector does, but the
exporter Homing uses speaks protobuf; an unknown content type is 415, a body that does
not decode is 400. The answer is an (empty) export response in the request's encoding.
"""

from __future__ import annotations

import asyncio
import gzip
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.fakes.local_server import LocalServer

PROTOBUF = "application/x-protobuf"
JSON_TYPE = "application/json"


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    #: the sending process's resource (``service.name``, ``process.pid``…)
    resource: dict[str, Any]
    start_ns: int


@dataclass
class FakeCollector(LocalServer):
    spans: list[ReceivedSpan] = field(default_factory=list)
    #: metric name → the attribute sets and values of its points, as last received
    metrics: dict[str, list[tuple[dict[str, Any], float]]] = field(default_factory=dict)
    #: the requests it refused, and why (a test can assert there were none)
    refused: list[str] = field(default_factory=list)

    def _build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/v1/traces", self._traces)
        app.router.add_route("*", "/v1/metrics", self._metrics)
        return app

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        return sorted((s for s in self.spans if s.trace_id == trace_id),
                      key=lambda s: s.start_ns)

    def named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    async def wait_for(self, name: str, timeout: float = 30, **attributes: Any
                       ) -> ReceivedSpan:
        """The first span called ``name`` with these attributes, once it has come."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            for span in self.named(name):
                if all(span.attributes.get(k) == v for k, v in attributes.items()):
                    return span
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"no span {name} {attributes} in {len(self.spans)} spans")
            await asyncio.sleep(0.02)

    # the receiver ---------------------------------------------------------------

    async def _traces(self, request: web.Request) -> web.Response:
        message = trace_service_pb2.ExportTraceServiceRequest()
        refusal = await self._read(request, message)
        if refusal is not None:
            return refusal
        for resource_spans in message.resource_spans:
            resource = _attributes(resource_spans.resource.attributes)
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append(ReceivedSpan(
                        name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        attributes=_attributes(span.attributes), resource=resource,
                        start_ns=span.start_time_unix_nano))
        return _answer(request, trace_service_pb2.ExportTraceServiceResponse())

    async def _metrics(self, request: web.Request) -> web.Response:
        message = metrics_service_pb2.ExportMetricsServiceRequest()
        refusal = await self._read(request, message)
        if refusal is not None:
            return refusal
        for resource_metrics in message.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    points = getattr(metric, kind).data_points if kind else []
                    self.metrics[metric.name] = [
                        (_attributes(p.attributes),
                         p.as_double if p.WhichOneof("value") == "as_double" else p.as_int)
                        for p in points]
        return _answer(request, metrics_service_pb2.ExportMetricsServiceResponse())

    async def _read(self, request: web.Request, message: Any) -> web.Response | None:
        if request.method != "POST":
            self.refused.append(f"{request.method} {request.path}")
            return web.Response(status=405, text="405 method not allowed, supported: [POST]")
        kind = request.content_type
        if kind not in (PROTOBUF, JSON_TYPE):
            self.refused.append(f"content type {kind}")
            return web.Response(status=415, text=f"415 unsupported media type, supported: "
                                                 f"[{JSON_TYPE}, {PROTOBUF}]")
        body = await request.read()
        try:
            encoding = request.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            elif encoding:
                raise ValueError(f"unsupported Content-Encoding {encoding!r}")
            if kind == PROTOBUF:
                message.ParseFromString(body)
            else:
                json_format.Parse(body, message)
        except (DecodeError, json_format.ParseError, ValueError, OSError, zlib.error) as exc:
            self.refused.append(f"body: {exc}")
            return web.Response(status=400, text=f"400 bad request: {exc}")
        return None


def _answer(request: web.Request, response: Any) -> web.Response:
    if request.content_type == JSON_TYPE:
        return web.Response(body=json_format.MessageToJson(response), content_type=JSON_TYPE)
    return web.Response(body=response.SerializeToString(), content_type=PROTOBUF)


def _attributes(pairs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        value = pair.value
        kind = value.WhichOneof("value")
        out[pair.key] = getattr(value, kind) if kind else None
    return out
