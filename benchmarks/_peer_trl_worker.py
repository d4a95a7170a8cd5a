"""TRL side of `benchmarks/peer_trl.py` (runs in the TRL venv): GRPOTrainer on one prime-rl environment's one-turn task.

Workloads (`--workload`): `gridsim` (GridSim's first turn; reward = the GridSim score of the first `submit_schedule`
call in the completion, 0 without a valid one), `digit` (the digit bandit) and `reverse-text`: the prompt of each
train task is exactly what prime-rl's orchestrator sends (rendered by the same renderer with the generation prompt),
the reward is the environment's own `verify` of the completion text (GridSim: of its first tool call).

Writes OUT/model (the trained model, loadable by prime-rl's inference server) and OUT/summary.json (training wall
time, seconds per optimizer step, trained tokens, peak RSS, per-step mean reward, the GRPOConfig values that matter
for the comparison).
"""

from __future__ import annotations

import argparse
import json
import re
import resource
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
                      ("max-completion-tokens", int), ("data-dir", str), ("scheduler", str), ("max-grad-norm", float),
                      ("renderer", str), ("env-args", str)):  # fmt: skip
        p.add_argument(f"--{name}", type=typ, default=None)
    p.add_argument("--workload", choices=["gridsim", "digit", "reverse-text", "reasoning-gym"], default="gridsim")
    a = p.parse_args()
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from prime_rl.envs.base import load_env
    from prime_rl.models.renderer import make_renderer

    torch.manual_seed(a.seed)
    out = Path(a.out)
    tok = AutoTokenizer.from_pretrained(a.model)
    # enable_thinking left unset: the default (off), as the prime-rl side's configs; an explicit value is refused by
    # renderers that cannot honour it (SmolLM2's template)
    renderer = make_renderer(tok, a.renderer or ("qwen3" if a.workload == "gridsim" else "auto"), None)
    env_args = json.loads(a.env_args) if a.env_args else {}
    if a.workload == "gridsim" and a.data_dir:
        env_args["data_dir"] = a.data_dir
    env = load_env({"digit": "digit-bandit"}.get(a.workload, a.workload), **env_args)
    tasks = env.tasks("train")
    rows = []
    for i, t in enumerate(tasks):
        ids = list(renderer.render_ids(t.messages, tools=t.tools or None, add_generation_prompt=True))
        text = tok.decode(ids)
        assert tok(text, add_special_tokens=False)["input_ids"] == ids, "prompt does not round-trip the tokenizer"
        rows.append({"prompt": text, "task": i})
    ds = Dataset.from_list(rows)

    def reward(prompts, completions, task, **_):
        out = []
        for c, i in zip(completions, task, strict=True):
            if a.workload == "gridsim":
                out.append(first_submission_score(c, tasks[i].info["prices"]))
            else:
                out.append(float(env.episode(tasks[i]).verify(c).reward))
        return out

    class StepClock(TrainerCallback):
        """Wall-clock seconds of every optimizer step (generation, scoring, forward/backward, optimizer)."""

        def __init__(self):
            self.times: list[float] = []
            self.t0 = 0.0

        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self.t0)

    n = a.prompts_per_step * a.group_size
    cfg = GRPOConfig(
        output_dir=str(out / "trl"), max_steps=a.steps, learning_rate=a.lr, lr_scheduler_type=a.scheduler or "cosine",
        warmup_steps=0, max_grad_norm=a.max_grad_norm if a.max_grad_norm is not None else 1.0,
        per_device_train_batch_size=n, gradient_accumulation_steps=1, num_generations=a.group_size,
        temperature=a.temperature, top_p=1.0, max_completion_length=a.max_completion_tokens, beta=0.0, seed=a.seed,
        data_seed=a.seed, use_cpu=True, bf16=False, logging_steps=1, save_strategy="no", report_to="none",
        remove_unused_columns=False, dataloader_num_workers=0,
    )  # fmt: skip
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    clock = StepClock()
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=cfg, train_dataset=ds, processing_class=tok,
                          callbacks=[clock])  # fmt: skip
    t0 = time.monotonic()
    trainer.train()
    train_s = time.monotonic() - t0
    trainer.save_model(str(out / "model"))
    for f in Path(a.model).iterdir():  # tokenizer, chat template, generation config as the start model has them
        if f.is_file() and not (out / "model" / f.name).exists():
            shutil.copy(f, out / "model" / f.name)
    (out / "model" / "STABLE").touch()
    hist = [h for h in trainer.state.log_history if "reward" in h]
    tokens = [h["num_tokens"] for h in trainer.state.log_history if "num_tokens" in h]
    settings = {k: getattr(cfg, k, None) for k in ("loss_type", "scale_rewards", "beta", "epsilon", "num_iterations",
                                                    "steps_per_generation", "temperature", "learning_rate",
                                                    "lr_scheduler_type", "max_completion_length", "num_generations",
                                                    "per_device_train_batch_size", "mask_truncated_completions",
                                                    "importance_sampling_level", "use_vllm")}  # fmt: skip
    settings["trl_version"] = trl.__version__
    (out / "summary.json").write_text(json.dumps(
        {"train_s": train_s, "step_s": clock.times, "num_tokens": tokens, "completions_per_step": n,
         "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
         "train_reward": [h["reward"] for h in hist], "settings": settings}, indent=1, default=str))  # fmt: skip


if __name__ == "__main__":
    main()
