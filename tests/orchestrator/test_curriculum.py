"""The difficulty-pool curriculum: weights after a known history, save/restore, and the stream's weighted draws."""

from __future__ import annotations

import json

import pytest
from tests.orchestrator.fakes import EchoEnv
from tests.orchestrator.test_orchestrator_main import tok  # noqa: F401 (fixture)

from prime_rl.config.recipes import CurriculumConfig
from prime_rl.envs.base import Task
from prime_rl.orchestrator.curriculum import DifficultyPool
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.orchestrator.stream import TaskStream
from prime_rl.orchestrator.types import Rollout

CFG = CurriculumConfig(sampler="difficulty_pool", window=4, min_rollouts=3, easy_weight=0.2, hard_weight=0.05)


def _group(task_id: str, rewards, source: str = "s"):
    task = Task(task_id, "train", 0, [])
    return [Rollout(task=task, source=source, reward=r) for r in rewards]


def _pool() -> DifficultyPool:
    pool = DifficultyPool(CFG)
    pool.observe(_group("easy", [1, 1]))
    pool.observe(_group("easy", [1, 1]))  # 4 passes
    pool.observe(_group("hard", [0, 0, 0]))  # 3 failures
    pool.observe(_group("young", [1, 1]))  # 2 < min_rollouts: unknown
    pool.observe(_group("mixed", [1, 0, 1]))
    pool.observe(_group("was_easy", [1, 1, 1, 1]))
    pool.observe(_group("was_easy", [0.5]))  # window 4: 1, 1, 1, 0.5 -> not all passes (threshold 1.0)
    return pool


def test_weights_after_a_known_history():
    pool = _pool()
    assert [pool.weight("s", t) for t in ("easy", "hard", "young", "mixed", "was_easy", "never")] == [
        0.2,
        0.05,
        1.0,
        1.0,
        1.0,
        1.0,
    ]
    assert pool.weight("other", "easy") == 1.0  # keyed by (source, task)
    assert pool.counts() == {"easy": 1, "hard": 1, "mixed": 3}  # young, mixed, was_easy
    # the window slides: [1, 1, 1, 0.5] + three passes = [0.5, 1, 1, 1] (not easy yet); a fourth pushes 0.5 out
    pool.observe(_group("was_easy", [1, 1, 1]))
    assert pool.weight("s", "was_easy") == 1.0
    pool.observe(_group("was_easy", [1]))
    assert list(pool.history[("s", "was_easy")]) == [True, True, True, True] and pool.weight("s", "was_easy") == 0.2


def test_masked_rollouts_are_not_outcomes():
    pool = DifficultyPool(CFG)
    g = _group("t", [0, 0, 0, 1])
    g[3].mask("env/x", "boom")
    pool.observe(g)
    assert list(pool.history[("s", "t")]) == [False, False, False] and pool.weight("s", "t") == 0.05


def test_state_survives_a_json_round_trip():
    pool = _pool()
    state = json.loads(json.dumps(pool.state_dict()))
    restored = DifficultyPool(CFG)
    restored.load_state_dict(state)
    for t in ("easy", "hard", "young", "mixed", "was_easy"):
        assert restored.weight("s", t) == pool.weight("s", t)
        assert list(restored.history[("s", t)]) == list(pool.history[("s", t)])
    # after the restore, the window keeps sliding like the original's
    for p in (pool, restored):
        p.observe(_group("mixed", [1, 1, 1, 1]))
    assert restored.weight("s", "mixed") == pool.weight("s", "mixed") == 0.2


def test_curriculum_config_refuses_min_above_window():
    with pytest.raises(ValueError, match="min_rollouts"):
        CurriculumConfig(window=2, min_rollouts=3)


def test_stream_skips_down_weighted_tasks_and_resumes_identically():
    src = InProcessSource("echo", EchoEnv(10))
    # odd task indices weigh 1e-9: with 60 draws the chance of playing one is below 1e-7
    weight = lambda i, task: 1.0 if task.index % 2 == 0 else 1e-9  # noqa: E731
    stream = TaskStream([src], seed=3, weight=weight)
    drawn = [stream.next()[2].index for _ in range(30)]
    assert all(j % 2 == 0 for j in drawn) and set(drawn) == {0, 2, 4, 6, 8}
    # every epoch (10 tasks) plays its 5 even tasks exactly once
    assert all(sorted(drawn[5 * e : 5 * e + 5]) == [0, 2, 4, 6, 8] for e in range(6))
    state = json.loads(json.dumps(stream.state_dict()))
    after = [stream.next()[2].index for _ in range(10)]
    resumed = TaskStream([src], seed=3, weight=weight)
    resumed.load_state_dict(state)
    assert [resumed.next()[2].index for _ in range(10)] == after
    # no weight: the stream draws exactly as before (no extra RNG draws)
    plain, weighted_one = TaskStream([src], seed=3), TaskStream([src], seed=3, weight=lambda i, t: 1.0)
    assert [plain.next()[1] for _ in range(25)] == [weighted_one.next()[1] for _ in range(25)]


