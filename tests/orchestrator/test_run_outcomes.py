"""How an orchestrator run ends: a run that trained nothing at all fails even below `max_empty_steps`, a failed
weight load ends the run with its own error, user errors exit 2 with the message alone, and any other error exits
1 with its traceback in the log."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from tests.orchestrator.fakes import ScriptedClient, tiny_tokenizer
from tests.orchestrator.test_nothing_silent import CrashEnv, CycleEnv

from prime_rl.config.loader import ConfigError
from prime_rl.config.orchestrator import OrchestratorConfig, RendererConfig
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator import main as om
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.transport.atomic import atomic_write_dir


@pytest.fixture(scope="module")
def renderer(tmp_path_factory):
    return make_renderer(tiny_tokenizer(tmp_path_factory.mktemp("tok")), RendererConfig(name="qwen3"))


def _cfg(tmp_path, **kw):
    base = dict(output_dir=tmp_path / "run", batch_size=4, max_steps=3, seq_len=512, max_async_level=0,
                train={"group_size": 2, "sampling": {"max_completion_tokens": 8}}, concurrency={"max_inflight": 4})  # fmt: skip
    base.update(kw)
    return OrchestratorConfig(**base)


async def _trainer(cfg):
    for n in itertools.count(1):
        while not (cfg.output_dir / "rollouts" / f"step_{n}" / "rank_0.bin").exists():
            await asyncio.sleep(0.005)
        atomic_write_dir(cfg.output_dir / "weights" / f"step_{n}", lambda d: (d / "x").write_bytes(b"x"))


async def _run(orch, cfg):
    t = asyncio.create_task(_trainer(cfg))
    try:
        return await asyncio.wait_for(orch.run(), 60)
    finally:
        t.cancel()


async def test_a_run_that_trained_nothing_fails_even_below_max_empty_steps(renderer, tmp_path):
    """Every rollout masked for all 3 steps (max_empty_steps = 5 is never reached): before, the run ended as if it
    had trained; now it raises, counting the masked rollouts by reason."""
    cfg = _cfg(tmp_path)
    assert cfg.max_empty_steps == 5
    orch = om.Orchestrator(cfg, client=ScriptedClient(renderer._tokenizer, lambda p, k: "x"), renderer=renderer,
                           train_sources=[InProcessSource("crashy", CrashEnv([1.0]))], poll_s=0.005, echo=False)  # fmt: skip
    with pytest.raises(om.NoProgressError) as e:
        await _run(orch, cfg)
    msg = str(e.value)
    assert "the run trained nothing: none of its 3 step(s) (steps 1-3)" in msg
    assert "12 rollouts, 12 masked (env/verify_crash 12)" in msg


async def test_a_run_with_one_trained_step_is_not_refused(renderer, tmp_path):
    cfg = _cfg(tmp_path)
    orch = om.Orchestrator(cfg, client=ScriptedClient(renderer._tokenizer, lambda p, k: "x"), renderer=renderer,
                           train_sources=[InProcessSource("mix", CycleEnv([1.0, 0.0]))], poll_s=0.005, echo=False)  # fmt: skip
    out = await _run(orch, cfg)
    assert [m["trainable"] for m in out] == [4, 4, 4]


class BrokenLoads(ScriptedClient):
    async def update_weights(self, path, version):
        raise OSError(f"cannot read {path}")


async def test_a_failed_weight_load_ends_the_run_with_its_own_error(renderer, tmp_path):
    cfg = _cfg(tmp_path, max_async_level=1)
    orch = om.Orchestrator(cfg, client=BrokenLoads(renderer._tokenizer, lambda p, k: "x"), renderer=renderer,
                           train_sources=[InProcessSource("mix", CycleEnv([1.0, 0.0]))], poll_s=0.005, echo=False)  # fmt: skip
    with pytest.raises(OSError, match=r"cannot read .*weights/step_\d"):
        await _run(orch, cfg)
    assert not orch.sched.running


@pytest.mark.parametrize(
    ("error", "code", "traceback"),
    [
        (ConfigError("train.source[0].env.id: unknown"), 2, False),
        (om.ContextTooShort("seq_len = 4096 is above the inference server's context length"), 2, False),
        (om.NoProgressError("the run trained nothing"), 1, False),
        (ValueError("a bug deep inside"), 1, True),
        (KeyError("missing"), 1, True),
    ],
)
def test_exit_codes_and_tracebacks(tmp_path, monkeypatch, error, code, traceback):
    async def fail(cfg):
        raise error

    monkeypatch.setattr(om, "_main", fail)
    with pytest.raises(SystemExit) as e:
        om.orchestrate(OrchestratorConfig(output_dir=tmp_path / "run"))
    assert e.value.code == code
    log = (tmp_path / "run" / "logs" / "orchestrator.log").read_text()
    assert str(error).strip("'") in log
    assert ("Traceback (most recent call last)" in log) is traceback, log
