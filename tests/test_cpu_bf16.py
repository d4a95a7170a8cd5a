"""`dtype = "auto"` on CPU (prime_rl.cpu_bf16): bf16 only with native bf16 matmul flags AND a measured speed-up of
at least the threshold; the probe is injected, the flags are given or read from a written cpuinfo file."""

from __future__ import annotations

import pytest
import torch

from prime_rl import cpu_bf16
from prime_rl.cpu_bf16 import Bf16Check, check, cpu_flags

AUTO = {"PRIME_RL_CPU_BF16": "auto"}


def probe(fp32: float, bf16: float):
    calls = []

    def run() -> tuple[float, float]:
        calls.append(1)
        return fp32, bf16

    run.calls = calls
    return run


@pytest.mark.parametrize("flags", [{"avx512_bf16", "avx512f"}, {"amx_bf16", "amx_tile"}])
def test_native_and_faster_chooses_bf16(flags):
    p = probe(60.0, 180.0)
    c = check(flags=flags, probe=p, environ=AUTO)
    assert c.dtype == "bfloat16" and c.use_bf16 and c.ratio == pytest.approx(3.0) and p.calls == [1]
    assert "bfloat16" in c.describe() and "ratio 3.00" in c.describe()


def test_native_but_not_faster_enough_stays_fp32():
    c = check(flags={"avx512_bf16"}, probe=probe(100.0, 129.0), environ=AUTO)
    assert c.dtype == "float32" and c.ratio == pytest.approx(1.29)
    assert check(flags={"avx512_bf16"}, probe=probe(100.0, 130.0), environ=AUTO).dtype == "bfloat16"  # 1.3 passes
    assert check(flags={"avx512_bf16"}, probe=probe(100.0, 50.0), environ=AUTO).dtype == "float32"  # slower


def test_no_native_flag_stays_fp32_without_timing():
    p = probe(10.0, 100.0)  # would pass the threshold: the flags alone decide
    c = check(flags={"avx512f", "avx2", "avx512_vnni"}, probe=p, environ=AUTO)
    assert c.dtype == "float32" and p.calls == [] and c.ratio is None and "no native bf16" in c.describe()


def test_env_zero_skips_the_check_and_other_values_are_refused():
    p = probe(10.0, 100.0)
    c = check(flags={"avx512_bf16"}, probe=p, environ={"PRIME_RL_CPU_BF16": "0"})
    assert c.dtype == "float32" and c.disabled and p.calls == [] and "PRIME_RL_CPU_BF16=0" in c.describe()
    with pytest.raises(ValueError, match="PRIME_RL_CPU_BF16='yes'"):
        check(flags={"avx512_bf16"}, probe=p, environ={"PRIME_RL_CPU_BF16": "yes"})


def test_cpu_flags_reads_every_flags_line(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu amx_bf16\n"
                 "vmx flags\t: ept\n")  # fmt: skip
    assert cpu_flags(f) == {"fpu", "avx512f", "avx512_bf16", "amx_bf16"}
    assert cpu_flags(tmp_path / "missing") == set()


def test_matmul_probe_measures_both_dtypes():
    fp32, bf16 = cpu_bf16.matmul_gflops(size=64, rounds=1)
    assert fp32 > 0 and bf16 > 0


def test_trainer_auto_follows_the_check_on_a_lone_cpu_process(monkeypatch):
    from prime_rl.config.trainer import TrainerModelConfig
    from prime_rl.trainer.model import compute_dtype

    cpu = torch.device("cpu")
    monkeypatch.setattr(cpu_bf16, "cpu_check", lambda: Bf16Check(("avx512_bf16",), 60.0, 180.0))
    auto = TrainerModelConfig(dtype="auto")
    assert compute_dtype(auto, cpu) == torch.bfloat16
    assert compute_dtype(auto, cpu, world_size=2) == torch.float32  # ranks could measure differently
    assert compute_dtype(TrainerModelConfig(dtype="float32"), cpu) == torch.float32
    monkeypatch.setattr(cpu_bf16, "cpu_check", lambda: Bf16Check(("avx512_bf16",), 60.0, 61.0))
    assert compute_dtype(auto, cpu) == torch.float32


