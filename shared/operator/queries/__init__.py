"""Read models: what the dashboard's pages, the CLI and the metrics endpoint show. They
change nothing (the sign-in throttle and the commands live elsewhere)."""
