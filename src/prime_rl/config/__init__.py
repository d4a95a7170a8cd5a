"""Pydantic configuration of every prime-rl command; no heavy imports here."""
