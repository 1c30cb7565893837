"""Retention: batched deletes of finished jobs, resolved alerts and expired reports."""
