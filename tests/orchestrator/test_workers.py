"""Rollout workers (`orchestrator.workers.count`): the job/result messages, and whole orchestrator runs against a
fake trainer where the rollouts are played in worker processes (prime_rl.orchestrator.workers)."""

from __future__ import annotations

import asyncio
import gzip
import json

import psutil
import pytest
from tests.orchestrator.fakes import tiny_tokenizer
from tests.orchestrator.worker_stubs import KeyedClient, counter_source

from prime_rl.config.orchestrator import OrchestratorConfig, SamplingConfig
from prime_rl.envs.base import Task
from prime_rl.models.renderer import make_renderer
from prime_rl.monitor.metrics import read_metrics
from prime_rl.orchestrator.main import Orchestrator
from prime_rl.orchestrator.types import Rollout, Sample
from prime_rl.orchestrator.worker_wire import Job, pack, rollout_from_wire, rollout_to_wire, unpack
from prime_rl.orchestrator.workers import WorkerDied, WorkerError, exit_text
from prime_rl.transport.atomic import atomic_write_dir
from prime_rl.transport.batch import read_batch

STUBS = "tests.orchestrator.worker_stubs"


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


# ---- messages ----
def test_rollout_round_trip():
    task = Task("t-7", "train", 7, [{"role": "user", "content": "Reach 7."}])
    rollout = Rollout(
        task=task, source="counter", group_id=3, rollout_id="t-7/g3/r1", reward=0.25, num_turns=2, truncated=True,
        messages=[{"role": "user", "content": "Reach 7."},
                  {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0_0", "type": "function",
                                                                         "function": {"name": "add", "arguments": {"x": 7}}}]}],
        samples=[Sample([5, 6, 7, 8], [False, False, True, True], [0.0, 0.0, -0.5, -1.25]),
                 Sample([9, 10], [False, True], [0.0, -2.0], teacher_logprobs=[0.0, -3.5])],
        env_metrics={"score": 1.5}, policy_versions=[4, 5], prefix_breaks=1, malformed_tool_calls=2,
        temperature=0.7, duration_s=0.125,
    )  # fmt: skip
    rollout.mask("env/masked", "no answer")
    back = rollout_from_wire(unpack(pack(["result", "t-7/g3/r1", rollout_to_wire(rollout)]))[2], task)
    assert back == rollout and back.task is task
    assert back.samples[1].teacher_logprobs == [0.0, -3.5] and back.samples[0].loss_mask == [False, False, True, True]
    assert back.num_loss_tokens == 3 and back.error == "env/masked: no answer"


def test_rollout_with_other_fields_is_refused():
    task = Task("t", "train", 0, [])
    wire = rollout_to_wire(Rollout(task=task, source="s"))
    del wire["reward"]
    with pytest.raises(ValueError, match="another version of prime-rl"):
        rollout_from_wire(wire, task)


def test_job_round_trip():
    sampling = SamplingConfig(temperature=0.5, max_completion_tokens=33, seed=4)
    job = Job("t/g1/r0", 1, 0, 5, "t", pack(sampling.model_dump(mode="json")), [1024, 33, -1.0, 1.0], 6)
    back = Job.from_wire(unpack(pack(["play", job.to_wire()]))[1])
    assert back == job
    assert SamplingConfig.model_validate(unpack(back.sampling)) == sampling


def test_exit_text():
    assert exit_text(3) == "exit code 3"
    assert exit_text(-9) == "signal SIGKILL"
    assert exit_text(None) == "no exit code"


# ---- orchestrator runs ----
def _cfg(tmp_path, count: int, **kw):
    base = dict(
        output_dir=tmp_path / "run",
        batch_size=8,
        max_steps=3,
        seq_len=1024,
        max_async_level=0,
        seed=5,
        train={"group_size": 4, "sampling": {"max_completion_tokens": 64}},
        eval={},
        traces_per_step=0,
        workers={"count": count, "start_timeout_s": 120},
    )
    base.update(kw)
    return OrchestratorConfig(**base)


