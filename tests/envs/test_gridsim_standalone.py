"""GridSim runs where prime-rl's config stack is not installed: a peer's venv (NeMo Gym's) serves it with only
prime-rl's sources on the path, so the environment must not import `pydantic_config` (through prime_rl.config)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def test_gridsim_builds_without_the_config_stack() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["pydantic_config"] = None  # importing it now raises ImportError, as in a peer venv
        from prime_rl.envs.gridsim.env import GridSimEnv
        env = GridSimEnv(num_train=8, num_eval=4, forward_from="2024-01-01")
        assert env.forward_from == "2024-01-01", env.forward_from
        assert "prime_rl.config" not in sys.modules, sorted(m for m in sys.modules if m.startswith("prime_rl.config"))
        print(len(env.tasks("train")), len(env.tasks("eval")))
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["8", "4"]
