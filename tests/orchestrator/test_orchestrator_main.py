"""The orchestrator's main loop with a fake inference server and a fake trainer: batches, step lines, metrics,
eval files, checkpoints and resume on the same task stream."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from tests.orchestrator.fakes import CounterEnv, ScriptedClient, tiny_tokenizer, tool_call_text

from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.models.renderer import make_renderer
from prime_rl.monitor.metrics import read_metrics
from prime_rl.orchestrator.main import Orchestrator
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.transport.atomic import atomic_write_dir
from prime_rl.transport.batch import read_batch

STEP_RE = re.compile(
    r"^Step (\d+)/4 \| (\d+h )?(\d+m )?\d+s \| Reward (\d\.\d{4}|nan) \| Trainable (\d+)/(\d+) \(\d+\.\d%\) \| Turns \d+\.\d \| "
    r"Max Off-Policy (\d+) \| Error \d+\.\d% \| Truncated \d+\.\d%$"
)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def _script(prompt: str, k: int) -> str:
    # one tool call adding the task's target, then an answer (right for odd k, wrong for even k: mixed rewards)
    if "<tool_response>" not in prompt:
        target = int(re.findall(r"Reach (\d+)\.", prompt)[-1])
        return tool_call_text("add", {"x": target})
    return "done 9999" if k % 3 == 0 else "done " + re.findall(r"total=(\d+)", prompt)[-1]


def _cfg(tmp_path, **kw):
    base = dict(
        output_dir=tmp_path / "run", batch_size=8, max_steps=4, seq_len=1024, max_async_level=1, seed=3,
        train={"group_size": 4, "sampling": {"max_completion_tokens": 64}},
        eval={"interval": 2, "num_examples": 3, "rollouts_per_example": 2},
    )
    base.update(kw)
    return OrchestratorConfig(**base)


async def _fake_trainer(run_dir, steps, seen):
    """Reads rollouts/step_N/rank_0.bin, then publishes weights/step_N/STABLE."""
    for n in steps:
        path = run_dir / "rollouts" / f"step_{n}" / "rank_0.bin"
        for _ in range(2000):
            if path.exists():
                break
            await asyncio.sleep(0.005)
        seen[n] = read_batch(path)
        atomic_write_dir(run_dir / "weights" / f"step_{n}", lambda d: (d / "model.safetensors").write_bytes(b"x"))


async def _run(cfg, tok, trainer_steps, capsys=None):
    env = CounterEnv(12)
    src = InProcessSource("counter", env)
    client = ScriptedClient(tok, _script)
    renderer = make_renderer(tok, cfg.renderer)
    orch = Orchestrator(cfg, client=client, renderer=renderer, train_sources=[src], poll_s=0.005)
    seen = {}
    trainer = asyncio.create_task(_fake_trainer(cfg.output_dir, trainer_steps, seen))
    out = await orch.run()
    await asyncio.wait_for(trainer, 10)
    return out, seen, env, client


async def test_steps_batches_metrics_eval(tmp_path, tok, capsys):
    cfg = _cfg(tmp_path)
    out, seen, env, client = await _run(cfg, tok, [1, 2, 3, 4])
    run = cfg.output_dir
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Step ")]
    assert [int(STEP_RE.match(ln).group(1)) for ln in lines] == [1, 2, 3, 4], lines
    rows = read_metrics(run, "orchestrator")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for ln, row, m in zip(lines, rows, out, strict=True):
        g = STEP_RE.match(ln)
        assert m["trainable"] == row["trainable"] and m["reward"] == row["reward"]
        assert int(g.group(5)) == row["trainable"] and int(g.group(6)) == row["num_rollouts"] == 8
        assert f"{row['reward']:.4f}" == g.group(4) and int(g.group(7)) == row["max_off_policy"] <= 1 + 1
        # rewards: 1 for rollouts whose answer names the total; the script answers wrong on every third call
        assert 0.0 < row["reward"] < 1.0 and row["error_pct"] == 0.0 and row["turns"] == 2.0
    for n, b in seen.items():
        assert b.step == n and b.world_size == 1
        assert b.total_loss_tokens == sum(mb.num_loss_tokens for mb in b.micro_batches) == rows[n - 1]["loss_tokens"]
        assert sum(len(mb) for mb in b.micro_batches) == pytest.approx(rows[n - 1]["seq_len_mean"] * 8)
        traces = [json.loads(x) for x in (run / "rollouts" / f"step_{n}" / "traces.jsonl").read_text().splitlines()]
        assert len(traces) == cfg.traces_per_step and traces[0]["messages"][-1]["role"] == "assistant"
    # eval on the base policy and on versions 2 and 4
    assert sorted(p.name for p in (run / "eval").iterdir()) == ["step_0.jsonl", "step_2.jsonl", "step_4.jsonl"]
    erows = [json.loads(x) for x in (run / "eval" / "step_2.jsonl").read_text().splitlines()]
    assert len(erows) == 3 and all(len(r["rewards"]) == 2 for r in erows)
    ev = {r["step"]: r for r in read_metrics(run, "eval")}
    assert set(ev) == {0, 2, 4}
    exp_avg = sum(sum(r["rewards"]) for r in erows) / 6
    assert ev[2]["eval/avg@2"] == pytest.approx(exp_avg)
    assert ev[2]["eval/pass@2"] == pytest.approx(sum(r["pass"] for r in erows) / 3)
    ups = [v for _, v in client.updates]  # versions that arrive together are skipped to the newest
    assert ups == sorted(set(ups)) and ups[-1] == 4 and {2, 4} <= set(ups)
    assert sum(1 for e in env.log if e[0] == "close") == len(env.episodes)  # every episode closed


async def test_resume_continues_task_stream(tmp_path, tok):
    def tasks_per_step(run):
        out = {}
        for n in range(1, 5):
            tr = [json.loads(x) for x in (run / "rollouts" / f"step_{n}" / "traces.jsonl").read_text().splitlines()]
            out[n] = sorted(t["task_id"] for t in tr)
        return out

    full = _cfg(tmp_path / "a", max_async_level=0, traces_per_step=8, ckpt={"interval": 2}, eval={})
    await _run(full, tok, [1, 2, 3, 4])
    first = _cfg(tmp_path / "b", max_async_level=0, traces_per_step=8, max_steps=2, ckpt={"interval": 2}, eval={})
    await _run(first, tok, [1, 2])
    assert (tmp_path / "b" / "run" / "checkpoints" / "step_2" / "orchestrator" / "STABLE").is_file()
    resumed = _cfg(tmp_path / "b", max_async_level=0, traces_per_step=8, ckpt={"interval": 2, "resume_step": -1}, eval={})
    await _run(resumed, tok, [3, 4])
    assert tasks_per_step(tmp_path / "b" / "run") == tasks_per_step(tmp_path / "a" / "run")


async def test_final_version_is_evaluated_off_interval(tmp_path, tok):
    cfg = _cfg(tmp_path, max_steps=3, max_async_level=0)  # interval 2: versions 0, 2 and the final 3
    await _run(cfg, tok, [1, 2, 3])
    assert sorted(p.name for p in (cfg.output_dir / "eval").iterdir()) == ["step_0.jsonl", "step_2.jsonl", "step_3.jsonl"]


async def test_collective_weights_wait_for_the_final_version_without_an_eval(tmp_path, tok):
    # weights over a collective: trainer rank 0's broadcast of version N blocks until the servers receive it, which
    # they do only when the orchestrator asks them; run() must not return before the final version is loaded, even
    # with no eval of it due (the fake trainer publishes version 4 a moment after reading step 4's batch)
    cfg = _cfg(tmp_path, eval={}, weight_transport={"type": "collective", "inference_workers": 1})
    client = ScriptedClient(tok, _script)
    orch = Orchestrator(cfg, client=client, renderer=make_renderer(tok, cfg.renderer),
                        train_sources=[InProcessSource("counter", CounterEnv(12))], poll_s=0.005)  # fmt: skip

    async def trainer():
        for n in (1, 2, 3, 4):
            path = cfg.output_dir / "rollouts" / f"step_{n}" / "rank_0.bin"
            while not path.exists():
                await asyncio.sleep(0.005)
            if n == 4:
                await asyncio.sleep(0.5)
            atomic_write_dir(cfg.output_dir / "weights" / f"step_{n}", lambda d: (d / "transport.json").write_text("{}"))

    fake = asyncio.create_task(trainer())
    await asyncio.wait_for(orch.run(), 60)
    await fake
    assert [v for _, v in client.updates][-1] == 4
