"""docs/extending.md's worked examples are the tested code: every block marked `<!-- example: FILE -->` is read out
of the doc, saved as FILE in a temporary folder on sys.path, and checked here (Python imported and run, TOML parsed
as the config it is meant for, the eval command run as the doc types it)."""

from __future__ import annotations

import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tests.orchestrator.fakes import ScriptedClient, tool_call_text

from prime_rl.config.loader import parse_config
from prime_rl.config.orchestrator import CustomAdvantageConfig, SamplingConfig, SourceConfig
from prime_rl.config.rl import RLConfig
from prime_rl.config.trainer import CustomLossConfig
from prime_rl.registry import RegistryError

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "extending.md"


def doc_blocks() -> dict[str, str]:
    """FILE -> code of each ```lang block right after a `<!-- example: FILE -->` line."""
    text = DOC.read_text()
    return dict(re.findall(r"<!-- example: (\S+) -->\n```\w+\n(.*?)```", text, flags=re.S))


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    """The doc's examples written out; the folder is first on sys.path while the module's tests run."""
    folder = tmp_path_factory.mktemp("extending")
    for name, code in doc_blocks().items():
        (folder / name).write_text(code)
    sys.path.insert(0, str(folder))
    yield folder
    from prime_rl.envs.base import ENVS
    from prime_rl.inference.backend import BACKENDS
    from prime_rl.orchestrator.advantages import ADVANTAGES
    from prime_rl.trainer.loss import LOSSES

    for registry, name in ((ENVS, "multiply"), (ADVANTAGES, "range"), (LOSSES, "is_pg"), (BACKENDS, "reverse-oracle")):
        registry.unregister(name)  # the examples' registrations end with this module's tests
    sys.path.remove(str(folder))
    for mod in ("my_env", "my_advantage", "my_loss", "my_backend"):
        sys.modules.pop(mod, None)


def run_block(examples: Path, name: str) -> None:
    exec(compile((examples / name).read_text(), name, "exec"), {})


def test_every_extension_point_has_its_examples():
    assert set(doc_blocks()) == {
        "my_env.py", "register_env.py", "multiply.toml", "my_advantage.py", "register_advantage.py", "range.toml",
        "my_loss.py", "is_pg.toml", "my_backend.py", "register_backend.py", "distill.toml", "distill_server.toml",
    }  # fmt: skip


def test_teacher_examples(examples):
    """Both distillation blocks are run configs: the teacher term in the loss, and a teacher for the orchestrator
    (the one rl starts, or a running server's URL)."""
    started = parse_config(RLConfig, ["@", str(examples / "distill.toml")])
    loss = started.trainer.loss
    assert (loss.type, loss.teacher_kl_coef, loss.adv_tau) == ("opd", 1.0, 0.0)
    assert started.teacher.model.name == "outputs/teacher/weights/step_40" and started.teacher.server.port == 8001
    teacher = started.orchestrator.teacher  # wired to the server rl starts
    assert (teacher.name, teacher.base_url) == ("outputs/teacher/weights/step_40", ["http://127.0.0.1:8001"])
    assert started.orchestrator.gate.keep_for_kl  # groups of equal rewards still train on the teacher term
    running = parse_config(RLConfig, ["@", str(examples / "distill_server.toml")])
    loss = running.trainer.loss
    assert (loss.type, loss.teacher_kl_coef, loss.adv_tau) == ("dppo_kl", 0.5, 1.0)
    assert running.teacher is None and running.orchestrator.teacher.base_url == ["http://10.0.0.7:8001"]
    assert running.orchestrator.teacher.name == "Qwen/Qwen3-4B"


async def test_environment_example(examples, tmp_path):
    from prime_rl.envs.base import load_env
    from prime_rl.models.renderer import make_renderer
    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.orchestrator.agent import AgentLimits, run_rollout
    from prime_rl.orchestrator.sources import build_source

    run_block(examples, "register_env.py")
    env = load_env("multiply", n=5)
    t = env.tasks("eval")[3]
    a, b = t.info["a"], t.info["b"]
    assert [x.task_id for x in env.tasks("eval")] == [x.task_id for x in load_env("multiply", n=5).tasks("eval")]
    assert env.tasks("train")[0].info != env.tasks("eval")[0].info  # the splits are different draws
    ep = env.episode(t)
    assert ep.call_tool("multiply", {"a": a, "b": b}) == str(a * b) and ep.call_tool("multiply", '{"a": 3, "b": 4}') == "12"
    assert ep.call_tool("add", {}).startswith("error") and ep.call_tool("multiply", {"a": "x"}).startswith("error")
    assert ep.verify(f"It is {a * b}.").reward == 1.0 and ep.verify(f"It is {a * b + 1}.").reward == 0.0
    with pytest.raises(KeyError, match="unknown split"):
        env.tasks("test")

    # the TOML block is a valid run config, and the agent loop plays the environment through it
    cfg = parse_config(RLConfig, ["@", str(examples / "multiply.toml")])
    src_cfg = cfg.orchestrator.train.source[0]
    assert src_cfg.env.id == "multiply" and src_cfg.env.args == {"n": 1000, "seed": 1} and src_cfg.env.agent.max_turns == 2
    src = build_source(SourceConfig(name="m", env={"id": "my_env:MultiplyEnv", "args": {"n": 5}}))  # by path too
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(cached_tiny_model()))
    task = src.tasks("train")[0]
    a, b = task.info["a"], task.info["b"]

    def script(prompt: str, k: int) -> str:
        return tool_call_text("multiply", {"a": a, "b": b}) if k == 0 else f"The product is {a * b}."

    r = await run_rollout(task, src, ScriptedClient(tok, script), make_renderer(tok, "qwen3"), SamplingConfig(),
                          AgentLimits(2048, 64))  # fmt: skip
    assert not r.masked and r.num_turns == 2 and r.reward == 1.0
    assert r.messages[-2] == {"role": "tool", "name": "multiply", "tool_call_id": "call_0_0", "content": str(a * b)}


