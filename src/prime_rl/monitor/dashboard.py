"""`prime-rl dashboard RUN_DIR [--port 8765] [--host 127.0.0.1]`: a live web page that follows a run.

A FastAPI app serves one self-contained page (`dashboard_page.html`: no external scripts, fonts or styles) and
`GET /api/state`, which reads the run directory afresh on every call (so the page follows a run while it trains,
and works for a finished one):

- the latest step of each process and `max_steps` (from `configs/`);
- the panels of `prime-rl plot` (`monitor.plots.PANELS`, the reward with its SE band and the evals' task mean ±
  SE) as series for the page's charts;
- the eval tables: per eval step and source, tasks, avg, pass, errors (from `eval/step_N.jsonl`);
- the recent rollouts (the rollout archive's last steps, `archive/step_N/train.jsonl.gz`, up to
  `ROLLOUTS_PER_STEP` a step, one per group first; `rollouts/step_N/traces.jsonl` for a run without an archive):
  reward, advantage, turns and the conversation with its tool calls;
- the processes: each log file's age and last line, and a `GET /health` of the servers the configs name
  (inference, resources servers; 1 s timeout each).

The server binds 127.0.0.1 unless `--host` says otherwise, and warns on any other bind without `--token`; with a
token, every route (the page too) needs it, as `?token=TOKEN` on the page's URL (the page sends it on with its
requests) or `Authorization: Bearer TOKEN`, else 401. It only reads the run directory (no path comes from a
request) and deserialises JSON and TOML only.
"""

from __future__ import annotations

import hmac
import math
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from prime_rl.http import is_loopback
from prime_rl.monitor.archive import archived_steps, read_records, split_file
from prime_rl.monitor.metrics import read_metrics
from prime_rl.monitor.plots import PANELS, eval_curve, series, train_reward_band
from prime_rl.monitor.rundir import RunDir, read_jsonl_rows, step_dirs

PAGE = Path(__file__).with_name("dashboard_page.html")
RECENT_STEPS = 3
ROLLOUTS_PER_STEP = 8


def _finite(value: Any) -> Any:
    return value if not (isinstance(value, float) and not math.isfinite(value)) else None


def json_safe(value: Any) -> Any:
    """`v` with NaN and infinities as None and anything JSON cannot hold as text (a browser's JSON.parse rejects
    NaN)."""
    if isinstance(value, dict):
        return {str(k): json_safe(x) for k, x in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(x) for x in value]
    if isinstance(value, float):
        return _finite(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    return str(value)


def _configs(run: RunDir) -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(run.configs.glob("*.toml")) if run.configs.is_dir() else []:
        try:
            out[path.stem] = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError):
            continue
    return out


def max_steps(configs: dict[str, dict[str, Any]]) -> int | None:
    """`max_steps` of the run (rl, orchestrator, trainer or sft config, first that has it)."""
    for name in ("rl", "orchestrator", "trainer", "sft"):
        value = configs.get(name, {}).get("max_steps")
        if isinstance(value, int):
            return value
    return None


def health_urls(configs: dict[str, dict[str, Any]]) -> dict[str, str]:
    """`{name: health URL}` of the servers the run's configs name: the inference server(s) the orchestrator uses
    and the resources servers of its nemo-gym sources."""
    out: dict[str, str] = {}
    orch = configs.get("orchestrator") or configs.get("rl", {}).get("orchestrator") or {}
    for i, url in enumerate((orch.get("client") or {}).get("base_url") or []):
        out["inference" if i == 0 else f"inference-{i}"] = url.rstrip("/") + "/health"
    sources = list((orch.get("train") or {}).get("source") or []) + list((orch.get("eval") or {}).get("source") or [])
    for src in sources:
        url = (((src.get("env") or {}).get("taskset") or {}).get("task") or {}).get("resources_url")
        if url:
            out.setdefault(f"env {src.get('name', 'source')}", url.rstrip("/") + "/health")
    return out


def _probe(url: str) -> str:
    import httpx

    try:
        resp = httpx.get(url, timeout=1.0)
    except httpx.HTTPError as e:
        return f"unreachable ({type(e).__name__})"
    return "healthy" if resp.status_code == 200 else f"HTTP {resp.status_code}"


