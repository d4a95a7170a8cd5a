"""The trainer: model loading, LoRA, FSDP2, losses, the RL loop (`rl.py`), the SFT loop (`sft.py`), weight
publishing (`publish.py`) and checkpoints (`ckpt.py`). RL and SFT share one engine (`engine.py`)."""
