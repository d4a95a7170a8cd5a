"""`evals` over a run's checkpoints: a sweep (every N-th, listed steps) and a watch of a run whose `weights/step_N/
STABLE` appear over time, each result in its own file keyed by model and step, done steps skipped after an
interruption, other settings refused; one table across steps. A fake policy whose score depends on the loaded
version (task t is solved from version t + 1 on) makes each step's avg@1 known: min(v, 4) / 4 over 4 tasks."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from tests.orchestrator.fakes import CounterEnv, ScriptedClient, tiny_tokenizer, tool_call_text

from prime_rl.config.orchestrator import EvalCommandConfig
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator import eval_sweep
from prime_rl.orchestrator.eval_cmd import evaluate_steps
from prime_rl.orchestrator.eval_sweep import NoCheckpoints, ResultExists, sweep_table
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.transport.atomic import atomic_write_dir


def _publish(run: Path, step: int) -> None:
    atomic_write_dir(run / "weights" / f"step_{step}", lambda d: (d / "model.safetensors").write_bytes(b"x"))


class VersionClient(ScriptedClient):
    """Solves task `t` (target t) once the loaded version is above t; `fail_at`: update_weights raises there."""

    def __init__(self, tok, fail_at: int | None = None):
        super().__init__(tok, self._answer)
        self.fail_at = fail_at

    def _answer(self, prompt, k):
        target = int(re.findall(r"Reach (\d+)\.", prompt)[-1])
        if "<tool_response>" not in prompt:
            return tool_call_text("add", {"x": target})
        return f"done {target}" if target < self.version else "done, no idea"

    async def update_weights(self, path, version):
        if version == self.fail_at:
            raise KeyboardInterrupt  # the user stops the sweep while step `fail_at` loads
        await super().update_weights(path, version)


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def _cfg(tmp_path, **ck):
    return EvalCommandConfig(output_dir=tmp_path / "out", eval={"num_examples": 4, "rollouts_per_example": 1},
                             checkpoints={"run_dir": tmp_path / "run", **ck})  # fmt: skip


async def _sweep(cfg, client, tok):
    return await evaluate_steps(cfg, client=client, renderer=make_renderer(tok, cfg.renderer),
                                sources=[InProcessSource("counter", CounterEnv(10))])  # fmt: skip


def _scores(out: Path) -> dict[int, float]:
    return {int(f.stem[5:]): json.loads(f.read_text())["metrics"]["eval/avg@1"]
            for f in sorted((out / "run").glob("step_*.json"))}  # fmt: skip


async def test_sweep_every_second_step_resumes_after_an_interruption_and_never_overwrites(tmp_path, tok):
    for n in range(1, 8):
        _publish(tmp_path / "run", n)
    (tmp_path / "run" / "weights" / "step_8").mkdir()  # not stable: never evaluated
    cfg = _cfg(tmp_path, every=2)
    with pytest.raises(KeyboardInterrupt):
        await _sweep(cfg, VersionClient(tok, fail_at=4), tok)
    assert _scores(cfg.output_dir) == {2: 0.5}  # step 2 done before the interruption
    first = (cfg.output_dir / "run" / "step_2.jsonl").read_bytes()

    client = VersionClient(tok)
    results = await _sweep(cfg, client, tok)
    assert [v for _, v in client.updates] == [4, 6, 7]  # step 2 skipped; 7 is the newest stable one
    assert sorted(results) == [2, 4, 6, 7]
    assert _scores(cfg.output_dir) == {2: 0.5, 4: 1.0, 6: 1.0, 7: 1.0}
    assert (cfg.output_dir / "run" / "step_2.jsonl").read_bytes() == first
    rows = [json.loads(x) for x in (cfg.output_dir / "run" / "step_2.jsonl").read_text().splitlines()]
    assert [r["rewards"] for r in rows] == [[1.0], [1.0], [0.0], [0.0]] and {r["step"] for r in rows} == {2}
    metrics = [json.loads(x) for x in (cfg.output_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if m.get("process", "eval") == "eval"] == [2, 4, 6, 7]  # each once

    console = Console(record=True, width=140)
    console.print(sweep_table(results, 1, "sweep"))
    lines = [x for x in console.export_text().splitlines() if "counter" in x]
    assert [x.split("│")[1].strip() for x in lines] == ["2", "4", "6", "7"] and "0.5000" in lines[0] and "1.0000" in lines[1]

    # the same output folder with other settings: refused, nothing rewritten
    other = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"num_examples": 3})})
    with pytest.raises(ResultExists, match=r"step_2\.json holds an eval of run step 2 made with other settings"):
        await _sweep(other, VersionClient(tok), tok)
    assert (cfg.output_dir / "run" / "step_2.jsonl").read_bytes() == first


async def test_listed_steps_and_missing_ones(tmp_path, tok):
    for n in (1, 2, 3):
        _publish(tmp_path / "run", n)
    client = VersionClient(tok)
    assert sorted(await _sweep(_cfg(tmp_path, steps=[3, 1]), client, tok)) == [1, 3]
    assert _scores(tmp_path / "out") == {1: 0.25, 3: 0.75}
    with pytest.raises(NoCheckpoints, match=r"no stable weights/step_N for step\(s\) \[5\] \(stable steps there: \[1, 2, 3\]\)"):
        await _sweep(_cfg(tmp_path, steps=[1, 5]), VersionClient(tok), tok)


async def test_watch_scores_each_new_stable_version_until_the_last_and_resumes(tmp_path, tok):
    run = tmp_path / "run"
    (run / "weights").mkdir(parents=True)
    cfg = _cfg(tmp_path, watch=True, until_step=4, poll_s=0.001)
    client = VersionClient(tok)

    async def trainer():  # publishes the next version once the watcher has scored the previous one
        for n in range(1, 5):
            _publish(run, n)
            while n not in {v for _, v in client.updates}:
                await asyncio.sleep(0.001)

    t = asyncio.create_task(trainer())
    results = await asyncio.wait_for(_sweep(cfg, client, tok), 60)
    await t
    assert [v for _, v in client.updates] == [1, 2, 3, 4] and sorted(results) == [1, 2, 3, 4]
    assert _scores(cfg.output_dir) == {1: 0.25, 2: 0.5, 3: 0.75, 4: 1.0}
    again = VersionClient(tok)  # a restarted watch: every step is done, nothing is loaded or sampled
    assert sorted(await _sweep(cfg, again, tok)) == [1, 2, 3, 4] and again.updates == [] and again.calls == []


async def test_watch_ends_after_timeout_without_a_new_version(tmp_path, tok):
    _publish(tmp_path / "run", 1)
    now, polls = [0.0], []

    async def fake_sleep(s):
        polls.append(s)
        now[0] += 100.0  # each poll: 100 s pass

    cfg = _cfg(tmp_path, watch=True, timeout_s=250)
    client = VersionClient(tok)
    store = eval_sweep.ResultStore(cfg.output_dir, "run", "s")

    async def one(step, path):
        await client.update_weights(str(path), step)
        return eval_sweep.EvalResult(rows=[], metrics={}, by_source={})

    results = await eval_sweep.watch(cfg.checkpoints, store, one, clock=lambda: now[0], sleep=fake_sleep)
    assert sorted(results) == [1] and [v for _, v in client.updates] == [1]
    assert len(polls) == 3  # 100, 200, 300 s since version 1 > timeout_s = 250: the watch ends


def test_real_sweep_on_the_tiny_model_checkpoints(tmp_path):
    """`prime-rl eval` with `--checkpoints.run-dir` on two published copies of the tiny model (transformers backend,
    reverse-text): one result per step, the table across steps and the plot; run again, both steps are skipped."""
    import os
    import shutil
    import subprocess
    import sys

    from prime_rl.models.tiny import cached_tiny_model

    model = cached_tiny_model()
    for n in (1, 2):
        atomic_write_dir(tmp_path / "run" / "weights" / f"step_{n}",
                         lambda d: [shutil.copy(f, d / f.name) for f in Path(model).iterdir() if f.is_file()])  # fmt: skip
    argv = [str(Path(sys.executable).parent / "prime-rl"), "eval", "--backend", "transformers", "--model.name",
            str(model), "--checkpoints.run-dir", str(tmp_path / "run"), "--output-dir", str(tmp_path / "out"),
            "--eval.num-examples", "2", "--eval.sampling.max-completion-tokens", "8",
            "--eval.source", '[{"name": "rev", "env": {"id": "reverse-text", "agent": {"max_turns": 1}}}]']  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    folder = tmp_path / "out" / "run"
    assert sorted(p.name for p in folder.iterdir()) == ["step_1.json", "step_1.jsonl", "step_2.json", "step_2.jsonl",
                                                        "sweep.png"]  # fmt: skip
    rows = [[c.strip() for c in x.split("│")[1:-1]] for x in r.stdout.splitlines() if " rev " in x]
    assert [x[:3] for x in rows] == [["1", "rev", "2"], ["2", "rev", "2"]], r.stdout  # step, source, tasks
    for n in (1, 2):
        s = json.loads((folder / f"step_{n}.json").read_text())
        assert s["step"] == n and s["by_source"]["rev"]["rollouts"] == 2.0 and s["by_source"]["rev"]["error_pct"] == 0.0
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.suffix != ".png"}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    log = (tmp_path / "out" / "logs" / "eval.log").read_text()
    assert "run step 1: already evaluated" in log and "run step 2: already evaluated" in log
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.suffix != ".png"} == before