def processes(run: RunDir, configs: dict[str, dict[str, Any]], probe=_probe) -> list[dict[str, Any]]:
    """One row per log file (`name`, `age_s` since its last write, `last_line`) and per server (`name`, `health`)."""
    rows: list[dict[str, Any]] = []
    now = time.time()
    for path in sorted(run.logs.glob("*.log")) if run.logs.is_dir() else []:
        try:
            st = path.stat()
            with open(path, "rb") as f:
                f.seek(max(0, st.st_size - 4096))
                tail = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            continue
        rows.append({"name": path.stem, "kind": "log", "age_s": round(now - st.st_mtime, 1),
                     "last_line": tail[-1][-300:] if tail else ""})  # fmt: skip
    for name, url in health_urls(configs).items():
        rows.append({"name": name, "kind": "server", "url": url, "health": probe(url)})
    return rows


def eval_tables(run: RunDir) -> list[dict[str, Any]]:
    """Per eval step and source: tasks, avg (mean of the per-task avg), pass rate, rollouts with errors."""
    out = []
    files = sorted((int(p.stem[5:]), p) for p in run.eval.glob("step_*.jsonl") if p.stem[5:].isdigit()) if run.eval.is_dir() else []
    for step, path in files:
        by_src: dict[str, list[dict[str, Any]]] = {}
        for row in read_jsonl_rows(path):
            by_src.setdefault(str(row.get("source", "")), []).append(row)
        for src, rows in sorted(by_src.items()):
            avgs = [r["avg"] for r in rows if isinstance(r.get("avg"), int | float)]
            out.append({
                "step": step, "source": src, "tasks": len(rows),
                "avg": sum(avgs) / len(avgs) if avgs else None,
                "pass": sum(bool(r.get("pass")) for r in rows) / len(rows) if rows else None,
                "errors": sum(len(r.get("errors") or []) for r in rows),
            })  # fmt: skip
    return out


def archived_rollouts(run: RunDir, n_steps: int = RECENT_STEPS, per_step: int = ROLLOUTS_PER_STEP) -> list[dict[str, Any]]:
    """Up to `per_step` train rollouts (one per group first) of each of the last `n_steps` archived steps, newest
    first, in the fields `recent_rollouts` gives."""
    out = []
    for step in reversed(archived_steps(run.root)[-n_steps:]):
        recs = read_records(split_file(run.root, step, "train"))
        groups: set = set()
        firsts = [r for r in recs if r.get("group_id") not in groups and not groups.add(r.get("group_id"))]
        picked = (firsts + [r for r in recs if all(r is not f for f in firsts)])[:per_step]
        out += [{"task_id": r.get("task_id"), "source": r.get("source"), "reward": r.get("reward"),
                 "advantage": r.get("advantage"), "masked": r.get("masked"),
                 "error": f"{r['error_kind']}: {r.get('error_message')}" if r.get("error_kind") else None,
                 "turns": r.get("num_turns"), "truncated": r.get("truncated"),
                 "policy_versions": r.get("policy_versions"), "messages": r.get("messages"), "step": step}
                for r in picked]  # fmt: skip
    return out


def recent_rollouts(run: RunDir, n_steps: int = RECENT_STEPS) -> list[dict[str, Any]]:
    """The rollouts of the last `n_steps` steps, newest first (step, task, reward, ..., messages): from the rollout
    archive (`archived_rollouts`), else the traced ones (`rollouts/step_N/traces.jsonl`)."""
    if archived_steps(run.root):
        return archived_rollouts(run, n_steps)
    out = []
    for step, step_dir in reversed(step_dirs(run.rollouts)[-n_steps:]):
        for row in read_jsonl_rows(step_dir / "traces.jsonl"):
            out.append({k: row.get(k) for k in ("task_id", "source", "reward", "advantage", "masked", "error", "turns",
                                               "truncated", "policy_versions", "messages")} | {"step": step})  # fmt: skip
    return out