async def _run(cfg, tok, runtime: str = "counter_runtime", trainer_delay_s: float = 0.0):
    client = KeyedClient(tok)
    orch = Orchestrator(cfg, client=client, renderer=make_renderer(tok, cfg.renderer), train_sources=[counter_source()],
                        poll_s=0.005, echo=False, worker_runtime=f"{STUBS}:{runtime}")  # fmt: skip
    seen: dict = {}

    async def trainer():  # reads rollouts/step_N/rank_0.bin, then publishes weights/step_N/STABLE
        for n in range(1, cfg.max_steps + 1):
            path = cfg.output_dir / "rollouts" / f"step_{n}" / "rank_0.bin"
            while not path.exists():
                await asyncio.sleep(0.005)
            seen[n] = read_batch(path)
            await asyncio.sleep(trainer_delay_s)
            atomic_write_dir(cfg.output_dir / "weights" / f"step_{n}", lambda d: (d / "w").write_bytes(b"x"))

    task = asyncio.create_task(trainer())
    try:
        out = await orch.run()
        await asyncio.wait_for(task, 60)  # the fake trainer reads the last batch before the test looks at `seen`
    finally:
        task.cancel()
    return out, seen, orch


def _archive(run, step):
    with gzip.open(run / "archive" / f"step_{step}" / "train.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    for row in rows:
        row.pop("duration_s", None)
    return rows


def _batch_values(batch):
    return [
        (
            mb.input_ids.tolist(),
            mb.loss_mask.tolist(),
            mb.advantages.tolist(),
            mb.inference_logprobs.tolist(),
            mb.position_ids.tolist(),
        )
        for mb in batch.micro_batches
    ]


async def test_workers_give_the_in_process_batches(tmp_path, tok):
    """A seeded synchronous run (max_async_level = 0: every rollout of step N sampled with policy N - 1) cuts the
    same groups into the same packed batches with 2 workers as in-process; the archive names the worker of each
    rollout (none in-process), and the step metrics count each worker's rollouts."""
    inproc = _cfg(tmp_path / "a", 0)
    workers = _cfg(tmp_path / "b", 2)
    _, seen0, _ = await _run(inproc, tok)
    out2, seen2, orch = await _run(workers, tok)
    assert sorted(seen0) == sorted(seen2) == [1, 2, 3]
    for step in (1, 2, 3):
        rows0, rows2 = _archive(inproc.output_dir, step), _archive(workers.output_dir, step)
        assert [r["rollout_id"] for r in rows0] == [r["rollout_id"] for r in rows2]
        assert {r["worker"] for r in rows0} == {None} and {r["worker"] for r in rows2} <= {0, 1}
        assert len(rows0) == 8 and [{**r, "worker": None} for r in rows2] == rows0
        counts = {k: sum(r["worker"] == k for r in rows2) for k in (0, 1)}
        assert {k: out2[step - 1].get(f"worker_rollouts/{k}", 0) for k in (0, 1)} == counts
        assert {v for r in rows2 for v in r["policy_versions"]} == {step - 1}
        assert _batch_values(seen0[step]) == _batch_values(seen2[step])
    # the group ids are those of the stream's draw order: 2 groups of 4 per step
    assert [sorted({r["group_id"] for r in _archive(workers.output_dir, s)}) for s in (1, 2, 3)] == [
        [0, 1],
        [2, 3],
        [4, 5],
    ]
    assert all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
               for pid in orch.workers.pids)  # fmt: skip


async def test_staleness_bound_with_workers(tmp_path, tok):
    """max_async_level = 1 with a slow trainer: step N's rollouts are sampled with policy N - 2 or N - 1 (one step
    ahead at most), and the run does get ahead (some step holds rollouts of policy N - 2)."""
    cfg = _cfg(tmp_path, 2, max_async_level=1, max_steps=4, max_off_policy_steps=1)
    await _run(cfg, tok, trainer_delay_s=0.3)
    off = {}
    for step in range(1, 5):
        versions = [v for r in _archive(cfg.output_dir, step) for v in r["policy_versions"]]
        assert min(versions) >= max(0, step - 2) and max(versions) <= step - 1, (step, versions)
        off[step] = step - 1 - min(versions)
    assert max(off.values()) == 1
    assert [r["max_off_policy"] for r in read_metrics(cfg.output_dir, "orchestrator")] == [off[s] for s in range(1, 5)]


async def test_dead_worker_stops_the_run(tmp_path, tok):
    cfg = _cfg(tmp_path, 2)
    with pytest.raises(WorkerDied) as info:
        await asyncio.wait_for(_run(cfg, tok, runtime="dying_runtime"), 120)
    text = str(info.value)
    assert "rollout worker 1 (pid " in text and "exited with exit code 3" in text, text
    assert "4 rollout(s) in flight (counter-train-" in text and "the run stops" in text, text


async def test_worker_that_cannot_start_stops_the_run(tmp_path, tok):
    cfg = _cfg(tmp_path, 1)
    with pytest.raises(WorkerError, match="rollout worker 0 .* could not start: ConnectionError: worker 0: the "
                       "environment server refused"):  # fmt: skip
        await asyncio.wait_for(_run(cfg, tok, runtime="failing_runtime"), 120)


