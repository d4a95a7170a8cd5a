"""The RL trainer end to end on a synthetic batch stream (tiny model, CPU): loss falls, weights publish and load,
micro-batch cut does not matter, resume is bit-exact, LoRA publishes merged weights or an adapter."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tests.trainer.helpers import full, make_samples, pack, trainer_config, write_stream

from prime_rl.config.trainer import DPPOKLLossConfig
from prime_rl.monitor.metrics import read_metrics
from prime_rl.trainer import rl
from prime_rl.trainer.engine import Engine, EngineConfig
from prime_rl.trainer.loss import dppo_kl_loss


@pytest.fixture(scope="module")
def samples(tiny_model_dir):
    return make_samples(tiny_model_dir, n=8, seed=0, temperature=0.9)


def test_rl_loss_falls_and_publishes_loadable_weights(tiny_model_dir, samples, tmp_path):
    from transformers import AutoModelForCausalLM

    run = tmp_path / "run"
    write_stream(run, {s: samples for s in range(1, 7)})
    cfg = trainer_config(tiny_model_dir, run, max_steps=6, weights={"keep_last": 2})
    rl.run(cfg)
    rows = read_metrics(run, "trainer")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert rows[0]["mismatch_kl"] < 1e-6  # step 1: trainer = the model that produced inference_logprobs
    assert rows[0]["loss"] == pytest.approx(-sum(s["advantages"].sum() for s in samples) / 48 + 0.0, abs=1e-4)
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.5, [r["loss"] for r in rows]
    for key in ("entropy", "masked_frac_pos", "masked_frac_neg", "grad_norm", "lr", "tokens_per_s", "peak_mem_gib"):
        assert key in rows[-1]
    versions = sorted(p.name for p in (run / "weights").iterdir())
    assert versions == ["step_5", "step_6"]  # keep_last = 2
    assert (run / "weights" / "step_6" / "STABLE").is_file()
    model = AutoModelForCausalLM.from_pretrained(str(run / "weights" / "step_6"))
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    pub = load_file(str(run / "weights" / "step_6" / "model.safetensors"))
    assert set(pub) == set(base)
    assert not torch.equal(pub["model.layers.0.mlp.up_proj.weight"], base["model.layers.0.mlp.up_proj.weight"])
    assert json.loads((run / "weights/step_6/config.json").read_text())["hidden_size"] == model.config.hidden_size
    assert (run / "weights" / "step_6" / "tokenizer.json").is_file()
    assert (run / "logs" / "trainer.log").read_text().count("tok/s") == 6


def _engine(model_dir, run, **over):
    cfg = trainer_config(model_dir, run, **over)
    return Engine(EngineConfig.from_config(cfg)), cfg


def test_normalisation_same_for_1_or_3_micro_batches(tiny_model_dir, samples, tmp_path):
    total = int(sum(s["loss_mask"].sum() for s in samples))
    results = []
    for n_micro in (1, 3):
        eng, cfg = _engine(tiny_model_dir, tmp_path / f"r{n_micro}")
        try:
            m = eng.train_step(pack(samples, n_micro), total, dppo_kl_loss, cfg.loss)
            # compare gradients (Adam's first step is ~lr*sign(g) and would amplify float noise on tiny entries)
            params = {n: full(p.grad).clone() for n, p in eng.model.named_parameters()}
        finally:
            eng.close()
        results.append((m, params))
    (m1, p1), (m3, p3) = results
    assert m1["loss"] == pytest.approx(m3["loss"], abs=1e-6)
    assert m1["grad_norm"] == pytest.approx(m3["grad_norm"], rel=1e-5)
    for k in p1:
        torch.testing.assert_close(p1[k], p3[k], atol=1e-7, rtol=1e-4)


def test_resume_is_bit_exact(tiny_model_dir, samples, tmp_path):
    stream = {s: samples[(s % 2) * 4 : (s % 2) * 4 + 4] for s in range(1, 7)}
    sched = {"type": "cosine", "warmup_steps": 2, "min_lr_ratio": 0.1}
    full, split = tmp_path / "full", tmp_path / "split"
    write_stream(full, stream)
    rl.run(trainer_config(tiny_model_dir, full, max_steps=6, scheduler=sched))
    # the split run stops after step 3 (its data runs out; same max_steps, so the same lr schedule) ...
    write_stream(split, {s: stream[s] for s in (1, 2, 3)})
    with pytest.raises(TimeoutError, match="step_4"):
        rl.run(trainer_config(tiny_model_dir, split, max_steps=6, scheduler=sched, ckpt={"interval": 3},
                              data_timeout_s=0.2))
    write_stream(split, {s: stream[s] for s in (4, 5, 6)})
    assert (split / "checkpoints" / "step_3" / "trainer" / "STABLE").is_file()
    # an incomplete checkpoint (no STABLE) must be ignored by resume_step = -1
    (split / "checkpoints" / "step_5" / "trainer").mkdir(parents=True)
    rl.run(trainer_config(tiny_model_dir, split, max_steps=6, scheduler=sched, ckpt={"resume_step": -1}))
    a = load_file(str(full / "weights" / "step_6" / "model.safetensors"))
    b = load_file(str(split / "weights" / "step_6" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    ra, rb = read_metrics(full, "trainer"), read_metrics(split, "trainer")
    assert [r["step"] for r in rb] == [1, 2, 3, 4, 5, 6]
    assert len({r["lr"] for r in ra}) == 5  # warmup + cosine (steps 2, 3 both at peak): the schedule state matters
    assert [r["loss"] for r in ra] == [r["loss"] for r in rb]
    assert [r["lr"] for r in ra] == [r["lr"] for r in rb]


@pytest.mark.parametrize("fsdp", [False, True])
def test_resume_from_a_checkpoint_taken_before_any_update(tiny_model_dir, samples, tmp_path, fsdp):
    """Steps 1-2 have no loss token (every rollout masked), so AdamW never stepped when step 2 is checkpointed. Before,
    that checkpoint held an empty optimizer state and resuming failed ('Missing key in checkpoint state_dict:
    optim.state...step'); now it resumes and steps 3-4 give the uninterrupted run's weights bit for bit."""
    masked = [{**s, "loss_mask": np.zeros_like(s["loss_mask"])} for s in samples[:4]]
    stream = {1: masked, 2: masked, 3: samples[:4], 4: samples[4:]}
    over = dict(max_steps=4, scheduler={"warmup_steps": 3}, model={"name": str(tiny_model_dir), "fsdp": fsdp})
    full, split = tmp_path / "full", tmp_path / "split"
    write_stream(full, stream)
    rl.run(trainer_config(tiny_model_dir, full, **over))
    write_stream(split, {s: stream[s] for s in (1, 2)})
    with pytest.raises(TimeoutError, match="step_3"):
        rl.run(trainer_config(tiny_model_dir, split, ckpt={"interval": 2}, data_timeout_s=0.2, **over))
    assert (split / "checkpoints" / "step_2" / "trainer" / "STABLE").is_file()
    write_stream(split, {s: stream[s] for s in (3, 4)})
    rl.run(trainer_config(tiny_model_dir, split, ckpt={"resume_step": -1}, **over))
    ra, rb = read_metrics(full, "trainer"), read_metrics(split, "trainer")
    assert [r["step"] for r in rb] == [1, 2, 3, 4]
    assert [r["skipped_update"] for r in ra] == [r["skipped_update"] for r in rb] == [1.0, 1.0, 0.0, 0.0]
    assert [r["lr"] for r in ra] == [r["lr"] for r in rb]  # the schedule advanced through the skipped steps
    assert [r["loss"] for r in ra] == [r["loss"] for r in rb]
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    for step in (3, 4):
        a = load_file(str(full / "weights" / f"step_{step}" / "model.safetensors"))
        b = load_file(str(split / "weights" / f"step_{step}" / "model.safetensors"))
        assert all(torch.equal(a[k], b[k]) for k in a), step
    assert not all(torch.equal(a[k], base[k]) for k in a)  # steps 3-4 trained


@pytest.mark.parametrize("amsgrad", [False, True])
def test_adamw_state_created_up_front_steps_like_the_lazy_one(amsgrad):
    """`init_adamw_state` (called by `build_optimizer`) must give the very state AdamW creates at its first step:
    same keys, dtypes and devices, and bit-identical parameters and moments after three steps."""
    from torch import nn

    from prime_rl.trainer.optim import init_adamw_state

    gen = torch.Generator().manual_seed(0)
    init = [torch.randn(5, 3, generator=gen), torch.randn(7, generator=gen)]
    grads = [[torch.randn(t.shape, generator=gen) for t in init] for _ in range(3)]
    runs = []
    for eager in (False, True):
        ps = [nn.Parameter(t.clone()) for t in init]
        opt = torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, amsgrad=amsgrad)
        if eager:
            init_adamw_state(opt)
            assert all(opt.state[p]["step"].item() == 0 for p in ps)
        for g in grads:
            for p, gi in zip(ps, g, strict=True):
                p.grad = gi.clone()
            opt.step()
        runs.append((ps, [opt.state[p] for p in ps]))
    (pa, sa), (pb, sb) = runs
    assert all(torch.equal(a, b) for a, b in zip(pa, pb, strict=True))
    for a, b in zip(sa, sb, strict=True):
        assert list(a) == list(b)
        for k in a:
            assert (a[k].dtype, a[k].device) == (b[k].dtype, b[k].device) and torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("fsdp", [False, True])
def test_resume_from_an_older_checkpoint_without_optimizer_state(tiny_model_dir, samples, tmp_path, fsdp):
    """A checkpoint written by the code before `init_adamw_state`, after skipped steps only, holds no AdamW state at
    all: it loads too (zero moments, as AdamW's first update would create them; a warning says so) and the next
    step gives the uninterrupted engine's weights."""
    import dataclasses

    from torch.distributed.checkpoint import FileSystemReader

    total = int(sum(s["loss_mask"].sum() for s in samples))
    masked = [dataclasses.replace(mb, loss_mask=np.zeros_like(mb.loss_mask)) for mb in pack(samples, 1)]
    over = dict(model={"name": str(tiny_model_dir), "fsdp": fsdp}, scheduler={"warmup_steps": 3})
    eng, cfg = _engine(tiny_model_dir, tmp_path / "r", **over)
    try:
        eng.train_step(masked, 0, dppo_kl_loss, cfg.loss)
        eng.optimizer.state.clear()  # what the older code held here (AdamW never stepped)
        path = eng.maybe_checkpoint(1, force=True)
        eng.train_step(pack(samples, 1), total, dppo_kl_loss, cfg.loss)
        want = {n: full(p).detach().clone() for n, p in eng.model.named_parameters()}
    finally:
        eng.close()
    assert not [k for k in FileSystemReader(str(path / "dcp")).read_metadata().state_dict_metadata
                if k.startswith("optim.state.")]  # fmt: skip
    eng, cfg = _engine(tiny_model_dir, tmp_path / "r", ckpt={"resume_step": 1}, **over)
    try:
        eng.maybe_resume()
        assert eng.step == 1 and all(eng.optimizer.state[p]["step"].item() == 0 for p in eng.params)
        eng.train_step(pack(samples, 1), total, dppo_kl_loss, cfg.loss)
        got = {n: full(p).detach() for n, p in eng.model.named_parameters()}
    finally:
        eng.close()
    assert all(torch.equal(want[n], got[n]) for n in want)


def test_lora_trains_only_adapters_and_publishes_merged_or_adapter(tiny_model_dir, samples, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = tmp_path / "run"
    lora = {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj", "down_proj"]}
    eng, cfg = _engine(tiny_model_dir, run, model={"lora": lora}, optim={"lr": 5e-2})
    total = int(sum(s["loss_mask"].sum() for s in samples))
    try:
        names = [n for n, p in eng.model.named_parameters() if p.requires_grad]
        assert names and all("lora_" in n for n in names)
        for _ in range(2):
            eng.train_step(pack(samples, 2), total, dppo_kl_loss, DPPOKLLossConfig())
        eng.publish(1)
        eng.cfg.weights.format = "adapter"
        eng.publish(2)
        ids = torch.tensor([samples[0]["input_ids"].tolist()])
        with torch.no_grad():
            ref = eng.model(input_ids=ids).logits
    finally:
        eng.close()
    merged = AutoModelForCausalLM.from_pretrained(str(run / "weights" / "step_1"))
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, ref, atol=1e-5, rtol=0)
        base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
        assert not torch.allclose(base(input_ids=ids).logits, ref, atol=1e-3)  # the adapters did change the model
    pub, orig = load_file(str(run / "weights/step_1/model.safetensors")), load_file(str(tiny_model_dir / "model.safetensors"))
    assert set(pub) == set(orig)
    assert torch.equal(pub["model.layers.0.self_attn.k_proj.weight"], orig["model.layers.0.self_attn.k_proj.weight"])
    assert (run / "weights" / "step_2" / "adapter_config.json").is_file()
    with torch.no_grad():
        adapted = PeftModel.from_pretrained(base, str(run / "weights" / "step_2"))
        torch.testing.assert_close(adapted(input_ids=ids).logits, ref, atol=1e-5, rtol=0)


def test_batch_from_wrong_world_size_is_rejected(tiny_model_dir, samples, tmp_path):
    from prime_rl.transport.batch import BatchFormatError

    run = tmp_path / "run"
    write_stream(run, {1: samples}, world_size=2)  # rank_0.bin says world_size 2, the trainer has 1 process
    with pytest.raises(BatchFormatError, match="num_train_ranks"):
        rl.run(trainer_config(tiny_model_dir, run, max_steps=1))


def test_missing_batch_times_out_naming_the_file(tiny_model_dir, tmp_path):
    with pytest.raises(TimeoutError, match=r"step_1/rank_0.bin"):
        rl.run(trainer_config(tiny_model_dir, tmp_path / "run", max_steps=1, data_timeout_s=0.2))


def test_activation_checkpointing_gives_the_same_gradients(tiny_model_dir, samples, tmp_path):
    total = int(sum(s["loss_mask"].sum() for s in samples))
    grads = []
    for ac in (False, True):
        eng, cfg = _engine(tiny_model_dir, tmp_path / f"ac{ac}", model={"activation_checkpointing": ac})
        try:
            assert eng.model.is_gradient_checkpointing == ac
            eng.train_step(pack(samples, 2), total, dppo_kl_loss, cfg.loss)
            grads.append({n: full(p.grad).clone() for n, p in eng.model.named_parameters()})
        finally:
            eng.close()
    for k in grads[0]:
        torch.testing.assert_close(grads[0][k], grads[1][k], atol=1e-7, rtol=1e-5)


def test_zero_temperature_loss_token_is_rejected(tiny_model_dir, samples, tmp_path):
    mbs = pack(samples[:2], 1)
    mbs[0].temperature[:] = 0.0
    eng, cfg = _engine(tiny_model_dir, tmp_path / "run")
    try:
        with pytest.raises(ValueError, match="temperature <= 0"):
            eng.train_step(mbs, 12, dppo_kl_loss, cfg.loss)
        mbs[0].temperature[~mbs[0].loss_mask] = 0.0  # prompt tokens at 0 are fine: their logprob is not used
        mbs[0].temperature[mbs[0].loss_mask] = 0.9
        m = eng.train_step(mbs, 12, dppo_kl_loss, cfg.loss)
        assert np.isfinite(m["loss"]) and np.isfinite(m["grad_norm"])
    finally:
        eng.close()


def test_step_without_loss_tokens_leaves_weights_unchanged(tiny_model_dir, samples, tmp_path):
    """An all-masked step (every rollout failed) must not move the weights through AdamW's momentum."""
    import dataclasses

    eng, cfg = _engine(tiny_model_dir, tmp_path / "r", optim={"lr": 1e-2})
    try:
        total = int(sum(s["loss_mask"].sum() for s in samples))
        eng.train_step(pack(samples, 1), total, dppo_kl_loss, cfg.loss)  # builds AdamW momentum
        masked = [dataclasses.replace(mb, loss_mask=np.zeros_like(mb.loss_mask)) for mb in pack(samples, 1)]
        before = {n: full(p).clone() for n, p in eng.model.named_parameters()}
        m = eng.train_step(masked, 0, dppo_kl_loss, cfg.loss)
        after = {n: full(p) for n, p in eng.model.named_parameters()}
        assert m["skipped_update"] == 1.0 and m["loss_tokens"] == 0
        for n in before:
            assert torch.equal(before[n], after[n]), n
        assert eng.step == 2  # the step still counts (version N is still published by the loop)
    finally:
        eng.close()
