"""`sft`'s checks that load no model and start nothing, run by `sft --dry-run` (which prints them) and before a run
loads its model: every local data file exists, and every `[[eval.source]]` names a registered environment (an
unknown one would otherwise fail at the first eval, after `eval.interval` steps of training). `sft --dry-run`
also checks that the port of the inference server `[eval]` starts (`inference.server.port`) is free now. A loss
mask with no role on (`data.loss_mask`) is refused when the config is read (`config.sft.LossMaskConfig`).
`evals --dry-run` runs the environment check on its own `[[eval.source]]` (`check_eval_envs`). Both dry runs also
read each built-in eval source's split and warn, as the run does at start, about a `num_examples` above its size
(`eval_split_warnings`); `sft --dry-run` also warns, as the run does at start, about a `val.num_batches` above what
the validation split holds (`val_split_warnings`).

Each failure raises `PreflightError` (exit 2) naming the field, where it was set and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from prime_rl.config.trainer import SFTConfig
from prime_rl.launcher.errors import PreflightError

if TYPE_CHECKING:
    from prime_rl.config.orchestrator import EvalCommandConfig

CHECK_TEXT = {
    "data": "every local data file (data.path, [[data.source]] path, val.data.path) exists",
    "eval environments": "every [[eval.source]] env.id is a registered environment or an import path that imports",
    "eval server port": "the port of the inference server [eval] starts (inference.server.port) is free",
    "val split size": "val.num_batches batches fit in the validation split (rows of local files counted; above it, "
                      "a warning below: the whole split is read)",
    "eval split sizes": "every [[eval.source]] num_examples is within its eval split (built-in environments and NeMo "
                        "Gym rows files; above it, a warning below: the whole split is evaluated)",
}
"""What each check looks at, for the dry run's report."""


def check_sft(cfg: SFTConfig) -> list[str]:
    """Run every check on `cfg`; the names of those that ran (keys of `CHECK_TEXT`).

    Raises:
        PreflightError: a data file is missing, or an eval source's `env.id` is unknown or does not import.
    """
    check_data_files(cfg)
    ran = ["data"]
    if cfg.eval is not None:
        check_eval_envs(cfg)
        ran.append("eval environments")
    return ran


def data_files(cfg: SFTConfig) -> list[tuple[str, Path]]:
    """`(field, path)` of every local file or folder `cfg` reads rows from (Hugging Face dataset names excluded)."""
    out = []
    if cfg.data.path is not None:
        out.append(("data.path", cfg.data.path))
    out += [(f"data.source.{i}.path", s.path) for i, s in enumerate(cfg.data.source) if s.path is not None]
    if cfg.val is not None and cfg.val.data is not None and cfg.val.data.path is not None:
        out.append(("val.data.path", cfg.val.data.path))
    return out


def check_data_files(cfg: SFTConfig) -> None:
    """Every local data file or folder of `cfg` exists (`data_files`).

    Raises:
        PreflightError: names the first missing one, where it was set, the working directory relative paths are
            read from, and the fix."""
    from prime_rl.config.loader import where_set

    for field, path in data_files(cfg):
        if not Path(path).expanduser().exists():
            raise PreflightError(
                f"{field} = {str(path)!r}{where_set(field)}: no such file or folder (relative paths are read from the "
                f"working directory {Path.cwd()}); write the rows there (`prime-rl sft-data`, `prime-rl export-sft`), "
                f"or set {field} to an existing .jsonl/.parquet/... file or dataset folder"
            )


def check_eval_envs(cfg: SFTConfig | EvalCommandConfig) -> None:
    """Every `[[eval.source]]` of `cfg` (`sft`'s or `evals`') with an `env.id` names a registered environment or an
    import path that imports (`envs.base.ENVS`; nothing is built).

    Raises:
        PreflightError: the registry's message (the field, where it was set, the value, the registered names), with
            the source's name."""
    from prime_rl.config.loader import where_set
    from prime_rl.envs.base import ENVS
    from prime_rl.registry import RegistryError

    for i, src in enumerate(cfg.eval.source or []):
        if src.env.id is None:  # a remote taskset: its rows are checked where it is loaded
            continue
        field = f"eval.source.{i}.env.id"
        try:
            ENVS.get(src.env.id, field=f"{field} (source {src.name!r}){where_set(field)}")
        except RegistryError as e:
            raise PreflightError(str(e)) from None


def check_eval_server_port(cfg: SFTConfig) -> None:
    """The port the inference server of `[eval]` binds (`inference.server.host`/`port`, `sft_eval.inference_config`)
    is free now (`launcher.preflight.check_free`, as `rl --dry-run` checks its servers' ports).

    Raises:
        PreflightError: the port is taken (names it, the field, its holder and the fix)."""
    from prime_rl.config.loader import where_set
    from prime_rl.launcher.preflight import check_free
    from prime_rl.launcher.sft_eval import inference_config

    server = inference_config(cfg).server
    field = "inference.server.port"
    if server.port == 0:  # any free port
        return
    check_free([(server.host, server.port, f"{field}{where_set(field)}, the inference server [eval] starts")])


