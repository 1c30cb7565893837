"""Webhooks: named endpoints with signing secrets, the SSRF guard and the delivery log."""
