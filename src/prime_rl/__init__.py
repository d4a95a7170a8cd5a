"""prime-rl: asynchronous reinforcement-learning post-training of LLM agents."""

__version__ = "0.1.0"
