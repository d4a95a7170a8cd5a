"""On-policy distillation in `rl`: `[teacher]` adds a teacher inference server to the plan (its config, port and
health URL), points `[orchestrator.teacher]` at it, and the pre-flight checks cover its port and its tokenizer; a
teacher without a teacher term in the loss (or the term without a teacher), a multi-node run, a shared port are
refused."""

from __future__ import annotations

import json
import shutil
import socket

import pytest
from tests.launcher.test_launch_plan import cfg_of, demo_args, rows_at, tiny  # noqa: F401 (fixture)

from prime_rl.config.rl import RLConfig
from prime_rl.launcher.errors import PreflightError
from prime_rl.launcher.layout import Layout
from prime_rl.launcher.plan import resolve
from prime_rl.ports import free_port


def _teacher_args(port: int) -> list[str]:
    from prime_rl.models.tiny import cached_tiny_model

    return ["--trainer.loss.type", "opd", "--teacher.model.name", str(cached_tiny_model(hidden=64, layers=2, seed=1)),
            "--teacher.server.port", str(port)]  # fmt: skip


def test_plan_starts_the_teacher_and_wires_the_orchestrator(tmp_path, tiny):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    port = free_port()
    cfg = cfg_of(demo_args(tmp_path, tiny, None, None, *_teacher_args(port)))
    plan = resolve(cfg, Layout.single(), probe=lambda url: False, gpus=[])
    p = plan.process("teacher")
    assert (p.role, p.ports, p.health_url) == ("inference", [port], f"http://127.0.0.1:{port}/health")
    t = plan.config.orchestrator.teacher
    assert t.base_url == [f"http://127.0.0.1:{port}"] and t.name == cfg.teacher.model.name
    assert plan.config.orchestrator.gate.keep_for_kl
    inf = plan.configs["teacher"]
    assert inf.model.name == cfg.teacher.model.name and inf.server.port == port
    assert inf.server.log_file == plan.run_dir / "logs" / "vllm-teacher.log"
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        with pytest.raises(PreflightError, match=f"port {port} \\(teacher.server.port"):
            resolve(cfg, Layout.single(), probe=lambda url: False, gpus=[])


def test_preflight_refuses_a_teacher_with_another_tokenizer(tmp_path, tiny):  # noqa: F811
    """A copy of the tiny teacher whose tokenizer swaps the ids of two byte tokens: refused before anything starts,
    naming both models."""
    from prime_rl.models.tiny import cached_tiny_model

    other = tmp_path / "other-teacher"
    shutil.copytree(cached_tiny_model(hidden=64, layers=2, seed=1), other)
    tj = json.loads((other / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    a, b = list(vocab)[:2]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / "tokenizer.json").write_text(json.dumps(tj))
    rows_at(tmp_path / "gym-root")
    args = demo_args(tmp_path, tiny, None, None, *_teacher_args(free_port()))
    args[args.index("--teacher.model.name") + 1] = str(other)
    with pytest.raises(PreflightError, match=rf"teacher.model.name = '{other}' \(from --teacher.model.name\) and "
                                             rf"model.name = '{tiny}' \(from --model.name\) map 2 token"):
        resolve(cfg_of(args), Layout.single(), probe=lambda url: False, gpus=[])


@pytest.mark.parametrize("data, match", [
    ({"teacher": {"model": {"name": "t"}}}, "no teacher term"),
    ({"trainer": {"loss": {"type": "opd"}}}, "no teacher scores the rollouts"),
    ({"trainer": {"loss": {"teacher_kl_coef": 0.5}}}, "no teacher scores the rollouts"),
    ({"teacher": {"model": {"name": "t"}, "server": {"port": 8000}}, "trainer": {"loss": {"type": "opd"}}},
     "its own port"),
    ({"teacher": {"model": {"name": "t"}}, "trainer": {"loss": {"type": "opd"}},
      "orchestrator": {"teacher": {"name": "u"}}}, "set one of them"),
    ({"teacher": {"model": {"name": "t"}}, "trainer": {"loss": {"type": "opd"}},
      "deployment": {"type": "multi-node", "num_infer_nodes": 1, "num_train_nodes": 1}}, "single-node run only"),
])  # fmt: skip
def test_refused_combinations(data, match):
    with pytest.raises(ValueError, match=match):
        RLConfig.model_validate(data)


def test_orchestrator_teacher_without_teacher_server_is_accepted():
    cfg = RLConfig.model_validate({"orchestrator": {"teacher": {"name": "t", "base_url": ["http://10.0.0.2:9000"]}},
                                   "trainer": {"loss": {"teacher_kl_coef": 0.5}}})  # fmt: skip
    assert cfg.teacher is None and cfg.orchestrator.teacher.base_url == ["http://10.0.0.2:9000"]


def test_teacher_vllm_inherits_the_unset_fields_of_inference_vllm(tmp_path):
    """`[teacher.vllm]` fields left unset are `[inference.vllm]`'s, but for the parallel sizes, LoRA, the weight-update
    pause and extra_args; a field set under [teacher.vllm] keeps its value; the resolved config reads back the same."""
    from prime_rl.config.loader import config_to_toml, parse_config

    policy = {"max_model_len": 3000, "dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.45,
              "kv_cache_space_gb": 3.0, "max_num_seqs": 7, "tensor_parallel_size": 2, "enable_lora": True,
              "extra_args": {"api-key": "secret"}}  # fmt: skip
    cfg = RLConfig.model_validate({
        "seq_len": 2048, "trainer": {"loss": {"type": "opd"}}, "orchestrator": {"client": {"api_key": "secret"}},
        "inference": {"vllm": policy}, "teacher": {"model": {"name": "t"}, "vllm": {"max_num_seqs": 3}},
    })  # fmt: skip
    teacher = cfg.teacher.inference_config(tmp_path).vllm
    assert (teacher.max_model_len, teacher.dtype, teacher.enforce_eager, teacher.gpu_memory_utilization,
            teacher.kv_cache_space_gb) == (3000, "float32", True, 0.45, 3.0)  # fmt: skip
    assert teacher.max_num_seqs == 3  # its own
    assert (teacher.tensor_parallel_size, teacher.enable_lora, teacher.extra_args) == (1, False, {})
    written = tmp_path / "rl.toml"
    written.write_text(config_to_toml(cfg).replace('"<redacted>"', '"secret"'))
    assert parse_config(RLConfig, ["@", str(written)]).teacher.vllm == cfg.teacher.vllm
    # without [teacher.vllm] every inherited field comes from [inference.vllm]
    bare = RLConfig.model_validate({"trainer": {"loss": {"type": "opd"}}, "teacher": {"model": {"name": "t"}},
                                    "inference": {"vllm": {"dtype": "bfloat16", "max_model_len": 4096}}})  # fmt: skip
    assert (bare.teacher.vllm.dtype, bare.teacher.vllm.max_model_len) == ("bfloat16", 4096)


def test_preflight_refuses_a_teacher_whose_own_context_cannot_hold_a_sample(tmp_path, tiny):  # noqa: F811
    """With teacher.vllm.max_model_len unset vLLM serves the teacher's max_position_embeddings: a copy of the tiny
    teacher holding 2048 tokens cannot score a sample of seq_len = 2048 (the demo's) plus one generated token."""
    from prime_rl.models.tiny import cached_tiny_model

    short = tmp_path / "short-teacher"
    shutil.copytree(cached_tiny_model(hidden=64, layers=2, seed=1), short)
    conf = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**conf, "max_position_embeddings": 2048}))
    rows_at(tmp_path / "gym-root")
    args = demo_args(tmp_path, tiny, None, None, *_teacher_args(free_port()))
    args[args.index("--teacher.model.name") + 1] = str(short)
    with pytest.raises(PreflightError, match=rf"seq_len = 2048 \(in .*rl.toml\), but the teacher model '{short}' holds "
                                             r"2048 tokens .* so it needs 2049: lower seq_len to at most 2047"):
        resolve(cfg_of(args), Layout.single(), probe=lambda url: False, gpus=[])
    conf["max_position_embeddings"] = 2049
    (short / "config.json").write_text(json.dumps(conf))
    resolve(cfg_of(args), Layout.single(), probe=lambda url: False, gpus=[])