def eval_split_warnings(cfg: SFTConfig | EvalCommandConfig) -> list[str]:
    """The warnings `evals` and `sft`'s eval log at start about `cfg`'s `[[eval.source]]` entries, for their dry
    runs: a `num_examples` above the size of a source's eval split (`orchestrator.eval.capped_num_examples`, the
    field named as set). Only built-in environments and NeMo Gym rows files are read (nothing is started); a source
    whose split cannot be read here gets a line saying so."""
    import asyncio

    from prime_rl.config.loader import where_set
    from prime_rl.orchestrator.eval import capped_num_examples
    from prime_rl.orchestrator.sources import build_source

    lines, built = [], []
    try:
        for src in cfg.eval.source or []:
            rows = src.env.taskset.dataset if src.env.id is None and src.env.taskset.id == "nemo-gym" else None
            if src.env.id is None and (rows is None or not Path(rows).is_file()):
                continue
            try:
                source = build_source(src)
                source.tasks("eval")
            except Exception as e:  # an environment's own failure to load its split: the run meets it at start
                lines.append(f"eval split of source {src.name!r} not read ({type(e).__name__}: {e}); its num_examples "
                             "is checked when evals start")  # fmt: skip
                continue
            built.append(source)
        return capped_num_examples(built, cfg.eval, where=where_set) + lines
    finally:
        for source in built:
            asyncio.run(source.aclose())


def val_split_warnings(cfg: SFTConfig) -> list[str]:
    """The warning `sft` logs at start when `val.num_batches` asks for more conversations than the validation split
    holds (`SFTValConfig.short_split_warning`), for the dry run: the rows of local files are counted (the held-out
    `val.fraction` of each source, or `val.data`); a dataset name or a file that does not load here gets a line
    saying it is checked at start."""
    from prime_rl.config.loader import where_set
    from prime_rl.hf_data import DataLoadError, load_rows

    val = cfg.val
    if val is None or val.num_batches is None:
        return []
    if val.data is not None:
        sources = [("val.data", val.data)]
    else:
        sources = [(f"data.source.{i}", s) for i, s in enumerate(cfg.data.source)] or [("data", cfg.data)]
    num_rows = []
    for field, source in sources:
        if source.path is None:
            return [f"{field}.name = {source.name!r}: its rows are not counted here; val.num_batches is checked "
                    "against the validation split when sft starts"]  # fmt: skip
        try:
            rows = len(load_rows(path=source.path, split=source.split, columns=source.columns, field=field))
        except DataLoadError as e:
            return [f"{e}; val.num_batches is checked against the validation split when sft starts"]
        num_rows.append(rows)
    held = num_rows[0] if val.data is not None else sum(max(1, round(val.fraction * n)) for n in num_rows)
    warning = val.short_split_warning(held, cfg.data.batch_size, sum(num_rows), where_set)
    return [warning] if warning is not None else []


def dry_run_checks(cfg: SFTConfig, name: str = "sft") -> None:
    """`sft --dry-run`'s part before the resolved config is written: run `check_sft` (and, with `[eval]`,
    `check_eval_server_port` and `eval_split_warnings`) and print what was checked and the warnings; a failed check prints `NAME: error: ...` and exits 2 (no
    traceback)."""
    import sys

    try:
        ran = check_sft(cfg)
        if cfg.eval is not None:
            check_eval_server_port(cfg)
            ran.append("eval server port")
    except PreflightError as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None
    found = eval_split_warnings(cfg) if cfg.eval is not None else []
    ran += ["eval split sizes"] if cfg.eval is not None else []
    if cfg.val is not None and cfg.val.num_batches is not None:
        found += val_split_warnings(cfg)
        ran.append("val split size")
    print("checked (no model loaded, nothing started):")
    for check in ran:
        print(f"  ok  {check}: {CHECK_TEXT[check]}")
    for line in found:
        print(f"warning: {line}")


def evals_dry_run_checks(cfg: EvalCommandConfig, name: str = "evals") -> None:
    """`evals --dry-run`'s part before the resolved config is written: `check_eval_envs` (every `[[eval.source]]`
    env.id names a registered environment or an import path that imports), then print what was checked and the
    warnings of `eval_split_warnings`; a failure prints `NAME: error: ...` and exits 2 (no traceback)."""
    import sys

    try:
        check_eval_envs(cfg)
    except PreflightError as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None
    found = eval_split_warnings(cfg)
    print("checked (no model loaded, nothing started):")
    for check in ("eval environments", "eval split sizes"):
        print(f"  ok  {check}: {CHECK_TEXT[check]}")
    for line in found:
        print(f"warning: {line}")
