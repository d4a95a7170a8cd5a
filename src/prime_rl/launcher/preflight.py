"""Checks before `rl` starts anything, each needing no running process of the run. Each failure raises
`PreflightError` naming the field and the fix. Which run when: `plan.resolve` (the only caller)."""

from __future__ import annotations

from pathlib import Path

from prime_rl.config.rl import RLConfig, check_seq_len_fits
from prime_rl.launcher.envserver import EnvServerPlan, nemo_sources
from prime_rl.launcher.errors import PreflightError
from prime_rl.launcher.layout import Replica
from prime_rl.ports import names_this_machine, port_free, port_holder, url_host_port
from prime_rl.process import http_json


def check_run_dirs(cfg: RLConfig) -> Path:
    """All sections must share one run directory; returns it (absolute)."""
    dirs = {name: Path(getattr(cfg, name).output_dir).resolve() for name in ("trainer", "orchestrator", "inference")}
    if len(set(dirs.values())) != 1:
        listing = ", ".join(f"{k}.output_dir = {v}" for k, v in dirs.items())
        raise PreflightError(f"the sections must share one run directory, got {listing}; set `output_dir` once at the top")
    return dirs["orchestrator"]


def check_sizes(cfg: RLConfig) -> None:
    from prime_rl.config.orchestrator import batch_size_problem

    orch = cfg.orchestrator
    if (problem := batch_size_problem(orch.batch_size, orch.train, prefix="orchestrator.")) is not None:
        raise PreflightError(problem)


def check_model(cfg: RLConfig) -> None:
    """Every section's `model.name` must resolve (a local model folder, or a hub id downloaded once:
    `prime_rl.models.hub`), and its `model.chat_template` file exist."""
    from prime_rl.launcher.fields import as_set
    from prime_rl.launcher.teacher import check_teacher_model
    from prime_rl.models.hub import ModelNotFoundError, resolve_model

    seen = set()
    for section in ("trainer", "orchestrator", "inference"):
        model = getattr(cfg, section).model
        if model.chat_template is not None and not Path(model.chat_template).expanduser().is_file():
            field, where = as_set(cfg, f"{section}.model.chat_template")
            raise PreflightError(f"{field} = {str(model.chat_template)!r}{where}: no such file")
        if model.name in seen:
            continue
        seen.add(model.name)
        try:
            resolve_model(model.name)
        except ModelNotFoundError as e:
            raise PreflightError(e.named(*as_set(cfg, f"{section}.model.name"))) from None
    check_teacher_model(cfg)  # [teacher]: its model resolves and its tokenizer is the student's


def check_extensions(cfg: RLConfig) -> None:
    """Every registered name or `module:attr` import path the run will load resolves: each source's `env.id`, a
    custom advantage's, a custom loss's and a custom inference backend's `import_path` (nothing is built or called;
    the backend must also load new policy versions).
    Raises PreflightError naming the field, the value and the registered names (RegistryError's message)."""
    from prime_rl.config.orchestrator import CustomAdvantageConfig
    from prime_rl.config.trainer import CustomLossConfig
    from prime_rl.envs.base import ENVS
    from prime_rl.orchestrator.advantages import ADVANTAGES
    from prime_rl.registry import RegistryError
    from prime_rl.trainer.loss import LOSSES

    orch = cfg.orchestrator
    wanted = [(f"orchestrator.train.source[{s.name!r}].env.id", ENVS, s.env.id) for s in orch.train.source]
    wanted += [(f"orchestrator.eval.source[{s.name!r}].env.id", ENVS, s.env.id) for s in orch.eval.source or []]
    if isinstance(orch.advantage, CustomAdvantageConfig):
        wanted.append(("orchestrator.advantage.import_path", ADVANTAGES, orch.advantage.import_path))
    if isinstance(cfg.trainer.loss, CustomLossConfig):
        wanted.append(("trainer.loss.import_path", LOSSES, cfg.trainer.loss.import_path))
    for field, registry, name in wanted:
        if name is None:
            continue
        try:
            registry.get(name, field=field)
        except RegistryError as e:
            raise PreflightError(str(e)) from None
    if orch.backend.type == "custom":  # the orchestrator would refuse it only after every other process started
        from prime_rl.inference.backend import BACKENDS

        field = "orchestrator.backend.import_path"
        try:
            backend = BACKENDS.get(orch.backend.import_path, field=field)
        except RegistryError as e:
            raise PreflightError(str(e)) from None
        if not getattr(backend, "loads_weights", False):
            raise PreflightError(
                f"{field} = {orch.backend.import_path!r}: this backend cannot load new policy versions "
                f"(loads_weights is not True), so training could never sample from the trained policy; use one that "
                f"can (docs/extending.md)"
            )