async def test_worker_with_other_tasks_fails_the_group(tmp_path, tok):
    cfg = _cfg(tmp_path, 1)
    with pytest.raises(Exception, match="train task .* in this worker, .* in the scheduler"):
        await asyncio.wait_for(_run(cfg, tok, runtime="other_tasks_runtime"), 120)


def test_sigterm_to_the_process_group_stops_workers_cleanly(tmp_path):
    """`rl` stops the orchestrator by SIGTERM to its process group, workers included: the run exits 143, every
    worker closes the episodes of its rollouts in flight and exits, and no worker is reported as died."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "tests.orchestrator.workers_sigterm_child", str(out)], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "in flight", proc.stderr.read()
        workers = [c for c in psutil.Process(proc.pid).children(recursive=True) if "spawn" in " ".join(c.cmdline())]
        assert len(workers) == 2
        os.killpg(proc.pid, signal.SIGTERM)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    stderr = proc.stderr.read()
    assert code == 143, stderr
    assert "while the run needed it" not in stderr, stderr
    closed = sorted(line for w in (0, 1) if (out / f"closed-w{w}.txt").exists()
                    for line in (out / f"closed-w{w}.txt").read_text().split())  # fmt: skip
    assert len(closed) == 8 and len(set(closed)) == 2, closed  # 2 groups of 4, each rollout's episode closed
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)


async def test_default_runtime_records_the_orchestrators_version(tmp_path, tok, monkeypatch):
    """A worker built from the config records the policy version its jobs carry on the results of a server that
    reports no version spans (the orchestrator's client learns it from its own weight loads; a worker loads none).
    Without it every result says version 0 and, past max_off_policy_steps, every group is dropped as stale."""
    from tests.inference.test_inference_client import Fake, Reply, _gen_response

    from prime_rl.config.client import ClientConfig
    from prime_rl.inference.client import InferenceClient
    from prime_rl.models import renderer as renderer_module
    from prime_rl.orchestrator import worker_main

    answer = _gen_response([70, 71], [-1.0, -2.0])
    answer["choices"][0]["weight_versions"] = []  # a server that reports no versions
    fake = Fake([Reply(json=answer)] * 10)  # health checks take some too
    urls = await fake.start(["a:1"])
    monkeypatch.setattr(renderer_module, "load_tokenizer", lambda name, template=None: tok)
    cfg = _cfg(tmp_path, 1, client={"base_url": urls})
    runtime = await worker_main.runtime_from_config(cfg, 0)
    try:
        assert (
            isinstance(runtime.client, InferenceClient) and runtime.client.urls == ClientConfig(base_url=urls).base_url
        )
        sampling = SamplingConfig(max_completion_tokens=2)
        assert (await runtime.client.generate([1], sampling)).policy_version == 0
        runtime.on_policy_version(4)
        assert (await runtime.client.generate([1], sampling)).policy_version == 4
        runtime.on_policy_version(3)  # never lowered
        assert (await runtime.client.generate([1], sampling)).policy_version == 4
    finally:
        await runtime.aclose()
        await fake.close()


async def test_a_worker_hands_on_the_newest_job_version(tmp_path, tok):
    """The worker passes a job's policy version to the runtime only when it is newer than every one before."""
    from tests.orchestrator.worker_stubs import counter_runtime

    from prime_rl.orchestrator.worker_main import _Player

    class Socket:
        def __init__(self):
            self.sent = []

        async def send(self, data):
            self.sent.append(unpack(data))

    cfg = _cfg(tmp_path, 1)
    runtime = await counter_runtime(cfg, 0)
    seen = []
    runtime.on_policy_version = seen.append
    sock = Socket()
    player = _Player(runtime, sock)
    sampling = pack(SamplingConfig(max_completion_tokens=64).model_dump(mode="json"))
    for k, version in enumerate([2, 1, 3, 3]):
        task = player.tasks[0][k]
        player.start(Job(f"{task.task_id}/g{k}/r1", k, 0, k, task.task_id, sampling, [1024, 64, -1e6, 1e6], version))
        await player.running[f"{task.task_id}/g{k}/r1"]
    assert seen == [2, 3]
    assert [m[0] for m in sock.sent] == ["result"] * 4
    rollouts = [rollout_from_wire(m[2], player.tasks[0][k]) for k, m in enumerate(sock.sent)]
    assert [r.reward for r in rollouts] == [1.0] * 4 and [r.num_turns for r in rollouts] == [2] * 4
