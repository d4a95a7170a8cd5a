"""Staleness accounting and dropping, with a fake trainer that publishes policy versions on a schedule."""

from __future__ import annotations

import asyncio

import pytest
from tests.orchestrator.fakes import DelayClient, EchoEnv, ScriptedClient, tiny_tokenizer

from prime_rl.config.orchestrator import OrchestratorConfig, RendererConfig
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator.policy_watch import WeightWatcher
from prime_rl.orchestrator.scheduler import Scheduler, off_policy
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.orchestrator.stream import TaskStream
from prime_rl.orchestrator.types import PolicyVersion
from prime_rl.transport.atomic import atomic_write_dir


@pytest.fixture(scope="module")
def renderer(tmp_path_factory):
    return make_renderer(tiny_tokenizer(tmp_path_factory.mktemp("tok")), RendererConfig())


async def _run(renderer, tmp_path, *, async_level, max_off, steps, train_s, delay_fn, group_size=2, batch_size=4, max_inflight=8):
    """Drive the scheduler for `steps` steps; a fake trainer publishes weights/step_N/STABLE `train_s` after batch N."""
    env = EchoEnv(32)
    src = InProcessSource("echo", env)
    client = DelayClient(renderer._tokenizer, lambda p, k: f"r{k % 4}", delay_fn)
    policy = PolicyVersion(0)
    watcher = WeightWatcher(tmp_path / "weights", client.update_weights, policy, poll_s=0.005)
    cfg = OrchestratorConfig(
        batch_size=batch_size, train={"group_size": group_size, "sampling": {"max_completion_tokens": 32}},
        seq_len=1024, concurrency={"max_inflight": max_inflight}, max_async_level=async_level,
        max_off_policy_steps=max_off, weights_timeout_s=30,
    )
    sched = Scheduler(cfg, sources=[src], stream=TaskStream([src], seed=0), client=client, renderer=renderer,
                      policy=policy)  # fmt: skip
    watch = asyncio.create_task(watcher.run())

    async def train(n):
        await asyncio.sleep(train_s)
        atomic_write_dir(tmp_path / "weights" / f"step_{n}", lambda d: (d / "model.safetensors").write_bytes(b"x"))

    cuts, trainers = [], []
    for step in range(1, steps + 1):
        batch = await sched.next_batch(step)
        cuts.append((step, policy.version, batch))
        trainers.append(asyncio.create_task(train(step)))
    await sched.aclose()
    watch.cancel()
    await asyncio.gather(*trainers, watch, return_exceptions=True)
    return cuts, sched, client, env


async def test_synchronous_baseline_is_on_policy(renderer, tmp_path):
    cuts, sched, client, env = await _run(renderer, tmp_path, async_level=0, max_off=8, steps=4, train_s=0.05, delay_fn=lambda r: 0.01)
    for step, version_at_cut, b in cuts:
        assert len(b.rollouts) == 4 and b.max_off_policy == 0
        assert {v for r in b.rollouts for v in r.policy_versions} == {step - 1}  # sampled with exactly N - 1
        assert version_at_cut == step - 1
    assert [v for _, v in client.updates] == [1, 2, 3]
    # every opened episode was closed (including any cancelled at shutdown)
    assert sum(1 for e in env.log if e[0] == "close") == sum(1 for e in env.log if e[0] == "open") >= len(client.calls)


async def test_step_lists_its_groups_in_launch_order(renderer, tmp_path):
    """Groups that finish in reverse launch order (later group ids answer faster) are still listed by group id in
    the step's batch, so the trainer's input does not depend on completion order. Before
    the sort the batch listed the latest-launched group first."""

    def delay(rid):  # rid = "<task>/g<gid>/r<k>": group 0 slowest
        gid = int(rid.split("/g")[1].split("/")[0])
        return 0.02 * (4 - gid % 4)

    cuts, *_ = await _run(renderer, tmp_path, async_level=0, max_off=8, steps=2, train_s=0.01, delay_fn=delay,
                          batch_size=8)  # fmt: skip
    for _, _, b in cuts:
        gids = [r.group_id for r in b.rollouts]
        assert gids == sorted(gids) and len(set(gids)) == 4


