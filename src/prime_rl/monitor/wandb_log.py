"""Weights & Biases logging: one W&B run per run directory, fed from what the run directory already holds.

`metrics.jsonl` stays the source of truth; a `WandbForwarder` follows it and sends to W&B:

- every metric row, under `<process>/<key>` with the process's own step axis `<process>/step` (W&B's
  `define_metric`), so trainer, orchestrator and eval rows, whose steps interleave, share one run;
- for each orchestrator step, its readable rollouts (`rollouts/step_N/traces.jsonl`) as a table
  `orchestrator/rollouts` (rendered conversations with their tool calls, reward, advantage, ...);
- for each eval, its per-task results (`eval/step_N.jsonl`) as a table `eval/results`;
- the resolved configs (`configs/*.toml`, or the running command's config) as the run's config.

`rl` runs one forwarder in the launcher for the whole run (trainer and orchestrator in one W&B run, online or
offline; the children's configs carry no `[wandb]`); `sft`, and `trainer` or `orchestrator` started on their own,
run one in a thread of their own process (rank 0). `offline = true` writes the run under `<run_dir>/wandb/` with no
network (`wandb sync` uploads it later). Needs the `wandb` extra: `pip install 'prime-rl[wandb]'`.
"""

from __future__ import annotations

import json
import os
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prime_rl.config.base import WandbConfig
from prime_rl.monitor.logger import get_logger
from prime_rl.monitor.rundir import RunDir, read_jsonl_rows

log = get_logger("wandb")

TRACE_COLUMNS = ("step", "source", "task_id", "group_id", "reward", "advantage", "masked", "error", "turns",
                 "truncated", "policy_versions", "conversation")  # fmt: skip


class WandbStartError(RuntimeError):
    """The W&B run could not be opened (wandb missing, not logged in, no network); the message says what to do."""


def render_conversation(messages: list[dict[str, Any]]) -> str:
    """Chat messages as readable text: `[role] content`, with tool calls as `-> name(arguments)` lines."""
    out = []
    for message in messages or []:
        role = message.get("role", "?")
        name = f" {message['name']}" if message.get("name") else ""
        text = message.get("content") or ""
        if isinstance(text, list):  # content parts
            text = " ".join(str(p.get("text", p)) if isinstance(p, dict) else str(p) for p in text)
        out.append(f"[{role}{name}] {text}".rstrip())
        for call in message.get("tool_calls") or []:
            fn = call.get("function", call)
            out.append(f"  -> {fn.get('name')}({fn.get('arguments')})")
    return "\n".join(out)


def read_configs(run_dir: Path) -> dict[str, Any]:
    """`configs/<name>.toml` of the run directory as `{name: dict}` (unreadable files are skipped)."""
    out: dict[str, Any] = {}
    for path in sorted(RunDir(Path(run_dir)).configs.glob("*.toml")):
        try:
            out[path.stem] = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError):
            continue
    return out


