"""The GridSim rung runs the RL config its three seeds were recorded with (docs/learning.md §2), whatever the demo's
rl.toml says today: `GRIDSIM_RUNG_ARGS` on top of examples/gridsim/rl.toml must give that config. Fast (parsing)."""

from __future__ import annotations

from tests.learning.ladder import GRIDSIM_RUNG_ARGS

from prime_rl.config.loader import parse_config
from prime_rl.config.rl import RLConfig


def test_gridsim_rung_pins_the_recorded_rl_config():
    cfg = parse_config(RLConfig, ["@", "examples/gridsim/rl.toml", *GRIDSIM_RUNG_ARGS], prog="rl")
    o, t = cfg.orchestrator, cfg.trainer
    assert (o.batch_size, o.concurrency.max_inflight, o.train.group_size, o.max_async_level) == (32, 32, 8, 1)
    assert o.advantage.type == "grpo" and o.advantage.std_normalize is False
    assert o.train.sampling.temperature == 0.5 and o.train.sampling.max_completion_tokens == 192
    assert (cfg.max_steps, t.optim.lr, t.scheduler.type, t.loss.type) == (50, 1e-4, "cosine", "dppo_kl")
    assert t.loss.ref_kl_coef == 0
    assert t.diagnostics.kl_to_start and t.diagnostics.kl_to_start_interval == 1
