"""`benchmarks/_peer_compare.py` (issue 17's prime-rl vs TRL table): the step-parts breakdown and the table's ratios,
on hand-made metrics rows (the runs themselves need vLLM and TRL's venv: `benchmarks/peer_trl.py --compare`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _pc():
    sys.path.insert(0, str(REPO / "benchmarks"))
    import _peer_compare

    return _peer_compare


def test_step_parts_are_medians_over_steps_2_to_n_and_skip_missing_fields():
    pc = _pc()
    trainer = [{"step": i, "data_wait_s": [9.0, 0.1, 0.4, 0.2][i - 1], "step_time_s": 0.3} for i in range(1, 5)]
    orch = [{"step": i, "wait_s": 0.05, "weight_load_s": None} for i in range(1, 5)]
    parts = pc.step_parts(trainer, orch)
    assert parts["trainer: waiting for its batch"] == 0.2  # median of 0.1, 0.4, 0.2 (step 1's 9.0 left out)
    assert parts["trainer: forward, backward, optimizer"] == 0.3
    assert parts["orchestrator: waiting for rollouts at the cut"] == 0.05
    assert not any("publish" in k or "weight update" in k for k in parts)  # absent / None: not reported as 0


def test_table_ratios():
    pc = _pc()
    w = pc.workloads(None)["digit"]
    prime = {"step_s": 0.5, "rollouts_per_step": 64, "tokens_per_step": 2000, "peak_gib": {"trainer": 1.0},
             "eval": (0.5, 0.1), "wall_s": 60, "parts": {"trainer: publishing the policy version": 0.02}}  # fmt: skip
    trl = {"step_s": 0.2, "rollouts_per_step": 64, "tokens_per_step": 2000, "peak_gib": {"trl": 1.0},
           "eval": (0.4, 0.1), "wall_s": 20}  # fmt: skip
    text = pc.table(w, Path("m"), 40, prime, trl)
    assert "| 0.500 | 0.200 | 2.50 |" in text  # step time 0.5 / 0.2
    assert "| 128.0 | 320.0 | 0.40 |" in text  # rollouts/s 64 / 0.5 and 64 / 0.2
    assert "+0.100 (difference)" in text
    assert "| trainer: publishing the policy version | 0.020 |" in text


def test_reasoning_gym_workload_trains_on_the_examples_items():
    """TRL's side gets examples/reasoning_gym/rl.toml's env.args and learning rate, so both sides see the same items."""
    import tomllib

    pc = _pc()
    w = pc.workloads(None)["reasoning-gym"]
    cfg = tomllib.loads((REPO / "examples/reasoning_gym/rl.toml").read_text())
    (src,) = cfg["orchestrator"]["train"]["source"]
    assert w.env_args == src["env"]["args"] and w.config == REPO / "examples/reasoning_gym/rl.toml"
    assert w.trl["lr"] == cfg["trainer"]["optim"]["lr"]
    assert w.trl["max-completion-tokens"] == cfg["orchestrator"]["train"]["sampling"]["max_completion_tokens"]
    assert w.trl["prompts-per-step"] * w.trl["group-size"] == cfg["orchestrator"]["batch_size"]


def test_trl_eval_config_of_the_reasoning_gym_run_is_one_evals_accepts(tmp_path):
    """The eval that scores TRL's model takes the prime-rl run's resolved orchestrator config (as `rl` writes it,
    here by a dry run of examples/reasoning_gym/rl.toml): a train source copied whole into [[eval.source]] carried
    `ratio`, which evals refuses as a train-only setting, so the comparison failed after TRL had trained."""
    import subprocess
    import tomllib

    import tomli_w

    from prime_rl.config.loader import parse_config
    from prime_rl.config.orchestrator import EvalCommandConfig
    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.ports import free_port

    pc = _pc()
    run = tmp_path / "run"
    r = subprocess.run([str(Path(sys.executable).parent / "rl"), "@", "examples/reasoning_gym/rl.toml", "--model.name",
                        str(cached_tiny_model()), "--seq-len", "512", "--output-dir", str(run), "--inference.server.port", str(free_port()), "--dry-run"],
                       cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    orch = tomllib.loads((run / "configs" / "orchestrator.toml").read_text())
    assert orch["train"]["source"][0]["ratio"] == 1.0  # what made the whole-source copy fail
    cfg = pc.trl_eval_config(tmp_path / "trl-model", orch, tmp_path / "eval", 8123)
    path = tmp_path / "eval.toml"
    path.write_text(tomli_w.dumps(cfg))
    ev = parse_config(EvalCommandConfig, ["@", str(path)])
    (src,) = ev.eval.source
    train = orch["train"]["source"][0]
    assert src.name == train["name"] and src.env.args == train["env"]["args"]  # the run's items and reward
    assert src.env.args["reward"] == "exact"
    assert ev.eval.rollouts_per_example == orch["eval"]["rollouts_per_example"] == 4
    assert ev.eval.sampling.max_completion_tokens == orch["eval"]["sampling"]["max_completion_tokens"]


def test_reuse_prime_refuses_a_run_without_evals(tmp_path):
    pc = _pc()
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "orchestrator.toml").write_text("")
    with pytest.raises(FileNotFoundError, match="no step_N.jsonl"):
        pc.reuse_prime(tmp_path)