@pytest.mark.parametrize("async_level", [1, 2])
def test_never_more_than_async_level_ahead(renderer, tmp_path, async_level):
    cuts, sched, client, env = asyncio.run(
        _run(renderer, tmp_path, async_level=async_level, max_off=8, steps=6, train_s=0.15, delay_fn=lambda r: 0.01)
    )
    for step, version_at_cut, b in cuts:
        assert step <= version_at_cut + 1 + async_level  # the orchestrator is at most async_level steps ahead
        assert all(min(r.policy_versions) >= step - 1 - async_level for r in b.rollouts)
        assert b.max_off_policy == max((step - 1) - min(r.policy_versions) for r in b.rollouts)
    # with a slow trainer the orchestrator does run ahead: some step was cut before version N - 1 existed
    assert any(version_at_cut < step - 1 for step, version_at_cut, _ in cuts)


async def test_stale_groups_dropped_whole(renderer, tmp_path):
    # every rollout of task echo-train-<i> with i % 5 == 0 is slow: its group comes back stale
    def delay(rid):
        idx = int(rid.split("/")[0].rsplit("-", 1)[1])
        return 0.6 if idx % 5 == 0 else 0.005

    cuts, sched, client, env = await _run(
        renderer, tmp_path, async_level=3, max_off=0, steps=8, train_s=0.02, delay_fn=delay, max_inflight=16
    )
    total_dropped = sum(b.dropped_stale_groups for _, _, b in cuts)
    assert total_dropped >= 1 and total_dropped == sched.total_dropped
    for step, _, b in cuts:
        groups = {}
        for r in b.rollouts:
            groups.setdefault(r.group_id, []).append(r)
        assert all(len(g) == 2 for g in groups.values())  # groups are kept or dropped whole
        assert all(off_policy(g, step) <= 0 for g in groups.values())  # nothing staler than max_off_policy_steps
    assert sum(1 for e in env.log if e[0] == "close") == sum(1 for e in env.log if e[0] == "open") >= len(client.calls)


def test_off_policy_hand_worked():
    from prime_rl.envs.base import Task
    from prime_rl.orchestrator.types import Rollout

    t = Task("t", "train", 0, [])
    g = [Rollout(t, "s", policy_versions=[3, 4]), Rollout(t, "s", policy_versions=[5]), Rollout(t, "s", masked=True)]
    assert off_policy(g, 7) == 3  # step 7 trains on top of version 6; oldest token from version 3
    assert off_policy([Rollout(t, "s", masked=True)], 7) == 0


def test_max_inflight_lowered_to_what_the_sources_admit():
    """The capacity clamp: only when every source reports one, to their sum."""
    from prime_rl.orchestrator.scheduler import effective_max_inflight

    a, b = InProcessSource("a", EchoEnv(2)), InProcessSource("b", EchoEnv(2))
    assert effective_max_inflight(32, [a, b]) == 32  # no capacities known
    a.capacity = 4
    assert effective_max_inflight(32, [a, b]) == 32  # b admits any number
    b.capacity = 6
    assert effective_max_inflight(32, [a, b]) == 10 and effective_max_inflight(8, [a, b]) == 8


def test_eval_due_rule():
    """Every `interval` versions from the base policy (0), plus the final one, once each; never without interval."""
    from prime_rl.orchestrator.eval import eval_due

    due = [v for v in range(8) if eval_due(v, interval=3, max_steps=7, evaluated=[])]
    assert due == [0, 3, 6, 7]
    assert not eval_due(3, interval=3, max_steps=7, evaluated=[0, 3])
    assert not any(eval_due(v, interval=None, max_steps=7, evaluated=[]) for v in range(8))



def _fixed_version_scheduler(renderer, *, reported, loaded, async_level, max_off, weights_timeout_s=30.0):
    """A scheduler over a backend that reports policy version `reported` on every result whatever it loads, with
    version `loaded` loaded and no trainer publishing a newer one."""

    class FixedVersionClient(ScriptedClient):
        async def update_weights(self, path, version):  # loads nothing: keeps reporting `reported`
            self.updates.append((path, version))

    src = InProcessSource("echo", EchoEnv(32))
    client = FixedVersionClient(renderer._tokenizer, lambda p, k: "r1", version=reported)
    cfg = OrchestratorConfig(
        batch_size=4, train={"group_size": 2, "sampling": {"max_completion_tokens": 8}}, seq_len=1024,
        concurrency={"max_inflight": 8}, max_async_level=async_level, max_off_policy_steps=max_off,
        weights_timeout_s=weights_timeout_s,
    )  # fmt: skip
    return Scheduler(cfg, sources=[src], stream=TaskStream([src], seed=0), client=client, renderer=renderer,
                     policy=PolicyVersion(loaded))  # fmt: skip