def test_teacher_model_dtype_is_the_students_when_unset(tmp_path):
    """`rl @ examples/reverse_text/rl.toml @ distill.toml`: the shared `[model] dtype = "float32"` reaches the teacher
    server's config (it served "auto", i.e. another precision, before); a `[teacher.model] dtype` keeps its own."""
    from pathlib import Path

    from prime_rl.config.loader import parse_config

    distill = tmp_path / "distill.toml"
    distill.write_text('[trainer.loss]\ntype = "opd"\n\n[teacher.model]\nname = "t"\n')
    rl_toml = str(Path(__file__).resolve().parents[2] / "examples/reverse_text/rl.toml")
    cfg = parse_config(RLConfig, ["@", rl_toml, "@", str(distill), "--model.dtype", "float32"])
    assert cfg.inference.model.dtype == "float32"
    assert cfg.teacher.inference_config(tmp_path).model.dtype == "float32"
    own = parse_config(RLConfig, ["@", rl_toml, "@", str(distill), "--model.dtype", "float32",
                                  "--teacher.model.dtype", "bfloat16"])  # fmt: skip
    assert own.teacher.model.dtype == "bfloat16"


def test_gpu_placement_refuses_a_teacher_and_replica_0_asking_for_more_than_the_gpu_they_share(tmp_path):
    """On GPU the teacher shares the first inference GPU with replica 0: two 0.9 shares (the teacher's inherited)
    cannot both start, named with where each was set and the fix; shares summing to at most 0.95 are placed, and a
    CPU run (no share taken) is not refused."""
    from prime_rl.config.loader import parse_config
    from prime_rl.launcher.placement import place

    distill = tmp_path / "distill.toml"
    distill.write_text('[trainer.loss]\ntype = "opd"\n\n[teacher.model]\nname = "t"\n')
    cfg = parse_config(RLConfig, ["@", str(distill)])
    with pytest.raises(PreflightError) as e:
        place(cfg, gpus=["0", "1"])
    assert ("teacher.vllm.gpu_memory_utilization = 0.9 (unset under [teacher.vllm]: inference.vllm."
            "gpu_memory_utilization's) and inference.vllm.gpu_memory_utilization = 0.9 ask for 1.80") in str(e.value)
    assert "set them to sum to at most 0.95" in str(e.value)
    assert place(cfg, gpus=[], ncores=2).device == "cpu"
    cfg = parse_config(RLConfig, ["@", str(distill), "--inference.vllm.gpu-memory-utilization", "0.45"])
    assert place(cfg, gpus=["0", "1"]).device == "cuda"  # the teacher inherits 0.45: 0.9 together
    cfg = parse_config(RLConfig, ["@", str(distill), "--inference.vllm.gpu-memory-utilization", "0.45",
                                  "--teacher.vllm.gpu-memory-utilization", "0.6"])  # fmt: skip
    with pytest.raises(PreflightError, match=r"teacher.vllm.gpu_memory_utilization = 0.6 \(from --teacher.vllm.gpu-"
                                             r"memory-utilization\) and inference.vllm.gpu_memory_utilization = 0.45 "
                                             r"\(from --inference.vllm.gpu-memory-utilization\) ask for 1.05"):
        place(cfg, gpus=["0", "1"])