def test_inference_auto_follows_the_check_on_cpu(monkeypatch):
    from prime_rl.config.inference import InferenceConfig
    from prime_rl.inference.server import resolve_dtype

    monkeypatch.setattr(cpu_bf16, "cpu_check", lambda: Bf16Check(("amx_bf16",), 60.0, 180.0))
    assert resolve_dtype(InferenceConfig(), cpu=True) == "bfloat16"
    assert resolve_dtype(InferenceConfig(model={"dtype": "float32"}), cpu=True) == "float32"
    monkeypatch.setattr(cpu_bf16, "cpu_check", lambda: Bf16Check(()))
    assert resolve_dtype(InferenceConfig(), cpu=True) == "float32"
    assert resolve_dtype(InferenceConfig(), cpu=False) == "bfloat16"


def test_the_test_suite_runs_auto_as_fp32():
    """tests/conftest.py sets PRIME_RL_CPU_BF16=0: recorded numbers do not depend on this CPU's bf16 speed."""
    assert check().dtype == "float32" and check().disabled


def _model_dir(tmp_path, name: str, config: dict):
    import json

    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    return d


def test_model_width_reads_the_hidden_size_of_a_model_folder(tmp_path):
    assert cpu_bf16.model_width(_model_dir(tmp_path, "qwen", {"hidden_size": 576})) == 576
    assert cpu_bf16.model_width(_model_dir(tmp_path, "gpt2", {"n_embd": 768})) == 768
    assert cpu_bf16.model_width(_model_dir(tmp_path, "vl", {"text_config": {"hidden_size": 2048}})) == 2048
    assert cpu_bf16.model_width(tmp_path / "missing") is None
    assert cpu_bf16.model_width("HuggingFaceTB/SmolLM2-135M-Instruct") is None  # a hub id: unknown here
    assert cpu_bf16.model_width(None) is None


def test_auto_keeps_a_narrow_model_in_fp32_on_a_host_where_bf16_pays(tmp_path, monkeypatch):
    """A 2-layer model of hidden size 128 decodes 0.59x and trains 0.92x as fast in bf16 on a host whose bf16 matmul
    runs 3x fp32 (docs/results/2026-12-03-cpu-bf16.md): below MIN_HIDDEN, auto stays float32 without the check."""
    from prime_rl.config.inference import InferenceConfig
    from prime_rl.config.trainer import TrainerModelConfig
    from prime_rl.inference.server import resolve_dtype
    from prime_rl.trainer.model import compute_dtype

    narrow = _model_dir(tmp_path, "narrow", {"hidden_size": cpu_bf16.MIN_HIDDEN - 1})
    wide = _model_dir(tmp_path, "wide", {"hidden_size": cpu_bf16.MIN_HIDDEN})
    monkeypatch.setattr(cpu_bf16, "cpu_check", lambda: Bf16Check(("avx512_bf16",), 60.0, 180.0))
    assert cpu_bf16.auto_cpu_dtype(narrow) == "float32"
    assert cpu_bf16.auto_cpu_dtype(wide) == "bfloat16"
    assert cpu_bf16.auto_cpu_dtype(None) == "bfloat16"  # width unknown: the host decides
    cpu = torch.device("cpu")
    assert compute_dtype(TrainerModelConfig(name=str(narrow), dtype="auto"), cpu) == torch.float32
    assert compute_dtype(TrainerModelConfig(name=str(wide), dtype="auto"), cpu) == torch.bfloat16
    assert resolve_dtype(InferenceConfig(model={"name": str(narrow)}), cpu=True) == "float32"
    assert resolve_dtype(InferenceConfig(model={"name": str(wide)}), cpu=True) == "bfloat16"
