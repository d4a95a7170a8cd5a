"""Bandit environments for the learning ladder (docs/learning.md): tasks whose best answer is known, so a run that
does not learn them points at the RL machinery, not at the model's capacity."""
