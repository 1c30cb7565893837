"""Maintenance run by the elected leader among all worker processes (APScheduler clock,
database decides): the reaper, worker-table pruning, alerts and retention (`tasks`)."""