def state(run_dir: Path, probe=_probe) -> dict[str, Any]:
    """Everything the page shows, read from `run_dir` now (JSON-ready; NaN and infinities as null)."""
    run = RunDir(Path(run_dir))
    rows = read_metrics(run.root)
    configs = _configs(run)
    by_proc: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_proc.setdefault(str(row.get("process")), []).append(row)
    latest = {p: max(int(r["step"]) for r in rs) for p, rs in by_proc.items()}
    panels = [{
        "name": "reward", "title": "Reward", "ylabel": "reward", "log": False,
        "lines": [{"label": "train (batch mean ± SE)", "points": [[s, m, e] for s, m, e in train_reward_band(by_proc.get("orchestrator", []))]},
                  {"label": "eval (task mean ± SE)", "points": [[s, m, e] for s, m, e in eval_curve(run.root)]}],
    }]  # fmt: skip
    for panel in PANELS:
        lines = [{"label": ln.label, "points": [[s, v] for s, v in series(by_proc.get(ln.process, []), ln.key, ln.scale)]}
                 for ln in panel.lines]  # fmt: skip
        panels.append({"name": panel.name, "title": panel.title, "ylabel": panel.ylabel, "log": panel.log,
                       "lines": [ln for ln in lines if ln["points"]]})  # fmt: skip
    last_rows = {p: max(rs, key=lambda r: (int(r["step"]), r.get("time", 0))) for p, rs in by_proc.items()}
    return {
        "run": run.root.name,
        "run_dir": str(run.root.resolve()),
        "time": time.time(),
        "max_steps": max_steps(configs),
        "latest_step": latest,
        "last_rows": {p: {k: _finite(v) for k, v in r.items() if isinstance(v, int | float | str) or v is None}
                      for p, r in last_rows.items()},  # fmt: skip
        "panels": [p for p in panels if any(ln["points"] for ln in p["lines"])],
        "evals": eval_tables(run),
        "rollouts": recent_rollouts(run),
        "processes": processes(run, configs, probe),
    }


def token_matches(token: str, authorization: str | None, query_token: str | None) -> bool:
    """Whether a request carries `token`, as `Authorization: Bearer TOKEN` or the `token` query parameter
    (compared in constant time)."""
    scheme, _, given = (authorization or "").partition(" ")
    candidates = [given] if scheme.lower() == "bearer" else []
    candidates += [query_token] if query_token is not None else []
    return any(hmac.compare_digest(c.encode(), token.encode()) for c in candidates)


def exposure_warning(host: str, token: str | None) -> str | None:
    """The warning for a bind other than loopback without a token (None otherwise)."""
    if token or is_loopback(host):
        return None
    return (f"warning: binding {host} without --token: anyone who reaches the port can read this run (metrics, "
            "rollouts with their conversations, log lines, server URLs); pass --token TOKEN and open "
            "http://HOST:PORT/?token=TOKEN")


def create_app(run_dir: Path, token: str | None = None) -> Any:
    """The FastAPI app of the dashboard of `run_dir`; with `token`, every route answers 401 to a request that does
    not carry it (`token_matches`)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import HTMLResponse, JSONResponse

    app = FastAPI(title="prime-rl dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    page = PAGE.read_text()

    if token:

        @app.middleware("http")
        async def require_token(request: Request, call_next: Any) -> Any:
            if not token_matches(token, request.headers.get("authorization"), request.query_params.get("token")):
                return JSONResponse({"error": "this dashboard needs its token: open /?token=TOKEN"}, 401)
            return await call_next(request)

    @app.get("/", response_class=HTMLResponse)
    def index() -> str:
        return page

    @app.get("/api/state")
    def api_state() -> JSONResponse:
        return JSONResponse(json_safe(state(run_dir)))

    @app.get("/favicon.ico")
    def favicon() -> HTMLResponse:
        return HTMLResponse(status_code=204)

    return app


def run(cfg: Any) -> None:
    """`prime-rl dashboard`: serve the page until Ctrl-C.

    Raises:
        FileNotFoundError: RUN_DIR does not exist.
        PortInUseError: the port is taken (names its holder).
    """
    import uvicorn

    from prime_rl.ports import check_port_free

    run_dir = Path(cfg.run)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist (the output_dir of rl or sft)")
    check_port_free(cfg.host, cfg.port, field="port")
    warning = exposure_warning(cfg.host, cfg.token)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    query = "/?token=TOKEN" if cfg.token else ""
    print(f"dashboard of {run_dir.resolve()} on http://{cfg.host}:{cfg.port}{query} (Ctrl-C stops it)", flush=True)
    uvicorn.run(create_app(run_dir, cfg.token), host=cfg.host, port=cfg.port, log_level="warning", access_log=False)
