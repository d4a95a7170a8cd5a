"""One dtype for trainer and inference (`launcher/dtype.py`): on CPU the launch plan turns `auto` into the host's
choice once and writes it into the trainer's and every replica's config; explicit dtypes are kept or followed."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from prime_rl.config.loader import parse_config
from prime_rl.config.rl import RLConfig
from prime_rl.cpu_bf16 import MIN_HIDDEN, Bf16Check
from prime_rl.launcher import dtype as run_dtype
from prime_rl.launcher.dtype import run_dtypes
from prime_rl.ports import free_port

FAST = Bf16Check(("avx512_bf16",), 60.0, 180.0)  # native, 3x: bfloat16
SLOW = Bf16Check(("avx512_bf16",), 60.0, 66.0)  # native, 1.1x: float32


def rl(*args: str) -> RLConfig:
    return parse_config(RLConfig, list(args))


def counted(result: Bf16Check):
    calls = []

    def check() -> Bf16Check:
        calls.append(1)
        return result

    return check, calls


@pytest.mark.parametrize("result,dtype", [(FAST, "bfloat16"), (SLOW, "float32")])
def test_auto_on_cpu_is_decided_once_for_both(result, dtype):
    check, calls = counted(result)
    changes = run_dtypes(rl(), "cpu", multi=False, check=check)
    assert changes == {"trainer.model.dtype": dtype, "inference.model.dtype": dtype, "orchestrator.model.dtype": dtype}
    assert calls == [1]


def test_explicit_side_is_followed_and_gpu_and_explicit_pairs_are_left_alone():
    check, calls = counted(FAST)
    assert run_dtypes(rl("--trainer.model.dtype", "float32"), "cpu", False, check) == {
        "inference.model.dtype": "float32", "orchestrator.model.dtype": "float32"}  # fmt: skip
    assert run_dtypes(rl("--inference.vllm.dtype", "bfloat16"), "cpu", False, check) == {
        "trainer.model.dtype": "bfloat16", "orchestrator.model.dtype": "bfloat16"}  # fmt: skip
    assert run_dtypes(rl("--model.dtype", "float32"), "cpu", False, check) == {}
    assert run_dtypes(rl(), "cuda", False, check) == {}  # auto is bfloat16 in both on GPU
    assert run_dtypes(rl("--inference.vllm.dtype", "float16"), "cpu", False, check) == {}  # no trainer counterpart
    assert run_dtypes(rl(), "cpu", multi=True, check=check)["trainer.model.dtype"] == "float32"  # nodes differ
    assert calls == []


def test_launch_plan_writes_one_dtype_into_trainer_and_inference_configs(tmp_path, monkeypatch):
    """The real plan (`resolve` + `write_configs`) on the tiny model: the configs the processes read carry the same
    explicit dtype, which the trainer (`compute_dtype`) and vLLM's flags (`build_vllm_args`) then use as is."""
    import torch

    from prime_rl.config.inference import InferenceConfig
    from prime_rl.config.trainer import TrainerConfig
    from prime_rl.inference.server import build_vllm_args
    from prime_rl.launcher.layout import Layout
    from prime_rl.launcher.plan import resolve, write_configs
    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.trainer.model import compute_dtype

    source = '[{"name": "reverse", "env": {"id": "reverse-text"}}]'
    wide = cached_tiny_model(hidden=MIN_HIDDEN)  # narrower models stay float32 whatever the host
    args = ["--model.name", str(wide), "--output-dir", str(tmp_path / "run"), "--seq-len", "512",
            "--max-steps", "2", "--inference.server.port", str(free_port()), "--orchestrator.train.source", source]  # fmt: skip
    for result, dtype in ((FAST, "bfloat16"), (SLOW, "float32")):
        monkeypatch.setattr(run_dtype, "cpu_check", lambda r=result: r)
        run = tmp_path / dtype
        plan = resolve(rl(*args, "--output-dir", str(run)), Layout.single(), probe=lambda url: False, gpus=[])
        paths = write_configs(plan)
        read = {name: tomllib.loads(Path(p).read_text()) for name, p in paths.items()}
        assert read["trainer"]["model"]["dtype"] == read["inference"]["model"]["dtype"] == dtype
        trainer = TrainerConfig.model_validate(read["trainer"])
        inference = InferenceConfig.model_validate(read["inference"])
        monkeypatch.setattr("prime_rl.cpu_bf16.cpu_check", lambda: pytest.fail("a process ran the check again"))
        assert compute_dtype(trainer.model, torch.device("cpu")) == getattr(torch, dtype)
        flags = build_vllm_args(inference, cpu=True)
        assert flags[flags.index("--dtype") + 1] == dtype


def test_a_narrow_model_stays_float32_without_the_host_check(tmp_path):
    """Below `cpu_bf16.MIN_HIDDEN` (the model folder's config.json hidden size) auto is float32 in both processes,
    even on a host where bf16 pays; the check does not run."""
    import json

    check, calls = counted(FAST)
    for width, dtype in ((MIN_HIDDEN - 1, "float32"), (MIN_HIDDEN, "bfloat16")):
        model = tmp_path / f"m{width}"
        model.mkdir()
        (model / "config.json").write_text(json.dumps({"hidden_size": width}))
        changes = run_dtypes(rl("--model.name", str(model)), "cpu", multi=False, check=check)
        assert changes["trainer.model.dtype"] == changes["inference.model.dtype"] == dtype
    assert calls == [1]  # only the wide model asked the host
