"""Sets the OpenTelemetry SDK up in a bench worker the way an app does in production —
a tracer provider whose spans go through a `BatchSpanProcessor`, a meter provider read
by a `PeriodicExportingMetricReader` — with exporters that drop what they are handed:
the cost of tracing and metrics up to the wire, and nothing of the wire itself.

`bench/throughput.py --otel` puts this folder first on the worker's `PYTHONPATH`, so
Python imports this module at start-up, before `jobdesk worker` runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult


class DroppedSpans(SpanExporter):
    """Accepts every batch of spans and sends nothing."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class DroppedMetrics(MetricExporter):
    """Accepts every collection of metrics and sends nothing."""

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


_resource = Resource.create({"service.name": "jobdesk-bench"})
_tracer_provider = TracerProvider(resource=_resource)
_tracer_provider.add_span_processor(BatchSpanProcessor(DroppedSpans()))
trace.set_tracer_provider(_tracer_provider)
metrics.set_meter_provider(
    MeterProvider(
        resource=_resource,
        metric_readers=[PeriodicExportingMetricReader(DroppedMetrics())],
    )
)