def check_data(cfg: RLConfig, plans: list[EnvServerPlan]) -> None:
    """Rows of every nemo-gym source exist (or will be written by the launcher); data directories exist."""
    will_write = {p.url for p in plans if p.write_root is not None}
    for path, src in nemo_sources(cfg):
        ts = src.env.taskset
        if ts.task.resources_url.rstrip("/") in will_write or ts.name is not None:
            continue  # rows written by the launcher, or a Hugging Face dataset (checked when the orchestrator loads it)
        if not Path(ts.dataset).is_file():
            raise PreflightError(
                f"{path}.env.taskset.dataset = {str(ts.dataset)!r}: no such file; write the rows with "
                f"`env-server write <env> ROOT` (or let rl write them: leave the server down and keep "
                f"`env_server.auto_start = true`)"
            )
        if cfg.orchestrator.eval.scheduled:
            ev = Path(ts.eval_dataset) if ts.eval_dataset is not None else Path(ts.dataset).parent / "eval.jsonl"
            if not ev.is_file():
                raise PreflightError(
                    f"{path}.env.taskset.eval_dataset: eval rows {str(ev)!r} not found (orchestrator.eval.interval "
                    f"is set); write them with `env-server write`, set `eval_dataset`, or unset the eval interval"
                )
    srcs = list(cfg.orchestrator.train.source) + list(cfg.orchestrator.eval.source or [])
    for src in srcs:
        data_dir = src.env.args.get("data_dir") if src.env.args else None
        if data_dir is not None and not Path(data_dir).is_dir():
            raise PreflightError(f"source {src.name!r}: env.args.data_dir = {data_dir!r} is not a directory")
    if plans and cfg.env_server.data_dir is not None and not Path(cfg.env_server.data_dir).is_dir():
        raise PreflightError(
            f"env_server.data_dir = {str(cfg.env_server.data_dir)!r} is not a directory (ERCOT NP4-180-ER files); "
            f"unset it for the packaged ERCOT 2021-2024 days"
        )


def check_capacity(cfg: RLConfig, plans: list[EnvServerPlan]) -> None:
    """`orchestrator.concurrency.max_inflight` must not exceed what the resources server admits: our own
    server's `env_server.max_concurrent`, or the capacity a running server reports in `/health`."""
    mi = cfg.orchestrator.concurrency.max_inflight
    started = {p.url for p in plans}
    for path, src in nemo_sources(cfg):
        url = src.env.taskset.task.resources_url.rstrip("/")
        if url in started:
            cap, where = cfg.env_server.max_concurrent, "env_server.max_concurrent (the server rl starts)"
        else:
            info = http_json(url + "/health") or {}
            cap = next((info[k] for k in ("max_concurrent", "capacity", "max_sessions") if isinstance(info.get(k), int)), None)
            where = f"the capacity {url}/health reports"
            if cap is None:
                continue
        if mi > cap:
            raise PreflightError(
                f"orchestrator.concurrency.max_inflight ({mi}) is above {where} ({cap}) for {path}: the server "
                f"would answer 503 to the extra sessions; lower max_inflight or raise the server's capacity"
            )


