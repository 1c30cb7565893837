"""An OpenTelemetry SDK tracer provider with an in-memory exporter (and a meter provider
with an in-memory reader), for one test: the API lets a process set its provider once,
so its guard is reset around the test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


@contextmanager
def _installed(api: ModuleType, name: str, provider: Any) -> Iterator[None]:
    """`provider` as the API module's global `_{name}` (`TRACER_PROVIDER`,
    `METER_PROVIDER`) for the block, its set-once guard reset; both restored after."""
    saved = getattr(api, f"_{name}"), getattr(api, f"_{name}_SET_ONCE")
    setattr(api, f"_{name}_SET_ONCE", Once())
    getattr(api, f"set_{name.lower()}")(provider)
    try:
        yield
    finally:
        provider.shutdown()
        setattr(api, f"_{name}", saved[0])
        setattr(api, f"_{name}_SET_ONCE", saved[1])


@contextmanager
def in_memory_spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with _installed(trace, "TRACER_PROVIDER", provider):
        yield exporter


@contextmanager
def in_memory_metrics() -> Iterator[InMemoryMetricReader]:
    """The same for a meter provider whose metrics a test reads back."""
    from opentelemetry.metrics import _internal as metrics_api

    reader = InMemoryMetricReader()
    with _installed(metrics_api, "METER_PROVIDER", MeterProvider(metric_readers=[reader])):
        yield reader