async def test_orchestrator_checkpoints_and_restores_the_pool(tmp_path, tok):  # noqa: F811
    """A 2-step run with the curriculum checkpoints its pool at step 2; a run resumed there starts with the same
    history (and weights), and one without the curriculum leaves the state unread."""
    from tests.orchestrator.fakes import CounterEnv, ScriptedClient
    from tests.orchestrator.test_orchestrator_main import _cfg, _run

    from prime_rl.orchestrator.main import Orchestrator
    from prime_rl.orchestrator.sources import InProcessSource as Src

    cur = {"sampler": "difficulty_pool", "window": 4, "min_rollouts": 4}
    cfg = _cfg(tmp_path, max_steps=2, max_async_level=0, eval={}, ckpt={"interval": 2}, curriculum=cur)
    out, *_ = await _run(cfg, tok, [1, 2])
    assert all({"curriculum/easy_tasks", "curriculum/hard_tasks", "curriculum/mixed_tasks"} <= set(m) for m in out)
    state = json.loads((cfg.output_dir / "checkpoints" / "step_2" / "orchestrator" / "state.json").read_text())
    saved = state["curriculum"]["tasks"]
    assert saved and all(s == "counter" and 1 <= len(h) <= 4 for s, _, h in saved)

    def orch(**kw):
        c = _cfg(tmp_path, max_steps=4, max_async_level=0, eval={}, ckpt={"interval": 2, "resume_step": 2}, **kw)
        o = Orchestrator(c, client=ScriptedClient(tok, lambda p, i: ""), renderer=None,
                         train_sources=[Src("counter", CounterEnv(12))])  # fmt: skip
        o._resume()
        return o

    resumed = orch(curriculum=cur)
    assert [[s, t, [int(x) for x in h]] for (s, t), h in resumed.curriculum.history.items()] == saved
    assert orch().curriculum is None


def test_pool_fields_without_the_pool_are_refused_or_warned(tmp_path):
    """Difficulty-pool fields with the uniform sampler do nothing: refused when `sampler` was never set (naming the
    fields, where they were set and the fix), warned about when it was set to "uniform" (a layered config turning a
    base's pool off), silent with the pool on or nothing set."""
    from prime_rl.config.loader import ConfigError, parse_config
    from prime_rl.config.orchestrator import OrchestratorConfig
    from prime_rl.config.recipes import inert_recipe_settings

    with pytest.raises(ValueError, match=r"curriculum.window, curriculum.easy_weight are set, but curriculum.sampler "
                                         r"= 'uniform'.*set curriculum.sampler = \"difficulty_pool\", or remove them"):
        CurriculumConfig(window=8, easy_weight=0.2)
    with pytest.raises(ValueError, match="curriculum.window is set.*or remove it"):
        CurriculumConfig(window=16)  # the default value, set: still does nothing
    cfg = tmp_path / "cur.toml"
    cfg.write_text("[curriculum]\nwindow = 8\n")
    with pytest.raises(ConfigError, match=rf"curriculum.window is set.*\(curriculum.window in {cfg}\)"):
        parse_config(OrchestratorConfig, ["@", str(cfg)])
    off = OrchestratorConfig(curriculum={"sampler": "uniform", "window": 8, "hard_weight": 0.5, "easy_weight": 0.1})
    [(fields, message)] = inert_recipe_settings(off)
    assert fields == ["curriculum.window", "curriculum.hard_weight"]  # easy_weight 0.1 is the default
    assert "they tune the difficulty pool only" in message
    assert inert_recipe_settings(OrchestratorConfig(curriculum={"sampler": "difficulty_pool", "window": 8})) == []
    assert inert_recipe_settings(OrchestratorConfig()) == []


def test_a_pool_with_both_weights_at_one_is_refused(tmp_path):
    """easy_weight = hard_weight = 1 gives every task weight 1, as the uniform sampler does: the curriculum changes
    nothing, so it is refused naming where each field was set; one weight below 1 is accepted."""
    from prime_rl.config.loader import ConfigError, parse_config
    from prime_rl.config.rl import RLConfig

    flat = DifficultyPool(CFG.model_copy(update={"easy_weight": 1.0, "hard_weight": 1.0}))
    flat.observe(_group("easy", [1, 1, 1]))
    flat.observe(_group("hard", [0, 0, 0]))
    assert [flat.weight("s", t) for t in ("easy", "hard", "never")] == [1.0, 1.0, 1.0]
    run = tmp_path / "rl.toml"
    run.write_text('[orchestrator.curriculum]\nsampler = "difficulty_pool"\neasy_weight = 1.0\n')
    with pytest.raises(ConfigError) as err:
        parse_config(RLConfig, ["@", str(run), "--orchestrator.curriculum.hard-weight", "1"])
    assert (f'`curriculum.sampler = "difficulty_pool"` (in {run}) with `curriculum.easy_weight = 1` (in {run}) and '
            "`curriculum.hard_weight = 1` (from --orchestrator.curriculum.hard-weight) draws every task with weight "
            "1") in str(err.value)
    assert "lower easy_weight or hard_weight below 1" in str(err.value)
    assert parse_config(RLConfig, ["@", str(run)]).orchestrator.curriculum.hard_weight == 0.1
