"""NeMo Gym protocol: rows, a resources server for the built-in environments, and an async client."""
