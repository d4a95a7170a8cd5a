"""The orchestrator: plays multi-turn rollouts against environments through the inference server, scores groups,
packs step batches for the trainer, and follows the trainer's policy versions (docs/design.md, "Processes and data flow")."""
