"""Job secrets: values an app hands to `enqueue(..., secrets={...})` that are stored only
sealed (Fernet: AES-128-CBC + HMAC-SHA256, from the `cryptography` library), opened by
the worker for `ctx.secrets`, shown to no one but an admin who reveals one (audited).
"""
