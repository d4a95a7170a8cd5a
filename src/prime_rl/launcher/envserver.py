"""The NeMo Gym resources servers a run needs: which `resources_url`s are not answering, and starting ours there.

A nemo-gym source's rows live at `ROOT/resources_servers/<name>/data/train.jsonl` (the layout `env-server write`
produces). When nothing answers at its (local) `resources_url` and `[env_server] auto_start` is on, the launcher
writes the rows if they are missing (`env-server write <env> ROOT [--data-dir D | --synthetic]
[--forward-from DATE]`) and starts `env-server serve ROOT/resources_servers/<name> --port P --host H
[--masked-as-error] [--idle-timeout S] --max-concurrent N`, as the reference system ran its GridSim server.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from prime_rl.config.orchestrator import SourceConfig
from prime_rl.config.rl import RLConfig
from prime_rl.launcher.errors import PreflightError
from prime_rl.launcher.evolve import evolve, map_sources, with_task
from prime_rl.ports import is_local, url_host_port
from prime_rl.process import ChildSpec, http_ok


@dataclass
class EnvServerPlan:
    """One resources server to start: where it listens and what it serves."""

    url: str
    host: str
    port: int
    serve_dir: Path  # ROOT/resources_servers/<name>
    write_root: Path | None  # ROOT, when rows must be written first
    sources: list[str] = field(default_factory=list)

    @property
    def health_url(self) -> str:
        return self.url.rstrip("/") + "/health"


def nemo_sources(cfg: RLConfig) -> list[tuple[str, SourceConfig]]:
    """`(dotted path, source)` of every train and eval source that plays rows against a resources server."""
    out = []
    for i, source in enumerate(cfg.orchestrator.train.source):
        if source.env.taskset is not None and source.env.taskset.id == "nemo-gym":
            out.append((f"orchestrator.train.source[{i}]", source))
    for i, source in enumerate(cfg.orchestrator.eval.source or []):
        if source.env.taskset is not None and source.env.taskset.id == "nemo-gym":
            out.append((f"orchestrator.eval.source[{i}]", source))
    return out


def rows_root(dataset: Path) -> Path | None:
    """ROOT for `ROOT/resources_servers/<name>/data/<file>.jsonl`, else None."""
    path = Path(dataset)
    if len(path.parts) >= 4 and path.parent.name == "data" and path.parents[2].name == "resources_servers":
        return path.parents[3]
    return None


def check_rows_match(cfg: RLConfig, path: str, serve_dir: Path) -> None:
    """Refuse existing rows written with other GridSim dates than `[env_server]` names (`forward_from`,
    `train_from`, as recorded in their `server.json`): rl would reuse them and train or evaluate on other days.

    Raises:
        PreflightError: the dates differ (names both, the rows folder and the fixes).
    """
    import json

    from prime_rl.envs.nemo_gym.rows import SERVER_CONFIG

    file = serve_dir / SERVER_CONFIG
    try:
        written = json.loads(file.read_text())
    except (OSError, ValueError):
        return  # not rows of `env-server write` (or unreadable): the server's own start reports it
    if not isinstance(written, dict) or written.get("env") != "gridsim" or cfg.env_server.env != "gridsim":
        return
    args = written.get("env_args") if isinstance(written.get("env_args"), dict) else {}
    for key in ("forward_from", "train_from"):
        want = getattr(cfg.env_server, key)
        want = None if want is None else want.isoformat()
        if args.get(key) != want:
            flag = "--" + key.replace("_", "-")
            raise PreflightError(
                f"{path}.env.taskset.dataset: the rows under {serve_dir} were written with {key} = "
                f"{args.get(key)!r} ({file}), but env_server.{key} = {want!r}: rl would reuse them as they are. "
                f"Delete that folder so rl writes them again, write them with `env-server write gridsim ROOT "
                f"{flag} {want}`" + (" (or without it)" if want is None else "") + f", or set env_server.{key} to "
                "match them"
            )


def plan_env_servers(cfg: RLConfig, probe=http_ok) -> list[EnvServerPlan]:
    """The servers the launcher must start (one per distinct URL that does not answer `GET /health`).

    Raises:
        PreflightError: a URL does not answer and is not local, or auto-start is off, or the rows are
            missing and cannot be written (their path is not `ROOT/resources_servers/<name>/data/*.jsonl`).
    """
    plans: dict[str, EnvServerPlan] = {}
    for path, src in nemo_sources(cfg):
        ts = src.env.taskset
        url = ts.task.resources_url.rstrip("/")
        if url in plans:
            plans[url].sources.append(path)
            continue
        if probe(url + "/health"):
            continue
        host, port = url_host_port(url)
        if not is_local(host):
            raise PreflightError(
                f"{path}.env.taskset.task.resources_url = {url!r} does not answer GET /health and is not on this "
                f"machine, so rl cannot start it; start that server or point the URL at a local port"
            )
        if not cfg.env_server.auto_start:
            raise PreflightError(
                f"nothing answers at {path}.env.taskset.task.resources_url = {url!r}; start `env-server serve` "
                f"there or set `env_server.auto_start = true`"
            )
        if ts.dataset is None:
            raise PreflightError(
                f"nothing answers at {path}.env.taskset.task.resources_url = {url!r}, and rl starts a resources server "
                f"only from rows written by `env-server write` (env.taskset.dataset), not from a Hugging Face dataset "
                f"(env.taskset.name); start the server for those rows yourself"
            )
        dataset = Path(ts.dataset)
        root = rows_root(dataset)
        if root is None:
            raise PreflightError(
                f"{path}.env.taskset.dataset = {str(dataset)!r}: rl starts its resources server from rows laid out "
                f"as ROOT/resources_servers/<name>/data/train.jsonl (what `env-server write` produces); "
                f"use that layout or start the server yourself"
            )
        if dataset.is_file():
            check_rows_match(cfg, path, dataset.parents[1])
        plans[url] = EnvServerPlan(
            url=url,
            host="127.0.0.1" if host in ("localhost", "") else host,
            port=port,
            serve_dir=dataset.parents[1],
            write_root=None if dataset.is_file() else root,
            sources=[path],
        )
    return list(plans.values())


def write_args(cfg: RLConfig, plan: EnvServerPlan) -> list[str]:
    """The arguments of `env-server write` for `plan`'s missing rows: `<env> ROOT [--data-dir D | --synthetic]
    [--forward-from DATE] [--train-from DATE]` (from `[env_server]`)."""
    assert plan.write_root is not None
    es = cfg.env_server
    args = [es.env, str(plan.write_root)]
    if es.data_dir is not None:
        args += ["--data-dir", str(es.data_dir)]
    if es.synthetic:
        args += ["--synthetic"]
    if es.forward_from is not None:
        args += ["--forward-from", es.forward_from.isoformat()]
    if es.train_from is not None:
        args += ["--train-from", es.train_from.isoformat()]
    return args


def write_rows(cfg: RLConfig, plan: EnvServerPlan, log: Path, timeout_s: float) -> None:
    """Run `env-server write` with `write_args(cfg, plan)` (output to `log`), bounded by `timeout_s`.

    Raises:
        PreflightError: it failed or timed out (names the log).
    """
    argv = [sys.executable, "-m", "prime_rl.cli.env_server", "write", *write_args(cfg, plan)]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        f.write(f"\n===== prime-rl launcher: {' '.join(argv)}\n".encode())
        f.flush()
        try:
            proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s, start_new_session=True)
        except subprocess.TimeoutExpired:
            raise PreflightError(f"`env-server write` did not finish within {timeout_s:.0f} s; see {log}") from None
    if proc.returncode != 0:
        from prime_rl.process import tail_file

        raise PreflightError(f"`env-server write` failed (exit code {proc.returncode}); last lines of {log}:\n"
                             + tail_file(log, 15))


def serve_spec(cfg: RLConfig, plan: EnvServerPlan, log: Path, name: str = "env-server", token: str | None = None) -> ChildSpec:
    """The `env-server serve` child for `plan`, with the `[env_server]` settings and the bearer `token` the plan
    decided (`bind_plans`)."""
    es = cfg.env_server
    argv = [sys.executable, "-m", "prime_rl.cli.env_server", "serve", str(plan.serve_dir),
            "--host", plan.host, "--port", str(plan.port), "--max-concurrent", str(es.max_concurrent)]
    if es.masked_as_error:
        argv.append("--masked-as-error")
    if es.idle_timeout_s is not None:
        argv += ["--idle-timeout", f"{es.idle_timeout_s:g}"]
    if token is not None:
        argv += ["--token", token]
    return ChildSpec(name=name, argv=argv, log=log)


def bind_plans(cfg: RLConfig, plans: list[EnvServerPlan]) -> tuple[RLConfig, list[EnvServerPlan]]:
    """`env_server.host` overrides the address the servers rl starts bind; one bound to an address other than
    loopback requires a bearer token (`env_server.token`, or a random one when unset), which the sources using
    it get as `task.token`. Returns new config and plans; neither argument is changed.

    Raises:
        PreflightError: a source already has a different `task.token`."""
    import secrets

    if cfg.env_server.host:
        plans = [replace(p, host=cfg.env_server.host) for p in plans]
    if cfg.env_server.token is None and any(p.host not in ("127.0.0.1", "localhost", "::1") for p in plans):
        cfg = evolve(cfg, {"env_server.token": secrets.token_urlsafe(24)})
    return apply_token(cfg, plans), plans


def apply_token(cfg: RLConfig, plans: list[EnvServerPlan]) -> RLConfig:
    """A copy of `cfg` in which every source played against a server rl starts has the server's bearer token
    (`env_server.token`) as `task.token`.

    Raises:
        PreflightError: a source already has a different `task.token`.
    """
    token = cfg.env_server.token
    if token is None:
        return cfg
    urls = {p.url.rstrip("/") for p in plans}

    def give(path: str, src: SourceConfig) -> SourceConfig:
        ts = src.env.taskset
        if ts is None or ts.id != "nemo-gym" or ts.task.resources_url.rstrip("/") not in urls:
            return src
        if ts.task.token not in (None, token):
            raise PreflightError(
                f"{path}.env.taskset.task.token differs from env_server.token, which the server rl starts requires; "
                f"set one of them"
            )
        return with_task(src, token=token)

    return map_sources(cfg, give)


def move_sources(cfg: RLConfig, moved: dict[str, str]) -> RLConfig:
    """A copy of `cfg` whose nemo-gym sources at an old `resources_url` (a key of `moved`) point at the new one."""

    def move(path: str, src: SourceConfig) -> SourceConfig:
        ts = src.env.taskset
        if ts is None or ts.id != "nemo-gym" or ts.task.resources_url.rstrip("/") not in moved:
            return src
        return with_task(src, resources_url=moved[ts.task.resources_url.rstrip("/")])

    return map_sources(cfg, move)


def expected_server(src: SourceConfig) -> str | None:
    """The resources server a nemo-gym source's rows belong to: `<name>` of `ROOT/resources_servers/<name>/data/
    *.jsonl` (the directory `env-server serve` serves, which its `/health` names), else None."""
    ts = src.env.taskset
    if ts.dataset is None or rows_root(Path(ts.dataset)) is None:
        return None
    return Path(ts.dataset).parents[1].name


def check_env_servers(cfg: RLConfig, plans: list[EnvServerPlan], timeout_s: float = 5.0) -> None:
    """What answers at every `resources_url` rl does not start (`plans`) must be the env server the source
    expects: its `GET /health` names the environment (`env`, and `name` = the served directory), and that name is
    the one of the source's rows (`expected_server`). A server whose `/health` names nothing passes only when its
    OpenAPI schema lists NeMo Gym's `/seed_session` and `/verify` routes (another NeMo Gym implementation).

    Raises:
        PreflightError: another environment's server, or something that is not a resources server (names the
            URL, the field and what answered)."""
    import httpx

    started = {p.url.rstrip("/") for p in plans}
    for path, src in nemo_sources(cfg):
        url = src.env.taskset.task.resources_url.rstrip("/")
        if url in started:
            continue
        field = f"{path}.env.taskset.task.resources_url = {url!r}"
        try:
            resp = httpx.get(url + "/health", timeout=timeout_s)
        except httpx.HTTPError as e:
            raise PreflightError(f"{field}: GET /health failed ({type(e).__name__}: {e})") from None
        try:
            body = resp.json()
        except ValueError:
            body = None
        answer = f"HTTP {resp.status_code} {' '.join(resp.text.split())[:200]!r}"
        named = isinstance(body, dict) and isinstance(body.get("env") or body.get("name"), str)
        if not named:
            if _nemo_routes(url, timeout_s):
                continue
            raise PreflightError(
                f"{field} answers GET /health with {answer}, which names no environment, and serves no NeMo Gym "
                f"/seed_session and /verify routes: it is not a resources server. Point resources_url at the env "
                f"server (`env-server serve ROOT/resources_servers/<name>`), or free that port so rl starts its own"
            )
        want = expected_server(src)
        if want is not None and body.get("name") is not None and body.get("name") != want:
            raise PreflightError(
                f"{field} is the env server of {body.get('name')!r} (environment {body.get('env')!r}; /health "
                f"answered {answer}), but the source's rows {str(src.env.taskset.dataset)!r} are {want!r}'s. Point "
                f"resources_url at the server of those rows, or stop the server there so rl starts its own"
            )


def _nemo_routes(url: str, timeout_s: float) -> bool:
    """Whether `url` publishes an OpenAPI schema listing `/seed_session` and `/verify` (a NeMo Gym resources server)."""
    import httpx

    try:
        paths = httpx.get(url + "/openapi.json", timeout=timeout_s).json().get("paths", {})
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    return isinstance(paths, dict) and {"/seed_session", "/verify"} <= set(paths)
