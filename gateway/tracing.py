"""Traces of background work, exported over OTLP when ``telemetry.otlp_endpoint`` is set
(``pip install 'homing[otel]'``), and nothing at all — not one import of OpenTelemetry —
when it is not.

One trace per unit of background work: the message that started it, the job (or
delegation, or schedule run) beginning and ending, each notice it produced, the
ownership decision about it, each send and the record. The trace's context travels
through the store as a W3C ``traceparent`` string beside the row it belongs to (the
job's, the notice's), so a notice delivered by another instance, or after a restart,
joins the trace its work began. Spans carry ids and outcomes, never message text,
tokens or command lines unless ``telemetry.include_text`` is set.

Configured once for the process, like the logs (:func:`configure_tracing`): the
daemon at start, a test with its own exporter. Call sites ask :data:`tracing` and pay
one attribute check when tracing is off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import Any

import structlog

log = structlog.get_logger(__name__)

#: how long one export may take (OpenTelemetry's default is 10 s, retried): a collector
#: that does not answer must not hold a daemon's stop for long
EXPORT_TIMEOUT_SECONDS = 5

#: what an attribute may be: OpenTelemetry's own kinds
Attribute = str | bool | int | float


class SpanRef:
    """A span as the call site holds it: its ``traceparent`` (to store with the row it
    stands for), and attributes learnt while it is open."""

    __slots__ = ("_span", "traceparent")

    def __init__(self, span: Any, traceparent: str | None) -> None:
        self._span = span
        self.traceparent = traceparent

    def set(self, **attributes: Attribute | None) -> None:
        if self._span is not None:
            try:
                self._span.set_attributes(_clean(attributes))
            except Exception as exc:  # tracing never breaks what it watches
                _failed("span.set", exc)


_NO_SPAN = SpanRef(None, None)
#: what ``span`` is with tracing off: one object, nothing made per call
_NO_SPAN_BLOCK: AbstractContextManager[SpanRef] = nullcontext(_NO_SPAN)


class Tracing:
    """The process's tracer: off (every call does nothing) until configured.

    Nothing it does may break what it watches: a span it fails to start or end, an
    event it fails to record, is logged once and forgotten — a send between its
    attempt and its record must not be sent again because an exporter stumbled."""

    def __init__(self) -> None:
        self._off()

    def _off(self) -> None:
        self.enabled = False
        self.include_text = False
        self._tracer: Any = None
        self._propagator: Any = None
        self._provider: Any = None

    def span(self, name: str, *, parent: str | None = None,
             expected: tuple[type[BaseException], ...] = (),
             **attributes: Attribute | None) -> AbstractContextManager[SpanRef]:
        """A span around the block: a child of ``parent`` (a stored ``traceparent``), or
        of the span current in this task; its own ``traceparent`` for rows made in it.
        An exception leaving the block marks the span failed with its type's name only
        (an exception's message may quote what it was given) — unless it is one of
        ``expected``: the way the block says "not mine" (a run another instance took)."""
        if not self.enabled:
            return _NO_SPAN_BLOCK
        return _Block(self, name, parent, attributes, expected)

    def event(self, name: str, *, parent: str | None,
              **attributes: Attribute | None) -> None:
        """A span for a moment (a decision, a record) in ``parent``'s trace."""
        if not self.enabled or parent is None:
            return
        try:
            self._tracer.start_span(name, context=self._context(parent),
                                    attributes=_clean(attributes)).end()
        except Exception as exc:
            _failed(name, exc)

    def current(self) -> str | None:
        """The ``traceparent`` of the span current in this task (work started in a
        message's turn takes it as its parent); None when there is none, or tracing is
        off."""
        if not self.enabled:
            return None
        try:
            from opentelemetry import trace

            span = trace.get_current_span()
            return self._traceparent_of(span) if span.get_span_context().is_valid else None
        except Exception as exc:
            _failed("current", exc)
            return None

    def text(self, value: str) -> str | None:
        """``value`` as an attribute only where ``telemetry.include_text`` allows it."""
        return value if self.include_text else None

    def shutdown(self) -> None:
        """Send what is buffered, then stop (the daemon's last step; a test's too, so
        the next one starts with tracing off)."""
        try:
            if self._provider is not None:
                self._provider.shutdown()
        except Exception as exc:
            _failed("shutdown", exc)
        self._off()

    # inside ------------------------------------------------------------------------

    def _context(self, parent: str | None) -> Any:
        if parent is None:
            return None  # the current task's context
        return self._propagator.extract({"traceparent": parent})

    def _traceparent_of(self, span: Any) -> str | None:
        from opentelemetry import trace

        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=trace.set_span_in_context(span))
        return carrier.get("traceparent")


