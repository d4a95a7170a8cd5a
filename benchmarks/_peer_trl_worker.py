"""TRL side of `benchmarks/peer_trl.py` (runs in the TRL venv): GRPOTrainer on GridSim's first turn.

Writes OUT/model (the trained model, loadable by prime-rl's inference server) and OUT/summary.json (training wall
time, per-step mean reward, the GRPOConfig values that matter for the comparison).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import time
from pathlib import Path

TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def first_submission_score(text: str, prices: list[float]) -> float:
    """GridSim score of the first `<tool_call>` in `text` (0 when there is none, it does not parse, or it is invalid)."""
    from prime_rl.envs.base import Task
    from prime_rl.envs.gridsim.env import GridSimEpisode

    m = TOOL_CALL.search(text)
    if m is None:
        return 0.0
    try:
        call = json.loads(m.group(1))
    except json.JSONDecodeError:
        return 0.0
    if not isinstance(call, dict):
        return 0.0
    ep = GridSimEpisode(Task("t", "train", 0, []), prices)
    ep.call_tool(str(call.get("name")), call.get("arguments") or {})
    return ep.verify().reward


def main() -> None:
    p = argparse.ArgumentParser()
    for name, typ in (("model", str), ("out", str), ("seed", int), ("steps", int), ("lr", float),
                      ("temperature", float), ("prompts-per-step", int), ("group-size", int),
                      ("max-completion-tokens", int), ("data-dir", str)):  # fmt: skip
        p.add_argument(f"--{name}", type=typ, default=None)
    a = p.parse_args()
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from prime_rl.envs.gridsim.env import GridSimEnv
    from prime_rl.models.renderer import make_renderer

    torch.manual_seed(a.seed)
    out = Path(a.out)
    tok = AutoTokenizer.from_pretrained(a.model)
    renderer = make_renderer(tok, "qwen3", False)
    env = GridSimEnv(data_dir=a.data_dir)
    rows = []
    for t in env.tasks("train"):
        ids = list(renderer.render_ids(t.messages, tools=t.tools, add_generation_prompt=True))
        text = tok.decode(ids)
        assert tok(text, add_special_tokens=False)["input_ids"] == ids, "prompt does not round-trip the tokenizer"
        rows.append({"prompt": text, "prices": t.info["prices"]})
    ds = Dataset.from_list(rows)

    def reward(prompts, completions, prices, **_):
        return [first_submission_score(c, pr) for c, pr in zip(completions, prices, strict=True)]

    n = a.prompts_per_step * a.group_size
    cfg = GRPOConfig(
        output_dir=str(out / "trl"), max_steps=a.steps, learning_rate=a.lr, lr_scheduler_type="cosine",
        warmup_steps=0, max_grad_norm=1.0, per_device_train_batch_size=n, gradient_accumulation_steps=1,
        num_generations=a.group_size, temperature=a.temperature, top_p=1.0, max_completion_length=a.max_completion_tokens,
        beta=0.0, seed=a.seed, data_seed=a.seed, use_cpu=True, bf16=False, logging_steps=1, save_strategy="no",
        report_to="none", remove_unused_columns=False, dataloader_num_workers=0,
    )  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=cfg, train_dataset=ds, processing_class=tok)
    t0 = time.monotonic()
    trainer.train()
    train_s = time.monotonic() - t0
    trainer.save_model(str(out / "model"))
    for f in Path(a.model).iterdir():  # tokenizer, chat template, generation config as the start model has them
        if f.is_file() and not (out / "model" / f.name).exists():
            shutil.copy(f, out / "model" / f.name)
    (out / "model" / "STABLE").touch()
    hist = [h for h in trainer.state.log_history if "reward" in h]
    settings = {k: getattr(cfg, k, None) for k in ("loss_type", "scale_rewards", "beta", "epsilon", "num_iterations",
                                                    "steps_per_generation", "temperature", "learning_rate",
                                                    "max_completion_length", "num_generations", "mask_truncated_completions",
                                                    "importance_sampling_level")}  # fmt: skip
    settings["trl_version"] = trl.__version__
    (out / "summary.json").write_text(json.dumps(
        {"train_s": train_s, "train_reward": [h["reward"] for h in hist], "settings": settings}, indent=1, default=str))


if __name__ == "__main__":
    main()
