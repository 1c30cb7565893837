"""History: finished attempts rolled up into per-minute buckets for the History charts."""
