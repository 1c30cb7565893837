"""OpenTelemetry traces across the queue: the W3C trace context an enqueue ran in, kept
beside its job, so each attempt runs in the trace of the request that asked for it.
Optional (`pip install jobdesk[otel]`: the OpenTelemetry API only; the app brings its
SDK and exporter); without it nothing here imports OpenTelemetry.
"""
