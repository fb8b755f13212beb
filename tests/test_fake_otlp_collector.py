"""The fake collector refuses what an OpenTelemetry Collector's OTLP/HTTP receiver
refuses, so an exporter that sends something else fails here as it would there."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator

import aiohttp
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.fakes.otlp_collector import PROTOBUF, FakeCollector


@pytest.fixture
async def collector() -> AsyncIterator[FakeCollector]:
    async with FakeCollector() as fake:
        yield fake


async def test_only_a_post_of_otlp_is_taken(collector: FakeCollector) -> None:
    url = collector.endpoint + "/v1/traces"
    async with aiohttp.ClientSession() as http:
        async with http.get(url) as got:
            assert got.status == 405
        async with http.post(url, data=b"{}", headers={"Content-Type": "text/plain"}) as got:
            assert got.status == 415
        async with http.post(url, data=b"\xff\x00not protobuf",
                             headers={"Content-Type": PROTOBUF}) as got:
            assert got.status == 400
        async with http.post(collector.endpoint + "/v1/logs", data=b"",
                             headers={"Content-Type": PROTOBUF}) as got:
            assert got.status == 404
        empty = trace_service_pb2.ExportTraceServiceRequest().SerializeToString()
        async with http.post(url, data=gzip.compress(empty),
                             headers={"Content-Type": PROTOBUF,
                                      "Content-Encoding": "gzip"}) as got:
            assert got.status == 200 and got.content_type == PROTOBUF
    assert len(collector.refused) == 3 and collector.spans == []
