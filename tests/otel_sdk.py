"""An OpenTelemetry SDK tracer provider with an in-memory exporter (and a meter provider
with an in-memory reader), for one test: the API lets a process set its provider once,
so its guard is reset around the test."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


@contextmanager
def in_memory_spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    saved = trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved


@contextmanager
def in_memory_metrics() -> Iterator[InMemoryMetricReader]:
    """The same for a meter provider whose metrics a test reads back."""
    from opentelemetry.metrics import _internal as metrics_api

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    saved = metrics_api._METER_PROVIDER, metrics_api._METER_PROVIDER_SET_ONCE
    metrics_api._METER_PROVIDER_SET_ONCE = Once()
    metrics_api.set_meter_provider(provider)
    try:
        yield reader
    finally:
        provider.shutdown()
        metrics_api._METER_PROVIDER, metrics_api._METER_PROVIDER_SET_ONCE = saved