class WandbForwarder:
    """Follows `run_dir/metrics.jsonl` (rows of `processes`, or all) and logs to one W&B run.

    Args:
        cfg: the `[wandb]` settings (project, name, offline).
        run_dir: the run directory; the offline run goes to `run_dir/wandb/`.
        processes: which rows to forward (None: every process).
        config: the run's config for W&B (default: `configs/*.toml` of the run directory).
        job_type: W&B job type (`rl`, `sft`, `trainer`, ...).

    Raises:
        WandbStartError: at `start`, wandb is not installed or the run could not be opened.
    """

    def __init__(self, cfg: WandbConfig, run_dir: Path, processes: set[str] | None = None,
                 config: dict[str, Any] | None = None, job_type: str = "rl"):  # fmt: skip
        self.cfg, self.run_dir, self.processes = cfg, RunDir(Path(run_dir)), processes
        self.config, self.job_type = config, job_type
        self.run: Any = None
        self._offset = 0
        self._partial = b""
        self._axes: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rows_logged = 0

    # ---- life cycle ----
    def start(self) -> WandbForwarder:
        """Open the W&B run (offline: no network). Rows already in `metrics.jsonl` are forwarded by the next poll
        (a resumed run logs its earlier rows again into a new W&B run)."""
        from prime_rl.extras import MissingExtraError, require

        try:
            wandb = require("wandb", "wandb", "[wandb] logging")
        except MissingExtraError as e:
            raise WandbStartError(f"{e} (or remove [wandb])") from None
        self.run_dir.root.mkdir(parents=True, exist_ok=True)
        config = self.config if self.config is not None else read_configs(self.run_dir.root)
        try:
            self.run = self._init(wandb, config)
        except Exception as e:  # wandb raises several kinds (UsageError, CommError, ...) for login and network
            raise WandbStartError(
                f"W&B run could not start ({type(e).__name__}: {e}); log in (`wandb login` or WANDB_API_KEY), or set "
                f"wandb.offline = true to log without network"
            ) from None
        log.info("W&B run %s (%s)%s", self.run.name, "offline" if self.cfg.offline else self.run.url,
                 f" in {self.run.dir}" if self.cfg.offline else "")  # fmt: skip
        return self

    def _init(self, wandb: Any, config: dict[str, Any]) -> Any:
        return wandb.init(
            project=self.cfg.project,
            name=self.cfg.name or self.run_dir.root.name,
            job_type=self.job_type,
            dir=str(self.run_dir.root),
            config=config,
            mode="offline" if self.cfg.offline else "online",
            settings=wandb.Settings(console="off", silent=True),  # our console has a live view; we say what matters
            reinit="create_new",
        )

    def start_thread(self, interval_s: float = 2.0) -> WandbForwarder:
        """`start()`, then poll every `interval_s` seconds in a daemon thread until `close()`."""
        self.start()

        def loop() -> None:
            while not self._stop.wait(interval_s):
                try:
                    self.poll()
                except Exception as e:  # a logging hiccup must never stop training; say so and go on
                    log.warning("W&B forwarding failed (%s: %s); metrics.jsonl is unaffected", type(e).__name__, e)

        self._thread = threading.Thread(target=loop, name="wandb-forwarder", daemon=True)
        self._thread.start()
        return self

    def close(self, exit_code: int = 0) -> None:
        """Forward what is left, then finish the W&B run (`exit_code` != 0 marks it failed)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.run is None:
            return
        try:
            self.poll()
        finally:
            import wandb

            where = Path(self.run.dir).parent
            self.run.finish(exit_code=exit_code)
            self.run = None
            # finish() can return before wandb-core has written the run (measured with wandb 0.31: an offline
            # .wandb file still at its 7-byte header); teardown waits for the service to flush and stop
            wandb.teardown()
        if self.cfg.offline:
            log.info("W&B offline run: %d rows in %s; upload it with `wandb sync %s`", self.rows_logged, where, where)

    def __enter__(self) -> WandbForwarder:
        return self.start_thread()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(exit_code=0 if exc_type is None else 1)

    # ---- forwarding ----
    def poll(self) -> int:
        """Forward the complete rows appended to `metrics.jsonl` since the last poll; returns how many."""
        with self._lock:
            path = self.run_dir.metrics
            try:
                with open(path, "rb") as f:
                    f.seek(self._offset)
                    chunk = f.read()
            except FileNotFoundError:
                return 0
            self._offset += len(chunk)
            data = self._partial + chunk
            lines = data.split(b"\n")
            self._partial = lines.pop()  # an unfinished last line waits for the next poll
            count = 0
            for line in lines:
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    log.warning("metrics.jsonl: skipped a line that is not JSON: %r", line[:120])
                    continue
                if self.processes is None or row.get("process") in self.processes:
                    self.log_row(row)
                    count += 1
            self.rows_logged += count
            return count

    def _axis(self, process: str) -> None:
        if process not in self._axes:
            self.run.define_metric(f"{process}/step")
            self.run.define_metric(f"{process}/*", step_metric=f"{process}/step")
            self._axes.add(process)

    def log_row(self, row: dict[str, Any]) -> None:
        """One metrics row: numbers and text under `<process>/<key>`, plus the step's tables."""
        process = str(row.get("process", "run"))
        step = int(row.get("step", 0))
        self._axis(process)
        data: dict[str, Any] = {f"{process}/step": step}
        for name, value in row.items():
            if name in ("process", "step") or value is None or isinstance(value, dict | list):
                continue
            key = name if name.startswith(f"{process}/") else f"{process}/{name}"
            data[key] = value
        data.update(self._tables(process, step))
        self.run.log(data)

    def _tables(self, process: str, step: int) -> dict[str, Any]:
        import wandb

        if process == "orchestrator":
            rows = read_jsonl_rows(self.run_dir.rollout_step(step) / "traces.jsonl")
            if rows:
                data = [[*(_cell(r.get(c)) for c in TRACE_COLUMNS[:-1]), render_conversation(r.get("messages"))]
                        for r in rows]  # fmt: skip
                return {"orchestrator/rollouts": wandb.Table(columns=list(TRACE_COLUMNS), data=data)}
        if process == "eval":
            rows = read_jsonl_rows(self.run_dir.eval / f"step_{step}.jsonl")
            if rows:
                cols = list(dict.fromkeys(k for r in rows for k in r))
                return {"eval/results": wandb.Table(columns=cols, data=[[_cell(r.get(c)) for c in cols] for r in rows])}
        return {}


def _cell(value: Any) -> Any:
    """A table cell: numbers, text and booleans as they are; lists and dicts as JSON text."""
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


def is_main_rank() -> bool:
    """True outside torchrun and on global rank 0."""
    return int(os.environ.get("RANK", "0")) == 0


def forwarder_for(cfg: WandbConfig | None, run_dir: Path, command: str, processes: set[str],
                  config: Any = None) -> WandbForwarder | None:  # fmt: skip
    """The forwarder a standalone command (`command`) runs for its own rows (`processes`), or None when `[wandb]`
    is unset or this is not rank 0. `config` (a pydantic model or dict) becomes the W&B config."""
    if cfg is None or not is_main_rank():
        return None
    if hasattr(config, "model_dump"):
        config = {command: config.model_dump(mode="json")}
    return WandbForwarder(cfg, run_dir, processes=processes, config=config, job_type=command)


def run_with_wandb(fn: Callable[[Any], Any], cfg: Any, command: str, processes: set[str]) -> Any:
    """Run `fn(cfg)`; with `cfg.wandb` set, forward this process's metrics rows (`processes`) to W&B meanwhile
    (rank 0 only). The W&B run is finished whether `fn` returns or raises, marked failed unless it returned (or
    exited 0).

    Raises:
        WandbStartError: W&B could not start (before `fn` runs).
    """
    fwd = forwarder_for(getattr(cfg, "wandb", None), Path(cfg.output_dir), command, processes, config=cfg)
    if fwd is None:
        return fn(cfg)
    fwd.start_thread()
    code = 1
    try:
        out = fn(cfg)
        code = 0
        return out
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else int(e.code is not None)
        raise
    finally:
        fwd.close(exit_code=code)
