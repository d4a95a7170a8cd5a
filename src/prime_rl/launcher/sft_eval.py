"""Online environment eval during SFT (`[eval]` in `sft`): `run` is the `sft` command when `[eval]` is set; it
trains with `trainer.sft.run`, handing it an `OnlineEval` as its evaluator.

Rank 0 starts the `inference` command (`[inference]`, serving `model.name`, allowed to load the run's
`weights/`) as a supervised child (`launcher.supervisor.Supervisor`, the same process supervision `rl` uses) and
waits for its `/health`. At every eval step (a multiple of `eval.interval`, and the last step) the trainer has
just published `weights/step_N` (STABLE written); rank 0 then runs `evals` on that one checkpoint
(`orchestrator.eval_cmd.evaluate_steps` with `checkpoints.steps = [N]`): the server loads the weights
(`/update_weights`), the eval sources are scored exactly as `rl`'s and `evals`' evals (avg@k, pass@k per source),
and the results go to `output_dir/eval/<run dir name>/step_N.{jsonl,json}` and `eval` rows of `metrics.jsonl`; the
scores join that step's `sft` metrics and step line. Training waits for the eval (the other ranks at their next
collective), so every score belongs to exactly the published step. The server is stopped when `sft` ends,
however it ends.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from prime_rl.config.eval_backend import ServerBackendConfig
from prime_rl.config.inference import InferenceConfig
from prime_rl.config.orchestrator import EvalCommandConfig
from prime_rl.config.trainer import SFTConfig


def inference_config(cfg: SFTConfig) -> InferenceConfig:
    """The server `sft` starts: `[inference]` (default: serving `model.name`), its logs and weights folder in the
    run directory, `model.name` and `model.chat_template` from the trained model."""
    inf = cfg.inference or InferenceConfig()
    model = inf.model.model_copy(update={"name": cfg.model.name, "chat_template": cfg.model.chat_template})
    server = inf.server.model_copy(update={"weights_dir": Path(cfg.output_dir).resolve() / "weights"})
    return inf.model_copy(update={"model": model, "server": server, "output_dir": Path(cfg.output_dir).resolve()})


def eval_config(cfg: SFTConfig, step: int) -> EvalCommandConfig:
    """The `evals` settings that score published step `step` of this run on `eval.source`."""
    inf = inference_config(cfg)
    url = f"http://{inf.server.host}:{inf.server.port}"
    return EvalCommandConfig(
        model={"name": cfg.model.name, "chat_template": cfg.model.chat_template},
        backend=ServerBackendConfig(base_url=[url]),
        renderer=cfg.renderer,
        eval=cfg.eval.model_copy(update={"interval": None}),  # sft schedules the evals; evals scores this step once
        checkpoints={"run_dir": Path(cfg.output_dir).resolve(), "steps": [step], "plot": False},
        output_dir=Path(cfg.output_dir).resolve(),
        seq_len=cfg.seq_len,
        seed=cfg.seed,
        log=cfg.log,
    )


def run(cfg: SFTConfig) -> dict[str, float] | None:
    """`sft` with `[eval]`: `trainer.sft.run` with an `OnlineEval` (rank 0 starts and uses it)."""
    from prime_rl.monitor.logger import get_logger
    from prime_rl.trainer.sft import run as sft_run

    return sft_run(cfg, evaluator=OnlineEval(cfg, get_logger("sft")))


class OnlineEval:
    """The inference server of one `sft` run and the eval of its published steps (rank 0 only)."""

    def __init__(self, cfg: SFTConfig, log: logging.Logger):
        self.cfg, self.log = cfg, log
        self.sup: Any = None

    def start(self, from_step: int = 0) -> None:
        """Write `configs/sft-inference.toml`, start `inference` and wait for its /health. Stored eval results of
        steps after `from_step` (the step training starts from) belong to weights about to be trained again: they
        are removed (logged), so no score of other weights is read back as this run's.

        Raises:
            ChildFailed: the server exited before it was healthy (names its log).
            LaunchError: no /health within `inference.server.health_timeout_s`.
        """
        import sys

        from prime_rl.config.loader import write_config
        from prime_rl.launcher.health import wait_healthy
        from prime_rl.launcher.supervisor import Supervisor
        from prime_rl.monitor.rundir import RunDir
        from prime_rl.process import ChildSpec

        self._forget_after(from_step)
        inf = inference_config(self.cfg)
        run = RunDir(Path(self.cfg.output_dir).resolve())
        path = write_config(inf, run.configs / "sft-inference.toml")
        spec = ChildSpec("inference", [sys.executable, "-m", "prime_rl.cli.inference", "@", str(path)],
                         run.log_file("inference.console"))  # fmt: skip
        self.sup = Supervisor()
        child = self.sup.start(spec)
        url = f"http://{inf.server.host}:{inf.server.port}/health"
        waited = wait_healthy(url, child, inf.server.health_timeout_s, "inference")
        self.log.info(f"inference healthy after {waited:.1f} s ({url}); eval every {self.cfg.eval.interval} steps")

    def _forget_after(self, from_step: int) -> None:
        from prime_rl.orchestrator.eval_sweep import model_key

        ck = eval_config(self.cfg, from_step).checkpoints
        folder = self.results_dir / model_key(self.cfg.model.name, ck.run_dir)
        stale = [f for f in folder.glob("step_*.json*") if f.name.split(".")[0][5:].isdigit()
                 and int(f.name.split(".")[0][5:]) > from_step]  # fmt: skip
        for file in stale:
            file.unlink()
        if stale:
            self.log.info(f"removed {len(stale)} eval result file(s) of steps after {from_step} from {folder}")

    @property
    def results_dir(self) -> Path:
        """The run's `eval/`: the results go to `eval/<run dir name>/step_N.{jsonl,json}`, beside the eval rows of
        `rl` runs (`evals` alone writes to its `output_dir/<model>/`)."""
        return Path(self.cfg.output_dir).resolve() / "eval"

    def due(self, step: int, last_step: int) -> bool:
        """Whether `step` is an eval step: a multiple of `eval.interval`, or the last step."""
        return step % self.cfg.eval.interval == 0 or step == last_step

    def score(self, step: int) -> dict[str, float]:
        """Score the published `weights/step_<step>` on the eval sources; returns the `eval/...` metrics.

        Raises:
            ChildFailed: the inference server died.
            InferenceError, TimeoutError: the server refused or did not answer.
        """
        from prime_rl.orchestrator.eval_cmd import evaluate_steps

        self.sup.check(set())
        results = asyncio.run(evaluate_steps(eval_config(self.cfg, step), results_dir=self.results_dir))
        if step not in results:
            raise RuntimeError(f"eval of weights/step_{step} produced no result (see {self.cfg.output_dir}/logs)")
        return dict(results[step].metrics)

    def close(self) -> None:
        """Stop the inference server (if started)."""
        if self.sup is not None:
            self.sup.stop_all()
            self.sup = None
