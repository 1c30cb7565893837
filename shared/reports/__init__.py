"""Reports: definitions, fan-out runs of chunk jobs, exactly-once assembly."""
