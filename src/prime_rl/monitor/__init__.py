"""Console step lines, per-process logs, metrics.jsonl and plots."""
