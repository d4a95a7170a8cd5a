"""Issue 13 on the trainer side: a non-finite loss or gradient never moves the weights (the step is skipped and
named), `optim.max_nonfinite_steps` of them in a row stop the run, non-finite weights are never published, a corrupt
checkpoint gives one error naming the step and the file, a batch file with a NaN on a loss token is refused, a
step with no loss tokens says on the console that its update was skipped, and a step in which no loss token on any
rank has a nonzero advantage does not update. Each test failed on the code before."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tests.trainer import faulty_loss
from tests.trainer.helpers import make_samples, pack, trainer_config, write_stream

from prime_rl.config.trainer import CustomLossConfig
from prime_rl.monitor.metrics import read_metrics
from prime_rl.trainer import rl
from prime_rl.trainer.engine import Engine, EngineConfig
from prime_rl.trainer.loss import get_loss
from prime_rl.transport.batch import BatchFormatError, StepBatch, read_batch, write_batch

LOSS = "tests.trainer.faulty_loss:faulty_loss"


@pytest.fixture(scope="module")
def samples(tiny_model_dir):
    return make_samples(tiny_model_dir, n=4, seed=1)


def _loss_cfg(**kwargs):
    faulty_loss.reset()
    return CustomLossConfig(import_path=LOSS, kwargs={"per_step": 2, **kwargs})


def _full(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor: a DTensor's (FSDP2) gathered, a plain one as is (`model.fsdp = auto` at world size 1)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _params(eng):
    return {n: _full(p).detach().clone() for n, p in eng.model.named_parameters()}


def _adam(eng):
    return {id(p): {k: _full(v).clone() for k, v in st.items()} for p, st in eng.optimizer.state.items()}


@pytest.mark.parametrize("mode", ["loss", "grad"])
def test_non_finite_step_is_skipped_and_named(tiny_model_dir, samples, tmp_path, caplog, mode):
    cfg = trainer_config(tiny_model_dir, tmp_path / "r", optim={"lr": 1e-2})
    loss_cfg = _loss_cfg(bad=[[2, 1]], mode=mode)  # step 2, micro-batch 1
    loss = get_loss(loss_cfg)
    total = int(sum(s["loss_mask"].sum() for s in samples))
    eng = Engine(EngineConfig.from_config(cfg))
    try:
        m1 = eng.train_step(pack(samples, 2), total, loss, loss_cfg)
        before, adam = _params(eng), _adam(eng)
        with caplog.at_level(logging.WARNING):
            m2 = eng.train_step(pack(samples, 2), total, loss, loss_cfg)
        after = _params(eng)
        assert m2["nonfinite"] == 1.0 and m2["skipped_update"] == 1.0 and m1["nonfinite"] == 0.0
        assert all(torch.equal(before[n], after[n]) for n in before)  # the weights did not move
        assert all(torch.equal(v, _adam(eng)[i][k]) for i, st in adam.items() for k, v in st.items())  # nor AdamW
        assert all(torch.isfinite(p).all() for p in after.values())
        where = ("non-finite loss in micro-batch(es) [1] of rank 0" if mode == "loss"
                 else "non-finite gradient (norm nan) from micro-batch(es) [1] of rank 0")  # fmt: skip
        assert f"step 2: {where}; update skipped" in caplog.text, caplog.text
        m3 = eng.train_step(pack(samples, 2), total, loss, loss_cfg)  # the next finite step trains again
        assert m3["nonfinite"] == 0.0 and eng.nonfinite_streak == 0
        assert not all(torch.equal(after[n], v) for n, v in _params(eng).items())
    finally:
        eng.close()


def test_training_diverged_stops_after_max_nonfinite_steps(tiny_model_dir, samples, tmp_path):
    from prime_rl.trainer.engine import TrainingDiverged

    run = tmp_path / "run"
    write_stream(run, {s: samples for s in range(1, 6)})
    cfg = trainer_config(tiny_model_dir, run, max_steps=5, optim={"max_nonfinite_steps": 2},
                         loss=_loss_cfg(bad=[[2, 0], [3, 1]]).model_dump())  # fmt: skip
    with pytest.raises(TrainingDiverged, match=r"2 consecutive steps \(the last: step 3, non-finite loss in micro-batch"):
        rl.run(cfg)
    rows = read_metrics(run, "trainer")
    assert [r["step"] for r in rows] == [1, 2] and rows[1]["nonfinite"] == 1.0
    assert sorted(p.name for p in (run / "weights").iterdir() if not p.name.startswith(".")) == ["step_1", "step_2"]
    assert "Update skipped: non-finite loss or gradient" in (run / "logs" / "trainer.log").read_text()


@pytest.mark.parametrize("fsdp", [True, False])
def test_non_finite_weights_are_never_published(tiny_model_dir, tmp_path, fsdp):
    from prime_rl.trainer.publish import NonFiniteWeights

    cfg = trainer_config(tiny_model_dir, tmp_path / "r", model={"name": str(tiny_model_dir), "fsdp": fsdp})
    eng = Engine(EngineConfig.from_config(cfg))
    try:
        p = dict(eng.model.named_parameters())["model.layers.1.mlp.down_proj.weight"]
        with torch.no_grad():
            (p.to_local() if fsdp else p)[0, 0] = float("inf")
        with pytest.raises(NonFiniteWeights, match=r"policy version 1: 1 weight tensor\(s\) hold NaN or inf \(model"
                                                   r"\.layers\.1\.mlp\.down_proj\.weight\)"):  # fmt: skip
            eng.publish(1)
    finally:
        eng.close()
    assert not (tmp_path / "r" / "weights" / "step_1").exists()
    assert not [q for q in (tmp_path / "r" / "weights").iterdir()]  # no temporary folder left either


@pytest.fixture(scope="module")
def two_checkpoints(tiny_model_dir, samples, tmp_path_factory):
    run = tmp_path_factory.mktemp("ckpt") / "run"
    write_stream(run, {s: samples for s in (1, 2)})
    rl.run(trainer_config(tiny_model_dir, run, max_steps=2, ckpt={"interval": 1}))
    return run


def _garble(f):
    f.write_bytes(os.urandom(f.stat().st_size))


def _cut(f):
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


@pytest.mark.parametrize(("file", "damage"), [
    ("dcp/.metadata", _garble), ("dcp/__0_0.distcp", _cut), ("dcp/__0_0.distcp", _garble),
    ("dcp/__0_0.distcp", lambda f: f.unlink()), ("rank_0.json", _cut), ("rank_0.safetensors", _cut),
])  # fmt: skip
def test_corrupt_checkpoint_names_step_file_and_the_previous_one(tiny_model_dir, two_checkpoints, tmp_path, file, damage):
    from prime_rl.trainer.ckpt import CheckpointError

    run = tmp_path / "run"
    shutil.copytree(two_checkpoints, run)
    damage(run / "checkpoints" / "step_2" / "trainer" / file)
    eng = Engine(EngineConfig.from_config(trainer_config(tiny_model_dir, run, max_steps=3, ckpt={"resume_step": -1})))
    try:
        with pytest.raises(CheckpointError) as e:
            eng.maybe_resume()
    finally:
        eng.close()
    msg = str(e.value)
    assert msg.startswith(f"checkpoint step 2 ({run / 'checkpoints' / 'step_2' / 'trainer'}) is corrupt: {file}: "), msg
    assert "resume from the previous complete checkpoint, step 1: --ckpt.resume-step 1" in msg
    assert "\n" not in msg and len(msg) < 800


def test_batch_with_nan_on_a_loss_token_is_refused(samples, tmp_path):
    mbs = pack(samples, 2)
    mbs[1].advantages[np.flatnonzero(~mbs[1].loss_mask)[0]] = np.nan  # off the loss tokens: harmless
    write_batch(tmp_path / "ok.bin", StepBatch(1, 0, 1, 10, mbs))
    read_batch(tmp_path / "ok.bin")
    mbs[1].inference_logprobs[np.flatnonzero(mbs[1].loss_mask)[2]] = np.inf
    write_batch(tmp_path / "bad.bin", StepBatch(1, 0, 1, 10, mbs))
    with pytest.raises(BatchFormatError, match=r"bad.bin: micro_batches\[1\].inference_logprobs is NaN or inf"):
        read_batch(tmp_path / "bad.bin")


def test_step_without_loss_tokens_says_the_update_was_skipped(tiny_model_dir, samples, tmp_path):
    run = tmp_path / "run"
    masked = [{**s, "loss_mask": np.zeros_like(s["loss_mask"])} for s in samples]
    write_stream(run, {1: samples, 2: masked})
    rl.run(trainer_config(tiny_model_dir, run, max_steps=2))
    lines = [ln for ln in (run / "logs" / "trainer.log").read_text().splitlines() if "Step 2/2" in ln]
    assert len(lines) == 1 and "Update skipped: no loss tokens" in lines[0] and "Loss 0.0000" not in lines[0]
    assert "Grad Norm" not in lines[0], lines[0]


def test_step_without_a_nonzero_advantage_skips_the_update(tiny_model_dir, samples, tmp_path):
    """Step 2's samples keep their loss tokens but every advantage is 0 (equal rewards in every group): the weights
    must not move, and the step is still published. Before, the step trained on its leftover gradient, which AdamW
    scales to ~lr per parameter (the tool-bandit rung's policy drifted for 40 steps at reward 0, docs/learning.md)."""
    from safetensors.torch import load_file

    run = tmp_path / "run"
    flat = [{**s, "advantages": np.zeros_like(s["advantages"])} for s in samples]
    write_stream(run, {1: samples, 2: flat, 3: samples})
    rl.run(trainer_config(tiny_model_dir, run, max_steps=3, optim={"lr": 1e-2}))
    w1, w2, w3 = (load_file(run / f"weights/step_{n}/model.safetensors") for n in (1, 2, 3))
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert max((w3[k] - w2[k]).abs().max().item() for k in w2) > 1e-4  # step 3 has a signal and trains
    rows = read_metrics(run, "trainer")
    assert [r["skipped_update"] for r in rows] == [0.0, 1.0, 0.0] and rows[1]["no_signal"] == 1.0
    assert "no_signal" not in rows[0] and "no_signal" not in rows[2]
    assert rows[1]["loss_tokens"] == rows[0]["loss_tokens"] > 0 and rows[1]["grad_norm"] > 0  # a gradient was left
    line = [ln for ln in (run / "logs" / "trainer.log").read_text().splitlines() if "Step 2/3" in ln]
    assert len(line) == 1 and "Update skipped: every loss token's advantage is 0" in line[0], line


@pytest.mark.slow
def test_no_signal_is_decided_over_all_ranks(tiny_model_dir, samples, tmp_path):
    """FSDP2 over 2 processes. Step 2: only rank 1's samples have a nonzero advantage, so every rank updates; step 3:
    no rank's do, so no rank updates (a rank deciding alone would leave the shards out of step)."""

    from safetensors.torch import load_file

    from prime_rl.config.loader import write_config

    run = tmp_path / "run"
    flat = [{**s, "advantages": np.zeros_like(s["advantages"])} for s in samples]
    write_stream(run, {1: samples, 2: flat[:2] + samples[2:], 3: flat}, world_size=2, micro_per_rank=1)
    path = write_config(trainer_config(tiny_model_dir, run, max_steps=3, data_timeout_s=60.0),
                        run / "configs" / "trainer.toml")  # fmt: skip
    r = _torchrun_trainer(path)
    assert r.returncode == 0, r.stderr[-4000:]
    rows = read_metrics(run, "trainer")
    assert [r["skipped_update"] for r in rows] == [0.0, 0.0, 1.0] and [r.get("no_signal") for r in rows] == [
        None, None, 1.0]  # fmt: skip
    w1, w2, w3 = (load_file(str(run / "weights" / f"step_{n}" / "model.safetensors")) for n in (1, 2, 3))
    assert not all(torch.equal(w1[k], w2[k]) for k in w1)
    assert all(torch.equal(w2[k], w3[k]) for k in w2)


def test_trainer_cli_exits_1_with_one_line_naming_the_divergence(tiny_model_dir, samples, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    run = tmp_path / "run"
    write_stream(run, {s: samples for s in (1, 2, 3)})
    cfg = tmp_path / "trainer.toml"
    cfg.write_text(f"""
output_dir = "{run}"
max_steps = 3
seq_len = 256
threads = 1
data_timeout_s = 30
[model]
name = "{tiny_model_dir}"
[optim]
max_nonfinite_steps = 2
[loss]
type = "custom"
import_path = "{LOSS}"
kwargs = {{bad = "all"}}
""")
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.trainer", "@", str(cfg)], capture_output=True, text=True,
                       timeout=300, env=env, cwd=repo)  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    assert "trainer: error: training diverged: 2 consecutive steps (the last: step 2" in r.stderr, r.stderr[-3000:]
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_a_non_finite_loss_on_one_rank_skips_the_step_on_every_rank(tiny_model_dir, samples, tmp_path):
    """FSDP2 over 2 processes: rank 1's loss is +inf at step 2 while every gradient stays finite. Every rank must
    skip (the flag is all-reduced), or rank 0 would update its shard and rank 1 not: a model no longer in sync."""

    from safetensors.torch import load_file

    from prime_rl.config.loader import write_config

    run = tmp_path / "run"
    write_stream(run, {s: samples for s in (1, 2, 3)}, world_size=2, micro_per_rank=1)
    loss = CustomLossConfig(import_path=LOSS, kwargs={"per_step": 1, "bad": [[2, 0]], "rank": 1, "mode": "inf"})
    path = write_config(trainer_config(tiny_model_dir, run, max_steps=3, data_timeout_s=60.0, loss=loss.model_dump()),
                        run / "configs" / "trainer.toml")  # fmt: skip
    r = _torchrun_trainer(path)
    assert r.returncode == 0, r.stderr[-4000:]
    assert [m["nonfinite"] for m in read_metrics(run, "trainer")] == [0.0, 1.0, 0.0]
    assert "step 2: non-finite loss in micro-batch(es) [0] of rank 1; update skipped" in r.stdout + r.stderr
    w1, w2, w3 = (load_file(str(run / "weights" / f"step_{n}" / "model.safetensors")) for n in (1, 2, 3))
    assert all(torch.equal(w1[k], w2[k]) for k in w1)  # nothing moved at step 2, on either rank's shard
    assert not all(torch.equal(w2[k], w3[k]) for k in w2)


def _torchrun_trainer(config_path):
    """Run the trainer in 2 torchrun processes (gloo) on `config_path`; the finished process, output captured."""
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}
    cmd = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node=2", "-m",
           "prime_rl.cli.trainer", "@", str(config_path)]  # fmt: skip
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
