"""The nemo-gym taskset against the real resources server (in a thread): same reward as in-process, sessions
closed, capacity respected, and a server killed mid-step masks the affected rollouts while the run goes on."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from tests.orchestrator.fakes import CounterEnv, DelayClient, ScriptedClient, tiny_tokenizer, tool_call_text

from prime_rl.config.orchestrator import NemoGymTasksetConfig, OrchestratorConfig, RendererConfig, SamplingConfig
from prime_rl.envs.nemo_gym.rows import task_to_row
from prime_rl.envs.nemo_gym.server import ServerState, serve_in_thread
from prime_rl.models.renderer import make_renderer
from prime_rl.monitor.metrics import read_metrics
from prime_rl.orchestrator.agent import AgentLimits, run_rollout
from prime_rl.orchestrator.main import Orchestrator
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.orchestrator.sources.nemo_gym import NemoGymSource
from prime_rl.transport.atomic import atomic_write_dir
from prime_rl.transport.batch import read_batch


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


def _rows(tmp_path, env):
    d = tmp_path / "data"
    d.mkdir(exist_ok=True)
    for split in ("train", "eval"):
        (d / f"{split}.jsonl").write_text("".join(json.dumps(task_to_row(t)) + "\n" for t in env.tasks(split)))
    return d / "train.jsonl"


def _script(prompt, k):
    if "<tool_response>" not in prompt:
        return tool_call_text("add", {"x": int(re.findall(r"Reach (\d+)\.", prompt)[-1])})
    return "done " + re.findall(r"total=(\d+)", prompt)[-1] if k % 2 else "done, no idea"


async def test_remote_equals_in_process(tmp_path, tok):
    env = CounterEnv(6)
    state = ServerState(env=CounterEnv(6), max_concurrent=4)
    renderer = make_renderer(tok, RendererConfig())
    with serve_in_thread(state) as url:
        src = NemoGymSource("remote", NemoGymTasksetConfig(dataset=_rows(tmp_path, env), task={"resources_url": url}))
        await src.start()
        assert src.capacity == 4
        local = InProcessSource("local", env)
        for i in range(6):
            for k0 in (0, 1):  # answer right, then wrong
                ca, cb = ScriptedClient(tok, _script), ScriptedClient(tok, _script)
                ca._k = cb._k = 0
                ca.calls = [None] * k0
                cb.calls = [None] * k0
                ra = await run_rollout(src.tasks("train")[i], src, ca, renderer, SamplingConfig(), AgentLimits(2048, 64))
                rb = await run_rollout(local.tasks("train")[i], local, cb, renderer, SamplingConfig(), AgentLimits(2048, 64))
                assert not ra.masked, ra.error
                assert ra.reward == rb.reward == float(k0 == 0)  # the answer call has index k0 + 1
                assert ra.samples[0].token_ids == rb.samples[0].token_ids  # same rendering either way
        assert src.tasks("eval")[0].task_id == "counter-eval-0"
        assert state.live == {}  # every session closed
        await src.aclose()


async def test_server_killed_mid_step(tmp_path, tok):
    """Kill the env server during step 2 and bring a fresh one up on the same port: rollouts caught in between are
    masked (never trained as 0), the run completes its steps, and the new server ends with no live session."""
    env = CounterEnv(8)
    rows = _rows(tmp_path, env)
    state_a = ServerState(env=CounterEnv(8))
    cm_a = serve_in_thread(state_a)
    url = cm_a.__enter__()
    port = int(url.rsplit(":", 1)[1])
    cfg = OrchestratorConfig(
        output_dir=tmp_path / "run", batch_size=8, max_steps=4, seq_len=1024, max_async_level=0,
        train={"group_size": 4, "sampling": {"max_completion_tokens": 64},
               "source": [{"name": "remote", "env": {"taskset": {"dataset": str(rows),
                           "task": {"resources_url": url, "retry_deadline_s": 0.5}}}}]},
    )
    src = NemoGymSource("remote", cfg.train.source[0].env.taskset)
    state_b = ServerState(env=CounterEnv(8))
    cm_b = None

    class KillingClient(DelayClient):
        """Call 20 (step 1 takes 16: 8 rollouts x 2 turns) kills server A, waits past the retry deadline, starts B
        on the same port, then answers: the rollouts in flight on A meet a dead server or an unknown session."""

        entered = 0

        async def generate(self, *a, **k):
            nonlocal cm_b
            self.entered += 1
            if self.entered == 20:
                cm_b = serve_in_thread(state_b, port=port)
                await asyncio.to_thread(cm_a.__exit__, None, None, None)
                await asyncio.sleep(0.8)
                await asyncio.to_thread(cm_b.__enter__)
            return await super().generate(*a, **k)

    client = KillingClient(tok, _script, lambda rid: 0.01)
    orch = Orchestrator(cfg, client=client, renderer=make_renderer(tok, cfg.renderer), train_sources=[src], poll_s=0.005, echo=False)

    async def trainer():
        for n in range(1, 5):
            path = cfg.output_dir / "rollouts" / f"step_{n}" / "rank_0.bin"
            while not path.exists():
                await asyncio.sleep(0.005)
            atomic_write_dir(cfg.output_dir / "weights" / f"step_{n}", lambda d: (d / "w").write_bytes(b"x"))

    t = asyncio.create_task(trainer())
    try:
        out = await asyncio.wait_for(orch.run(), 60)
        await t
    finally:
        if cm_b is not None:
            cm_b.__exit__(None, None, None)
        else:
            cm_a.__exit__(None, None, None)
        await src.aclose()
    assert cm_b is not None, "the kill never happened"
    rows_m = read_metrics(cfg.output_dir, "orchestrator")
    assert [r["step"] for r in rows_m] == [1, 2, 3, 4]
    assert sum(r["error_pct"] for r in rows_m) > 0  # some rollouts were caught by the kill
    assert rows_m[-1]["error_pct"] == 0.0  # and the run recovered on the new server
    for m, n in zip(out, range(1, 5), strict=True):
        b = read_batch(cfg.output_dir / "rollouts" / f"step_{n}" / "rank_0.bin")
        assert b.total_loss_tokens == m["loss_tokens"]  # masked rollouts contribute no tokens at all
        assert m["trainable"] <= 8 * (1 - m["error_pct"] / 100) + 1e-9
    assert state_b.live == {}  # every session seeded on the surviving server was closed


def test_taskset_config_takes_the_fields_of_its_kind(tmp_path):
    import pydantic

    from prime_rl.config.orchestrator import SourceConfig
    from prime_rl.orchestrator.sources import build_source

    def _taskset(**kw):  # an env.taskset table, its kind inferred from id as a config file's would be
        return SourceConfig(env={"taskset": kw}).env.taskset

    with pytest.raises(pydantic.ValidationError, match="exactly one of `dataset`"):
        _taskset()
    with pytest.raises(pydantic.ValidationError, match="configure a verifiers taskset"):
        _taskset(dataset=tmp_path / "x.jsonl", args={"n": 1})
    with pytest.raises(pydantic.ValidationError, match="dataset does not apply"):
        _taskset(id="my-taskset", dataset=tmp_path / "x.jsonl")
    with pytest.raises(pydantic.ValidationError, match="name does not apply"):
        _taskset(id="my-taskset", name="some/dataset")
    with pytest.raises(pydantic.ValidationError, match="dataset does not apply"):
        _taskset(id="my-taskset", dataset=tmp_path / "x.jsonl")
    with pytest.raises(pydantic.ValidationError, match="task does not apply"):
        _taskset(id="my-taskset", task={"resources_url": "http://127.0.0.1:1"})
    cfg = SourceConfig(env={"taskset": {"id": "my-taskset", "args": {"n": 1}}})
    try:
        import verifiers  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="verifiers is not installed"):
            build_source(cfg)
    else:
        with pytest.raises(ModuleNotFoundError, match="my-taskset"):
            build_source(cfg)