def check_ports(replicas: list[Replica], plans: list[EnvServerPlan], cfg: RLConfig | None = None,
                roles: set[str] | frozenset[str] = frozenset()) -> None:  # fmt: skip
    """Every port rl will bind on this machine (the inference replicas, the env servers it starts, the metrics
    endpoints of the trainer and orchestrator it runs here and the orchestrator's rollout port with
    `rollout_transport.type = "tcp"`, from `cfg` for `roles`) must be free now; fail naming the port, its config
    field and its holder."""
    wanted = [(r.bind_host, r.port, "inference.server.port" + (f" + {r.index} (replica {r.index})" if r.index else ""))
              for r in replicas]
    wanted += [(p.host, p.port, f"the env server for {p.url} ({', '.join(p.sources)})") for p in plans]
    teacher = getattr(cfg, "teacher", None) if cfg is not None else None
    if teacher is not None and (not roles or "inference" in roles):
        wanted.append((teacher.server.host, teacher.server.port, "teacher.server.port (the teacher inference server)"))
    for role in ("trainer", "orchestrator"):
        server = getattr(getattr(cfg, role, None), "metrics_server", None) if cfg is not None else None
        if role in roles and server is not None and server.port:  # port 0: any free port
            wanted.append((server.host, server.port, f"{role}.metrics_server.port"))
    rt = cfg.orchestrator.rollout_transport if cfg is not None else None
    if "orchestrator" in roles and rt is not None and rt.type == "tcp":
        wanted.append((rt.host, rt.port, "rollout_transport.port (the trainer's batches over tcp)"))
    check_free(wanted)


def check_free(wanted: list[tuple[str, int, str]]) -> None:
    """`(host, port, what)`: each port wanted once and free now.

    Raises:
        PreflightError: a port is wanted twice or taken (names it, what wants it and its holder)."""
    seen = set()
    for host, port, what in wanted:
        if port in seen:
            raise PreflightError(f"port {port} is wanted twice ({what}); give each server its own port")
        seen.add(port)
        if not port_free(host, port):
            raise PreflightError(f"port {port} ({what}) is already in use by {port_holder(port)}; stop it or pick another port")


def check_urls(cfg: RLConfig) -> None:
    """Every URL the run connects to is an absolute http(s) URL with a host: `orchestrator.client.base_url` and each
    nemo-gym source's `resources_url` (`localhost:8000` or `htp://x` are refused here, not by a connection error
    once the run is going).

    Raises:
        PreflightError: names the field, the value and the fix."""
    from urllib.parse import urlparse

    from prime_rl.launcher.envserver import nemo_sources

    client = cfg.orchestrator.client
    urls = [(f"orchestrator.client.base_url[{i}]", u) for i, u in enumerate(client.base_url)]
    urls += [(f"{path}.env.taskset.task.resources_url", src.env.taskset.task.resources_url)
             for path, src in nemo_sources(cfg)]  # fmt: skip
    for field, url in urls:
        parsed = urlparse(url)
        try:
            port_ok = parsed.port is None or 0 < parsed.port < 65536
        except ValueError:
            port_ok = False
        if parsed.scheme not in ("http", "https") or not parsed.hostname or not port_ok:
            hint = f"; write it as http://{url}" if "://" not in url else ""
            raise PreflightError(
                f"{field} = {url!r} is not an http(s) URL with a host (e.g. http://127.0.0.1:8000){hint}"
            )