async def test_a_backend_that_reports_an_old_policy_version_stops_the_run(renderer):
    """Version 9 is loaded, step 10 accepts >= 7 (max_off_policy_steps 2), the backend reports 0 on every result: each
    group is dropped as stale and replaced, forever, without the stop (the weights timeout never fires: groups keep
    finishing). The stop comes once 2 batches' rollouts (4 groups of 2) were dropped in a row."""
    from prime_rl.orchestrator.scheduler import STALE_STREAK_BATCHES, StaleGroupsError

    sched = _fixed_version_scheduler(renderer, reported=0, loaded=9, async_level=1, max_off=2)
    try:
        with pytest.raises(StaleGroupsError) as err:
            await asyncio.wait_for(sched.next_batch(10), 120)
        assert len(sched.misreported) == STALE_STREAK_BATCHES * 4 // 2 == 4
        assert all(g.launch_version == 9 for g in sched.misreported)
        msg = str(err.value)
        assert msg.startswith("step 10: 4 rollout groups in a row (8 rollouts) were dropped as stale")
        assert "launched while policy version 9 was loaded" in msg and "report policy version 0," in msg
        assert "(>= 7 = step - 1 - orchestrator.max_off_policy_steps=2)" in msg and "policy_version" in msg
    finally:
        await sched.aclose()
    # the same backend reporting the version it serves: the step is cut, nothing dropped
    sched = _fixed_version_scheduler(renderer, reported=9, loaded=9, async_level=1, max_off=2)
    batch = await asyncio.wait_for(sched.next_batch(10), 120)
    await sched.aclose()
    assert len(batch.rollouts) == 4 and batch.dropped_stale_groups == 0 and sched.misreported == []


async def test_a_step_that_only_drops_stale_groups_times_out(renderer):
    """Version 7 loaded and reported honestly, step 9 accepts only >= 8 (max_off_policy_steps 0) and no trainer
    publishes version 8: every group is stale at launch (not misreported, so no StaleGroupsError), groups keep
    finishing and being dropped. weights_timeout_s bounds the time without a kept group; before, every finished
    group counted as progress and the loop never ended."""
    sched = _fixed_version_scheduler(renderer, reported=7, loaded=7, async_level=1, max_off=0, weights_timeout_s=0.5)
    try:
        with pytest.raises(TimeoutError) as err:
            await asyncio.wait_for(sched.next_batch(9), 120)
    finally:
        await sched.aclose()
    msg = str(err.value)
    assert msg.startswith("step 9: no rollout group kept and no new policy version for 0.5 s (orchestrator.weights")
    assert "were dropped as stale (older than policy version 8 = step - 1 - orchestrator.max_off_policy_steps=0" in msg
    assert sched.misreported == [] and sched.total_dropped >= 1


@pytest.mark.parametrize("max_off", [8, 2])
def test_a_late_group_trains_past_max_async_level_within_max_off_policy_steps(renderer, tmp_path, monkeypatch, max_off):
    """max_async_level 1 with a fast trainer: group 3 is sampled by policy 0, then its environment turn lasts until
    policy 4 is loaded, so later-launched groups fill the steps in between. Cut in completion order, it trains several versions behind
    (beyond max_async_level, the step's Max Off-Policy saying so) while max_off_policy_steps allows it, and is
    dropped as stale when it does not (docs/orchestrator.md, "Staleness")."""
    sample = DelayClient.generate

    async def slow_env_turn(self, prompt_ids, sampling, *, rollout_id=None, **kw):
        out = await sample(self, prompt_ids, sampling, rollout_id=rollout_id, **kw)
        while "/g3/" in rollout_id and self.version < 4:
            await asyncio.sleep(0.005)
        return out

    monkeypatch.setattr(DelayClient, "generate", slow_env_turn)
    cuts, sched, *_ = asyncio.run(
        _run(renderer, tmp_path, async_level=1, max_off=max_off, steps=10, train_s=0.01, delay_fn=lambda r: 0.01)
    )
    late = [(step, b) for step, _, b in cuts if any(r.group_id == 3 for r in b.rollouts)]
    for step, _, b in cuts:
        assert b.max_off_policy == max((step - 1) - min(r.policy_versions) for r in b.rollouts) <= max_off
    if max_off == 8:
        ((step, b),) = late
        assert b.max_off_policy == step - 1 >= 4  # policy 0's tokens, trained once policy 4 is loaded
    else:
        assert late == [] and sched.total_dropped >= 1