class _Block:
    """One span around a block, current in the task while the block runs."""

    __slots__ = ("_attributes", "_expected", "_name", "_parent", "_span", "_token",
                 "_tracing")

    def __init__(self, tracing: Tracing, name: str, parent: str | None,
                 attributes: Mapping[str, Attribute | None],
                 expected: tuple[type[BaseException], ...]) -> None:
        self._tracing, self._name, self._parent = tracing, name, parent
        self._attributes, self._expected = attributes, expected
        self._span: Any = None
        self._token: Any = None

    def __enter__(self) -> SpanRef:
        try:
            from opentelemetry import context, trace

            t = self._tracing
            self._span = t._tracer.start_span(
                self._name, context=t._context(self._parent),
                attributes=_clean(self._attributes),
                record_exception=False, set_status_on_exception=False)
            self._token = context.attach(trace.set_span_in_context(self._span))
            return SpanRef(self._span, t._traceparent_of(self._span))
        except Exception as exc:
            _failed(self._name, exc)
            return _NO_SPAN

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._span is None:
            return
        try:
            from opentelemetry import context
            from opentelemetry.trace import Status, StatusCode

            try:
                if kind is not None and not issubclass(kind, self._expected):
                    self._span.set_attribute("error.type", kind.__qualname__)
                    self._span.set_status(Status(StatusCode.ERROR, kind.__qualname__))
            finally:  # the span is no longer current in the task, whatever happened
                if self._token is not None:
                    context.detach(self._token)
            self._span.end()
        except Exception as failure:
            _failed(self._name, failure)


_complained: set[str] = set()


def _failed(where: str, exc: Exception) -> None:
    """A tracing step that failed: logged the first time for each step, then quiet (a
    broken exporter must not fill the logs either)."""
    if where not in _complained:
        _complained.add(where)
        log.warning("tracing_failed", step=where, error=type(exc).__name__,
                    hint="the work goes on untraced where tracing fails")


#: the process's tracing (off until :func:`configure_tracing`)
tracing = Tracing()


def configure_tracing(settings: Any, *, exporter: Any = None) -> bool:
    """Turn tracing on for ``telemetry`` settings with an ``otlp_endpoint`` (or a test's
    ``exporter``); True when it is on. Without OpenTelemetry installed, an endpoint is
    logged as not used, and nothing else happens."""
    if not (settings.otlp_endpoint or exporter is not None):
        return False
    try:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )
    except ImportError:
        log.warning("telemetry_not_installed", endpoint=settings.otlp_endpoint,
                    hint="pip install 'homing[otel]' to export traces and metrics")
        return False
    provider = TracerProvider(resource=otel_resource(settings),
                              sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
            endpoint=settings.otlp_endpoint.rstrip("/") + "/v1/traces",
            timeout=EXPORT_TIMEOUT_SECONDS)))
    tracing._provider = provider
    tracing._tracer = provider.get_tracer("homing")
    tracing._propagator = TraceContextTextMapPropagator()
    tracing.include_text = settings.include_text
    tracing.enabled = True
    log.info("telemetry_exporting", endpoint=settings.otlp_endpoint or "(in process)",
             service=settings.service_name, sample_ratio=settings.sample_ratio)
    return True


def otel_resource(settings: Any) -> Any:
    """What the traces and metrics say they come from: the service, and this process
    (two lives of one daemon are two processes in one trace)."""
    from opentelemetry.sdk.resources import Resource

    return Resource.create({"service.name": settings.service_name, "process.pid": os.getpid()})


def _clean(attributes: Mapping[str, Attribute | None]) -> dict[str, Attribute]:
    return {k: v for k, v in attributes.items() if v is not None}
