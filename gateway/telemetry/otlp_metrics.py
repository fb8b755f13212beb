"""The Prometheus metrics (gateway/telemetry/metrics.py) exported over OTLP too, when
``telemetry.otlp_endpoint`` is set and OpenTelemetry is installed.

One set of metrics, read two ways: ``/metrics`` renders the registry for a Prometheus
scrape, and here an OpenTelemetry meter reads the same registry at each export —
counters as counters, gauges as gauges, a histogram's sum, count and buckets as
counters of their own (``…_sum``, ``…_count``, ``…_bucket`` with ``le``), as a
Prometheus scrape would see them. Nothing is counted twice and nothing here is imported
unless it is on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from gateway.tracing import EXPORT_TIMEOUT_SECONDS, otel_resource

log = structlog.get_logger(__name__)

#: how often the meter reads the registry and sends what it read, unless
#: ``OTEL_METRIC_EXPORT_INTERVAL`` (milliseconds, OpenTelemetry's own variable) says
EXPORT_SECONDS = 15.0


def export_seconds() -> float:
    """The export interval: OpenTelemetry's variable where it is set and valid."""
    try:
        millis = float(os.environ["OTEL_METRIC_EXPORT_INTERVAL"])
    except (KeyError, ValueError):
        return EXPORT_SECONDS
    return millis / 1000 if millis > 0 else EXPORT_SECONDS


class OtlpMetrics:
    """A running export of ``registry``; :meth:`stop` sends the last reading."""

    def __init__(self, provider: Any) -> None:
        self._provider = provider

    def stop(self) -> None:
        self._provider.shutdown()


def export_metrics(settings: Any, registry: Any, *, reader: Any = None,
                   refresh: Callable[[], None] | None = None) -> OtlpMetrics | None:
    """Export ``registry`` to ``settings.otlp_endpoint`` (or to a test's ``reader``);
    None when off or not installed. ``refresh`` runs before each reading (the gauges
    the daemon sets when /metrics is asked)."""
    if not (settings.otlp_endpoint or reader is not None):
        return None
    try:
        from opentelemetry.metrics import Observation
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    except ImportError:
        return None  # (tracing says so once: gateway/tracing.py)
    if reader is None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=settings.otlp_endpoint.rstrip("/") + "/v1/metrics",
                               timeout=EXPORT_TIMEOUT_SECONDS),
            export_interval_millis=export_seconds() * 1000)
    provider = MeterProvider(resource=otel_resource(settings), metric_readers=[reader])
    meter = provider.get_meter("homing")

    def samples(wanted: Callable[[str, str], bool]) -> Iterable[Observation]:
        for family in registry.collect():
            for sample in family.samples:
                if wanted(family.type, sample.name):
                    yield Observation(sample.value, dict(sample.labels))

    for family in registry.collect():
        name, kind = family.name, family.type
        if kind == "counter":
            names = {f"{name}_total"}
            instrument: Any = meter.create_observable_counter
        elif kind == "gauge":
            names = {name}
            instrument = meter.create_observable_gauge
        elif kind == "histogram":
            for part in ("_sum", "_count", "_bucket"):
                _observe(meter.create_observable_counter, name + part, family.documentation,
                         samples, {name + part}, refresh)
            continue
        else:
            continue
        _observe(instrument, name, family.documentation, samples, names, refresh)
    log.info("metrics_exporting", endpoint=settings.otlp_endpoint or "(in process)")
    return OtlpMetrics(provider)


def _observe(instrument: Any, name: str, description: str,
             samples: Callable[[Callable[[str, str], bool]], Iterable[Any]],
             names: set[str], refresh: Callable[[], None] | None) -> None:
    def read(options: Any) -> Iterable[Any]:
        if refresh is not None:
            refresh()
        return list(samples(lambda _kind, sample: sample in names))

    instrument(name, callbacks=[read], description=description)
