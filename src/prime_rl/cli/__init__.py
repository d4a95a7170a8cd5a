"""Thin entry points: parse the config first, import heavy parts (torch, vllm) only afterwards."""