def check_client(cfg: RLConfig, replicas: list[Replica], multi: bool = False) -> list[str]:
    """The inference URLs the orchestrator uses: those of the replicas rl starts when `orchestrator.client.base_url`
    was left unset, and always in a multi-node run (whose config refuses any base_url but the default when it is
    parsed, and whose `configs/rl.toml` carries that default explicitly); an explicit base_url must name the same
    ports. Returns the URLs (the caller sets them on a copy of the config). A custom backend
    (`orchestrator.backend.type = "custom"`) samples from an engine of its own: rl starts no replica for it (the
    caller passes none) and `check_custom_backend` runs instead.

    Raises:
        PreflightError: an explicit base_url names a port rl does not serve, a host that is not this machine (nor
            the replicas' address), or a scheme other than http; `check_custom_backend`'s refusals."""
    if cfg.orchestrator.backend.type != "server":
        check_custom_backend(cfg, multi)
        return []
    urls = [r.url for r in replicas]
    client = cfg.orchestrator.client
    if multi or "base_url" not in client.model_fields_set:
        return urls
    ports = {r.port for r in replicas}
    for url in client.base_url:
        host, port = url_host_port(url)
        served = [r for r in replicas if r.port == port]
        if port in ports and not url.startswith("http://"):
            raise PreflightError(
                f"orchestrator.client.base_url has {url!r} but rl's inference servers speak plain http; write "
                f"http://{host}:{port} or leave base_url unset"
            )
        if port in ports and not any(host in (r.addr, r.bind_host) or names_this_machine(host) for r in served):
            raise PreflightError(
                f"orchestrator.client.base_url has {url!r}, a host other than this machine, but rl starts its "
                f"inference servers here ({', '.join(urls)}); leave base_url unset, name this machine, or run the "
                f"orchestrator beside a server you start yourself"
            )
        if port not in ports:
            raise PreflightError(
                f"orchestrator.client.base_url has {url!r} but rl serves inference at {', '.join(urls)} "
                f"(inference.server.port = {cfg.inference.server.port}, deployment.infer_replicas_per_node = "
                f"{len(replicas)}); make them agree or leave base_url unset"
            )
    return list(client.base_url)


def check_custom_backend(cfg: RLConfig, multi: bool = False) -> None:
    """`orchestrator.backend.type = "custom"`: the backend samples from an engine of its own (its settings in
    `backend.kwargs`) and loads each policy version itself, so rl starts no inference server and refuses what
    would only configure one.

    Raises:
        PreflightError: a multi-node run (its inference nodes would run nothing); an `[inference]` setting or
            `deployment.num_infer_gpus` / `infer_replicas_per_node` set (beside `[teacher]`, `[inference.vllm]`,
            the teacher's defaults, and `num_infer_gpus`, its GPUs, are allowed). Each names the field and the fix."""
    backend = cfg.orchestrator.backend
    what = f"orchestrator.backend.type = 'custom' ({backend.import_path})"
    fix = "or sample from rl's inference servers with orchestrator.backend.type = 'server'"
    if multi:
        raise PreflightError(
            f"{what} in a multi-node run: rl starts no inference server for a custom backend, so the "
            f"deployment.num_infer_nodes = {cfg.deployment.num_infer_nodes} inference node(s) would run nothing; run "
            f"it on one node (deployment.type = 'single-node'), {fix}"
        )
    shared = {"output_dir", "model"} | ({"vllm"} if cfg.teacher is not None else set())
    unused = [f"inference.{name}" for name in _set_fields(cfg.inference) if name.split(".")[0] not in shared]
    unused += [f"deployment.{name}" for name in ("num_infer_gpus", "infer_replicas_per_node")
               if name in cfg.deployment.model_fields_set and (cfg.teacher is None or name != "num_infer_gpus")]
    if unused:
        raise PreflightError(
            f"{unused[0]} is set, but {what} samples from an engine of its own and rl starts no inference server "
            f"for it, so the setting would do nothing; remove it (a custom backend reads its own settings from "
            f"orchestrator.backend.kwargs), {fix}"
        )


def _set_fields(model, prefix: str = "") -> list[str]:
    """The dotted names of the leaf fields set in `model` (pydantic `model_fields_set`, recursively), sorted."""
    out = []
    for name in model.model_fields_set:
        value = getattr(model, name)
        if hasattr(value, "model_fields_set") and value.model_fields_set:
            out += _set_fields(value, f"{prefix}{name}.")
        else:
            out.append(f"{prefix}{name}")
    return sorted(out)


