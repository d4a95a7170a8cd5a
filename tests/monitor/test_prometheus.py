"""The operator metrics endpoint (`metrics_server`): scraped over HTTP during a short orchestrator run (4 rollouts a
step, one in four scored NaN and masked) and from the trainer's recorder, parsed with prometheus_client's text
parser; values checked against the run's own metrics rows. Off by default; a non-loopback bind is warned about."""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.orchestrator.fakes import ScriptedClient
from tests.orchestrator.test_nothing_silent import CycleEnv
from tests.orchestrator.test_run_outcomes import _cfg, renderer  # noqa: F401 (fixture)

from prime_rl.config.metrics_server import MetricsServerConfig
from prime_rl.config.trainer import TrainerConfig
from prime_rl.monitor.metrics import read_metrics
from prime_rl.monitor.prometheus import OperatorMetrics, is_loopback
from prime_rl.orchestrator import main as om
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.transport.atomic import atomic_write_dir


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """GET /metrics and parse it: {(sample name, sorted labels): value}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}  # fmt: skip


async def test_scrape_during_an_orchestrator_run(renderer, tmp_path):  # noqa: F811
    cfg = _cfg(tmp_path, metrics_server={"port": 0})
    orch = om.Orchestrator(cfg, client=ScriptedClient(renderer._tokenizer, lambda p, k: "x"), renderer=renderer,
                           train_sources=[InProcessSource("mix", CycleEnv([math.nan, 1.0, 0.0, 1.0]))], poll_s=0.005,
                           echo=False)  # fmt: skip
    scrapes: dict[int, dict] = {}

    async def trainer():  # scrapes after each step, before publishing its version (max_async_level = 0: the run waits)
        for n in itertools.count(1):
            while not (cfg.output_dir / "rollouts" / f"step_{n}" / "rank_0.bin").exists():
                await asyncio.sleep(0.005)
            for _ in range(1000):  # the step's row follows its rank files within the same call
                got = await asyncio.to_thread(scrape, orch.prom.port)
                if got.get(("prime_rl_step", (("process", "orchestrator"),))) == n:
                    break
                await asyncio.sleep(0.005)
            scrapes[n] = got
            atomic_write_dir(cfg.output_dir / "weights" / f"step_{n}", lambda d: (d / "x").write_bytes(b"x"))

    t = asyncio.create_task(trainer())
    try:
        await asyncio.wait_for(orch.run(), 60)
    finally:
        t.cancel()
    rows = read_metrics(cfg.output_dir, "orchestrator")
    # step 3 is the last: the run ends (and the endpoint with it) without waiting for its version, so its scrape
    # happens only when the machine is slow enough for the trainer to get there before the run closes
    assert sorted(scrapes)[:2] == [1, 2] and set(scrapes) <= {1, 2, 3}
    p = (("process", "orchestrator"),)
    for n, s in scrapes.items():
        done = rows[:n]
        assert s[("prime_rl_step", p)] == n
        assert s[("prime_rl_rollouts_total", p)] == 4 * n
        kinds = {k.removeprefix("errors/") for r in done for k in r if k.startswith("errors/")}
        assert kinds == {"env/invalid_reward"}
        assert s[("prime_rl_rollout_errors_total", (("kind", "env/invalid_reward"), *p))] == n  # one NaN a step
        assert s[("prime_rl_tokens_total", p)] == pytest.approx(sum(r["seq_len_mean"] * 4 for r in done))
        assert s[("prime_rl_rollouts_per_second", p)] == pytest.approx(4 / rows[n - 1]["step_time_s"])
        assert s[("prime_rl_policy_version", p)] == rows[n - 1]["policy_version"] == n - 1
        assert s[("prime_rl_off_policy_steps", p)] == rows[n - 1]["max_off_policy"]
        assert (("prime_rl_queue_size", (("process", "orchestrator"), ("queue", "ready_groups")))) in s
    with pytest.raises(OSError):  # closed with the run
        scrape(orch.prom.port)


def test_trainer_recorder_and_loopback_warning(caplog):
    assert TrainerConfig().metrics_server is None  # off by default
    rec = OperatorMetrics("trainer", MetricsServerConfig(port=0)).start()
    try:
        rec.trainer_step(1, {"tokens": 100.0, "tokens_per_s": 50.0, "mismatch_kl": 0.002, "step_time_s": 2.0})
        rec.trainer_step(2, {"tokens": 60.0, "tokens_per_s": 30.0, "mismatch_kl": 0.001, "step_time_s": 2.0})
        s = scrape(rec.port)
    finally:
        rec.close()
    p = (("process", "trainer"),)
    assert s[("prime_rl_step", p)] == 2 and s[("prime_rl_policy_version", p)] == 2
    assert s[("prime_rl_tokens_total", p)] == 160.0 and s[("prime_rl_tokens_per_second", p)] == 30.0
    assert s[("prime_rl_mismatch_kl", p)] == 0.001 and s[("prime_rl_step_time_seconds", p)] == 2.0
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("example.org")
    wide = OperatorMetrics("trainer", MetricsServerConfig(host="0.0.0.0", port=0))
    with caplog.at_level(logging.WARNING):
        wide.start()
    wide.close()
    assert "metrics_server.host = '0.0.0.0' is not loopback" in caplog.text


def test_scrape_during_a_trainer_run(tiny_model_dir, tmp_path):
    """The RL trainer (in this process, tiny model) with `metrics_server`: scraped after step 2 while it waits for
    step 3's batch; the values equal its metrics rows."""
    import threading
    import time

    from tests.trainer.helpers import make_samples, trainer_config, write_stream

    from prime_rl.ports import free_port
    from prime_rl.trainer import rl

    samples = make_samples(tiny_model_dir, n=4, seed=0)
    run, port = tmp_path / "run", free_port()
    write_stream(run, {1: samples, 2: samples})
    cfg = trainer_config(tiny_model_dir, run, max_steps=3, data_timeout_s=120, metrics_server={"port": port})
    errors: list[BaseException] = []
    t = threading.Thread(target=lambda: _catch(errors, rl.run, cfg))
    t.start()
    p = (("process", "trainer"),)
    try:
        s: dict = {}
        for _ in range(2000):  # until step 2 is recorded (the trainer then waits for step 3's batch)
            if errors:
                raise errors[0]
            try:
                s = scrape(port)
            except OSError:  # not listening yet
                s = {}
            if s.get(("prime_rl_step", p)) == 2:
                break
            time.sleep(0.05)
        rows = read_metrics(run, "trainer")
        assert [r["step"] for r in rows] == [1, 2]
        assert s[("prime_rl_policy_version", p)] == 2
        assert s[("prime_rl_tokens_total", p)] == sum(r["tokens"] for r in rows)
        assert s[("prime_rl_tokens_per_second", p)] == rows[1]["tokens_per_s"]
        assert s[("prime_rl_mismatch_kl", p)] == rows[1]["mismatch_kl"]
    finally:
        write_stream(run, {3: samples})
        t.join(120)
    assert not errors and not t.is_alive()
    with pytest.raises(OSError):  # closed with the run
        scrape(port)


def _catch(errors, fn, *args):
    try:
        fn(*args)
    except BaseException as e:  # noqa: BLE001 (reported by the test thread)
        errors.append(e)
