"""Safety valves shared through the database: rate limits and circuit breakers."""