def check_renderer(cfg: RLConfig) -> None:
    """The orchestrator's renderer can be built for its model's tokenizer with the configured
    `orchestrator.renderer` (name known; an explicit `enable_thinking` the renderer honours). Loads the tokenizer
    only (no weights).

    Raises:
        PreflightError: `make_renderer`'s reason, prefixed with the field."""
    from prime_rl.launcher.fields import as_set
    from prime_rl.models.hub import ModelNotFoundError
    from prime_rl.models.renderer import load_tokenizer, make_renderer

    orch = cfg.orchestrator
    field, where = as_set(cfg, "orchestrator.model.name")
    try:
        tokenizer = load_tokenizer(orch.model.name, orch.model.chat_template)
    except ModelNotFoundError as e:
        raise PreflightError(e.named(field, where)) from None
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds; each is this one user error
        reason = " ".join(str(e).split())[:300]
        raise PreflightError(
            f"{field} = {str(orch.model.name)!r}{where}: its tokenizer does not load ({type(e).__name__}: "
            f"{reason}); give a model folder with its tokenizer files (tokenizer.json, tokenizer_config.json)"
        ) from None
    try:
        make_renderer(tokenizer, orch.renderer)
    except ValueError as e:
        raise PreflightError(f"orchestrator.renderer (name = {orch.renderer.name!r}): {e}") from None


def check_context(cfg: RLConfig) -> None:
    """With `inference.vllm.max_model_len` unset, vLLM serves the model's own context (`max_position_embeddings` of
    its config.json): `seq_len` must fit in it. (A set max_model_len is checked by the config itself.)"""
    import json

    from prime_rl.models.hub import resolve_model

    if cfg.inference.vllm.max_model_len is not None:
        return
    cfg_file = Path(resolve_model(cfg.inference.model.name)) / "config.json"
    try:
        ctx = json.loads(cfg_file.read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return
    if isinstance(ctx, int):
        check_seq_len_fits(cfg.orchestrator.seq_len, ctx, f"the model's context length (max_position_embeddings in "
                           f"{cfg_file}, which vLLM serves when inference.vllm.max_model_len is unset)",
                           "set inference.vllm.max_model_len only up to that length", error=PreflightError)  # fmt: skip


def check_prompt_lengths(cfg: RLConfig) -> list[str]:
    """An evenly spaced sample of each built-in or NeMo Gym rows-file source's first prompts must leave room to
    sample within `seq_len` (`prime_rl.orchestrator.lengths`); verifiers tasksets and Hugging Face rows are checked
    by the orchestrator at start. Returns the warnings the orchestrator logs at start about the sources read here:
    an evaluated source's `num_examples` above the size of its eval split (`orchestrator.eval.capped_num_examples`,
    each field named as set).
    Raises PreflightError naming the source and the lengths."""
    import asyncio

    from prime_rl.launcher.fields import as_set
    from prime_rl.models.renderer import load_tokenizer, make_renderer
    from prime_rl.orchestrator.eval import capped_num_examples
    from prime_rl.orchestrator.lengths import PromptTooLong
    from prime_rl.orchestrator.lengths import check_prompt_lengths as check
    from prime_rl.orchestrator.sources import build_source

    orch = cfg.orchestrator
    wanted = [(s, "train") for s in orch.train.source]
    if orch.eval.scheduled:  # the sources the orchestrator evaluates: those with an interval (their own or eval's)
        wanted += [(s, "eval") for s in (orch.eval.source or orch.train.source)
                   if orch.eval.settings_of(s if orch.eval.source else None).interval is not None]  # fmt: skip
    wanted = [(s, split) for s, split in wanted if s.env.id is not None or (
        s.env.taskset.id == "nemo-gym" and s.env.taskset.dataset is not None and Path(s.env.taskset.dataset).is_file())]
    if not wanted:
        return []
    renderer = make_renderer(load_tokenizer(orch.model.name, orch.model.chat_template), orch.renderer)
    built = {}
    try:
        pairs = []
        for source, split in wanted:
            if id(source) not in built:
                built[id(source)] = build_source(source)
            pairs.append((built[id(source)], split))
        check(pairs, renderer, orch.seq_len)
        return capped_num_examples([src for src, split in pairs if split == "eval"], orch.eval, prefix="orchestrator.",
                                   where=lambda field: as_set(cfg, f"orchestrator.{field}")[1])  # fmt: skip
    except PromptTooLong as e:
        raise PreflightError(str(e)) from None
    finally:
        for src in built.values():
            asyncio.run(src.aclose())
