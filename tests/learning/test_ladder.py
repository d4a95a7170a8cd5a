"""The learning ladder's bandit rungs (issue 16 §2), end to end through `rl` on CPU with a fixed seed: RL alone must
take each from a weak start to its target (tests/learning/ladder.py has the runs, docs/learning.md the recorded
seeds). Slow: the digit rung is one `rl` run of 40 steps (about 2-3 minutes on 2 shared cores, vLLM start included),
the tool rung 200 warm-start steps and an `rl` run of 100 steps (11-12 minutes), so it runs under `make test-learning`,
with the GridSim rung (a full `make demo`, then the demo's RL phase from SFT step 300 for each of three seeds).
"""

from __future__ import annotations

import pytest
from tests.learning.ladder import TARGET, digit, tool

pytestmark = pytest.mark.slow


def test_digit_bandit_from_a_random_model(tmp_path):
    r = digit(tmp_path, seed=0)
    assert r["first"] < 0.1, r  # the random model rarely answers a digit, almost never 7
    assert r["last"] >= TARGET["digit"], r


@pytest.mark.learning
def test_tool_bandit_through_the_nemo_gym_server(tmp_path):
    """Seed 0 of the tool rung. Under `make test-learning`, not `make test`: its 100 steps (warm start and two evals
    included) took 8 minutes on 2 quiet cores (11-12 when shared), over the ~3 minutes a `make test` rung may take."""
    r = tool(tmp_path, seed=0)
    assert r["first"] < 0.3, r  # the warm start opens the safe about one time in ten
    assert r["last"] >= TARGET["tool"], r


@pytest.mark.learning
@pytest.mark.parametrize("rung", ["digit", "tool", "gridsim"])
def test_rung_target_holds_in_three_seeds(rung, tmp_path):
    """`make test-learning`: the recorded claim, the target reached with RL seeds 0, 1 and 2 (gridsim: half the gap
    between SFT-300 and SFT-1000 closed; its full demo runs first, ~25-30 minutes, then ~10 minutes a seed; set
    DATA_DIR to the ERCOT xlsx folder to reproduce the recorded numbers)."""
    from tests.learning.ladder import RUNGS

    results = [RUNGS[rung](tmp_path, seed=s) for s in (0, 1, 2)]
    assert all(r["score"] >= TARGET[rung] for r in results), [(r["seed"], r["first"], r["last"], r["score"])
                                                              for r in results]  # fmt: skip
