"""TRL side of `benchmarks/openenv_trl.py` (runs in the TRL venv): GRPOTrainer on GridSim through OpenEnv.

TRL's OpenEnv integration as TRL documents it: `environment_factory` returns an object whose public methods are the
model's tools and whose `reset`/`get_reward` start and score a rollout. Here each object holds one openenv-core
WebSocket session on `env-server openenv gridsim`'s `all` split: `reset(task_id=...)` starts the dataset row's task,
`submit_schedule` is a `call_tool` step (the server answers GridSim's result text), `get_reward` sends the final
action and returns the server's verify score. Writes OUT/summary.json (per-step wall time and mean reward).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--url", required=True, help="the OpenEnv server's split URL, e.g. http://127.0.0.1:8200/all")
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--prompts-per-step", type=int, default=2)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-completion-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--qwen3-template", action="store_true", help="use TRL's copy of Qwen3's chat template")
    a = p.parse_args()
    import httpx
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen3_chat_template

    from prime_rl.envs.openenv.client import TaskEnvClient
    from prime_rl.envs.openenv.models import TaskAction

    torch.manual_seed(a.seed)
    torch.set_num_threads(2)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    sessions: list = []

    class GridSimOpenEnv:
        """One OpenEnv session: the model's tool is `submit_schedule`; the reward is the server's verify score."""

        def __init__(self):
            self.client = TaskEnvClient(base_url=a.url).sync()
            self.client.connect()
            sessions.append(self.client)

        def reset(self, **row) -> None:
            self.client.reset(task_id=row["task_id"])

        def submit_schedule(self, schedule: list[int]) -> str:
            """Submit the battery's schedule for the day.

            Args:
                schedule: 24 integers, one per hour HE01..HE24: 1 buys 25 MWh, -1 sells one unit, 0 idles.
            """
            return self.client.step(TaskAction(tool_name="submit_schedule", arguments={"schedule": schedule})).observation.result

        def get_reward(self) -> float | None:
            return self.client.step(TaskAction(type="final")).reward

    # the rows: each task's prompt (system + user messages) and id, listed by the server's own route
    base = a.url.rsplit("/", 1)[0]
    listed = [t for t in httpx.get(a.url + "/tasks").json()["tasks"] if t["split"] == "train"]
    rows = []
    with TaskEnvClient(base_url=a.url).sync() as probe:
        for t in listed[: a.steps * a.prompts_per_step]:
            obs = probe.reset(task_id=t["task_id"]).observation
            rows.append({"prompt": obs.messages, "task_id": obs.task_id})
    tok = AutoTokenizer.from_pretrained(a.model)
    if a.qwen3_template:  # the tiny models speak Qwen3's chat format, but TRL only parses tool calls and patches
        tok.chat_template = qwen3_chat_template  # the assistant mask into templates it knows byte for byte
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    cfg = GRPOConfig(
        output_dir=str(out / "trl"), max_steps=a.steps, per_device_train_batch_size=a.prompts_per_step * a.group_size,
        num_generations=a.group_size, max_completion_length=a.max_completion_tokens, learning_rate=1e-4,
        temperature=1.0, beta=0.0, logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, bf16=False,
        seed=a.seed, max_tool_calling_iterations=1, dataloader_num_workers=0,
    )  # fmt: skip
    steps: list[dict] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.monotonic()

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                steps.append({"step": state.global_step, "reward": logs["reward"], "s": time.monotonic() - self.t0,
                              "tools_call_frequency": logs.get("tools/call_frequency")})  # fmt: skip
                print(json.dumps(steps[-1]), flush=True)

    trainer = GRPOTrainer(model=a.model, args=cfg, train_dataset=Dataset.from_list(rows), processing_class=tok,
                          environment_factory=GridSimOpenEnv, callbacks=[Timer()])  # fmt: skip
    t0 = time.monotonic()
    trainer.train()
    train_s = time.monotonic() - t0
    for c in sessions:
        c.close()
    info = httpx.get(base + "/").json()
    summary = {"trl": trl.__version__, "train_s": train_s, "steps": steps, "server": info["env"],
               "completions_per_step": a.prompts_per_step * a.group_size, "sessions": len(sessions)}  # fmt: skip
    (out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