def test_advantage_example(examples):
    from prime_rl.orchestrator.advantages import ADVANTAGES, compute_advantages

    run_block(examples, "register_advantage.py")
    cfg = parse_config(RLConfig, ["@", str(examples / "range.toml")]).orchestrator.advantage
    assert cfg.type == "custom" and cfg.import_path == "range" and "range" in ADVANTAGES
    # trainable rewards 1, 0, 0.5: mean 0.5, range 1 -> 0.5, -0.5, 0; the masked member gets 0 and no say
    assert compute_advantages([1.0, 0.0, 0.5, 9.0], [True, True, True, False], cfg) == [0.5, -0.5, 0.0, 0.0]
    # rewards 2, 4, 9: mean 5, range 7
    got = compute_advantages([2.0, 4.0, 9.0], [True] * 3, CustomAdvantageConfig(import_path="my_advantage:range_advantages"))
    assert got == pytest.approx([-3 / 7, -1 / 7, 4 / 7])
    assert compute_advantages([0.3, 0.3], [True, True], cfg) == [0.0, 0.0]


def test_loss_example(examples):
    from prime_rl.trainer.loss import LossInputs, get_loss

    cfg = parse_config(RLConfig, ["@", str(examples / "is_pg.toml")]).trainer.loss
    fn = get_loss(cfg)
    assert fn.fn is get_loss(CustomLossConfig(import_path="is_pg")).fn  # importing the module registered the name
    assert fn.console == ("ratio",)
    lp = torch.tensor([-1.0, -2.0, -0.5, -3.0], dtype=torch.float64, requires_grad=True)
    lp_inf = torch.tensor([-1.0, -2.5, -0.5, -1.0], dtype=torch.float64)
    adv = torch.tensor([0.5, 0.5, -2.0, 7.0], dtype=torch.float64)
    mask = torch.tensor([True, True, True, False])
    out = fn(LossInputs(lp, lp_inf, adv, mask), cfg)
    out.loss.backward()
    # ratios 1, e^0.5, 1 on the loss tokens; loss = -(0.5 * 1 + 0.5 * e^0.5 - 2 * 1); grad = -A * ratio, 0 off-mask
    assert out.loss.item() == pytest.approx(-(0.5 + 0.5 * math.exp(0.5) - 2.0))
    assert lp.grad.tolist() == pytest.approx([-0.5, -0.5 * math.exp(0.5), 2.0, 0.0])
    num, den = out.metrics["ratio"]
    assert den.item() == 3 and num.item() == pytest.approx(2 + math.exp(0.5))


async def test_backend_example_scores_reverse_text_perfectly(examples, tmp_path):
    from prime_rl.config.orchestrator import EvalCommandConfig, OrchestratorConfig
    from prime_rl.inference.backend import BACKENDS, InferenceBackend, build_backend
    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.orchestrator.eval_cmd import evaluate

    run_block(examples, "register_backend.py")
    model = str(cached_tiny_model())
    src = {"name": "reverse", "env": {"id": "reverse-text"}}
    cfg = EvalCommandConfig(backend="reverse-oracle", model={"name": model}, output_dir=tmp_path,
                            eval={"source": [src], "num_examples": 6})  # fmt: skip
    assert isinstance(build_backend(cfg), InferenceBackend)
    res = await evaluate(cfg)
    assert res.by_source["reverse"]["avg@1"] == 1.0 and res.by_source["reverse"]["tasks"] == 6
    with pytest.raises(RegistryError, match="backend = 'reverse-oracle': this backend cannot load new policy"):
        build_backend(OrchestratorConfig(backend="reverse-oracle", model={"name": model}), loads_weights=True)
    assert BACKENDS.get("reverse-oracle").__name__ == "ReverseOracle"


def test_backend_command_line_as_documented(examples, tmp_path):
    """The doc's `prime-rl eval --backend my_backend:ReverseOracle ...` line, run as typed (20 reverse-text tasks,
    all reversed exactly)."""
    from prime_rl.models.tiny import cached_tiny_model

    line = re.search(r"```bash\n(PYTHONPATH=\. prime-rl eval .*?)```", DOC.read_text(), flags=re.S).group(1)
    argv = shlex.split(line.replace("\\\n", " "))
    assert argv[:3] == ["PYTHONPATH=.", "prime-rl", "eval"]
    (examples / "outputs").mkdir(exist_ok=True)
    link = examples / "outputs" / "tiny-model"
    if not link.exists():
        link.symlink_to(cached_tiny_model())
    env = {**os.environ, "PYTHONPATH": ".:" + str(REPO / "src")}
    r = subprocess.run([str(Path(sys.executable).parent / "prime-rl"), *argv[2:], "--output-dir", str(tmp_path)],
                       cwd=examples, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    rows = (tmp_path / "tiny-model" / "step_0.jsonl").read_text().splitlines()
    assert len(rows) == 20 and all('"avg": 1.0' in row for row in rows)

