"""Configuration of the `rl` launcher: trainer, orchestrator and inference sections plus shared fields.

Shared top-level fields (`model`, `max_steps`, `seq_len`, `output_dir`, `ckpt`, `wandb`, `rollout_transport`,
`weight_transport`) are copied into every section that has them. Setting a shared field both at the top and in a section with different values is an error.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from prime_rl.config.base import BaseConfig, CheckpointConfig, LogConfig, ModelConfig, WandbConfig
from prime_rl.config.deployment import PORT_WEIGHTS, DeploymentConfig, SlurmConfig, check_slurm_nodes
from prime_rl.config.inference import SAMPLES_FOR_TRAINING, InferenceConfig, distribution_flags, flag_name
from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.config.recipes import SIGNAL_DECIDED_BY_RL, gate_beside_kl_problem, lone_group_problem
from prime_rl.config.rollout_transport import ENV_TOKEN, RolloutTransportConfig
from prime_rl.config.teacher import TeacherServerConfig, check_teacher, check_teacher_server, teacher_term
from prime_rl.config.trainer import TrainerConfig
from prime_rl.config.weight_transport import WeightTransportConfig

SHARED_FIELDS = ("model", "max_steps", "seq_len", "output_dir", "ckpt", "wandb", "rollout_transport", "weight_transport")
SECTIONS = ("trainer", "orchestrator", "inference")


class EnvServerLaunchConfig(BaseConfig):
    """The NeMo Gym resources server `rl` starts when a source's `resources_url` is not answering."""

    auto_start: bool = Field(True, description="Start (and write rows for) the server when nothing answers.")
    env: str = Field("gridsim", description="Built-in environment to serve.")
    data_dir: Path | None = Field(
        None, description="gridsim: folder of ERCOT NP4-180-ER xlsx files; None = the packaged 2021-2024 days."
    )
    synthetic: bool = Field(False, description="gridsim: seeded synthetic days instead of real ERCOT days.")
    forward_from: dt.date | None = Field(
        None, description="gridsim: rows written with this forward cut-off (YYYY-MM-DD): train and eval rows from the "
        "days before it, data/forward.jsonl from the days on or after it."
    )
    train_from: dt.date | None = Field(
        None, description="gridsim: train rows written only from the days on or after this date (YYYY-MM-DD)."
    )
    masked_as_error: bool = Field(True, description="Answer unmeasurable episodes with 503 so they are masked.")
    idle_timeout_s: float | None = Field(120.0, gt=0, description="End sessions idle this long; None = never.")
    max_concurrent: int = Field(96, gt=0, description="Live sessions before /seed_session answers 503.")
    host: str | None = Field(
        None, description="Bind address; None = the host of the source's resources_url (multi-node: deployment.bind_host)."
    )
    token: str | None = Field(
        None,
        description="Bearer token the server requires (sources get it as task.token). A multi-node server bound to a "
        "non-loopback address gets a random one when unset.",
    )

    @field_validator("forward_from", "train_from", mode="before")
    @classmethod
    def _iso_date(cls, value: Any) -> Any:
        from prime_rl.config.gridsim import iso_date

        return iso_date(value)

    @model_validator(mode="after")
    def _one_data_source(self) -> EnvServerLaunchConfig:
        if self.synthetic and self.data_dir is not None:
            raise ValueError("env_server.data_dir and env_server.synthetic both set: choose one")
        if self.train_from and self.forward_from and self.train_from >= self.forward_from:
            raise ValueError(f"env_server.train_from = {self.train_from} is not before env_server.forward_from = "
                             f"{self.forward_from}: every training day would be a forward day; choose an earlier "
                             "train_from")  # fmt: skip
        return self


class RLConfig(BaseConfig):
    """`rl @ config`: one run directory; inference replica(s), one orchestrator, one trainer (torchrun); on one host,
    or on several Slurm nodes (`[deployment] type = "multi-node"` with `[slurm]`)."""

    trainer: TrainerConfig = Field(TrainerConfig(), description="The RL trainer.")
    orchestrator: OrchestratorConfig = Field(OrchestratorConfig(), description="The orchestrator.")
    inference: InferenceConfig = Field(InferenceConfig(), description="The inference server.")
    deployment: DeploymentConfig = Field(DeploymentConfig(), description="Nodes and devices per role (docs/scaling.md).")
    slurm: SlurmConfig | None = Field(None, description="Submit the run as a Slurm batch job (see docs/scaling.md).")
    env_server: EnvServerLaunchConfig = Field(EnvServerLaunchConfig(), description="The resources server rl starts.")
    teacher: TeacherServerConfig | None = Field(
        None, description="On-policy distillation: the teacher inference server rl starts (single-node) and points "
        "orchestrator.teacher at; None = none started.",
    )
    log: LogConfig = Field(LogConfig(), description="The launcher's logging.")

    model: ModelConfig | None = Field(None, description="Shared: copied into trainer, orchestrator and inference.")
    max_steps: int | None = Field(None, gt=0, description="Shared: copied into trainer and orchestrator.")
    seq_len: int | None = Field(None, gt=0, description="Shared: copied into trainer and orchestrator.")
    output_dir: Path | None = Field(None, description="Shared: the run directory of every process.")
    ckpt: CheckpointConfig | None = Field(None, description="Shared: checkpoints of trainer and orchestrator.")
    wandb: WandbConfig | None = Field(None, description="Shared: one W&B run for trainer and orchestrator.")
    rollout_transport: RolloutTransportConfig | None = Field(
        None, description="Shared: how the orchestrator's batches reach the trainer ranks (files or TCP)."
    )
    weight_transport: WeightTransportConfig | None = Field(
        None, description="Shared: how policy versions reach the inference servers (files or a collective broadcast)."
    )

    resume: bool = Field(False, description="Continue the run from its newest complete checkpoint.")
    startup_timeout_s: float = Field(600.0, gt=0, description="Per-process health wait.")
    clean: bool = Field(False, description="Delete a previous run's rollouts, weights, checkpoints, eval and logs first.")
    stop_grace_s: float = Field(
        30.0, gt=0, description="SIGTERM-to-SIGKILL grace per process group at stop (vLLM needs ~10-20 s to exit)."
    )
    finish_timeout_s: float = Field(
        1800.0, gt=0, description="Once trainer or orchestrator finished, how long the other may take to exit."
    )
    dry_run: bool = Field(
        False, description="Run every check that needs no running process, print the checks and the launch plan, write "
        "the resolved configs to output_dir/configs/ (with [slurm]: also slurm/rl.sbatch, not submitted) and exit."
    )

    @model_validator(mode="after")
    def _check_deployment(self) -> RLConfig:
        dep = self.deployment
        check_slurm_nodes(self.slurm, dep.num_nodes, "deployment.num_infer_nodes + deployment.num_train_nodes"
                          if dep.type == "multi-node" else "a single-node deployment's node count")
        if dep.type == "multi-node":
            srv, default = self.inference.server, type(self.inference.server)()
            for name in ("host", "port"):
                if getattr(srv, name) != getattr(default, name):
                    raise ValueError(
                        f"inference.server.{name} is not used by a multi-node run: replicas bind deployment.bind_host "
                        f"(default: the node's address) on ports from deployment.port_base"
                    )
            default_port = RolloutTransportConfig.model_fields["port"].default
            for section in ("trainer", "orchestrator"):
                port = getattr(self, section).rollout_transport.port
                if port != default_port:
                    raise ValueError(
                        f"{section}.rollout_transport.port = {port} is not used by a multi-node run: the orchestrator "
                        f"listens on deployment.port_base + 16 x its node index + 15; leave rollout_transport.port "
                        "unset and choose deployment.port_base"
                    )
        default_urls = type(self.orchestrator.client)().base_url
        if dep.type == "multi-node" and self.orchestrator.client.base_url != default_urls:
            raise ValueError(
                "orchestrator.client.base_url is set, but a multi-node run points the orchestrator at the replicas it "
                "starts on the inference nodes; leave base_url unset (ports: deployment.port_base)"
            )
        return self

    @model_validator(mode="wrap")
    @classmethod
    def _sections_sample_for_training(cls, data: Any, handler: Any) -> Any:
        """While the sections validate, `inference.vllm` knows its server samples training rollouts
        (`config.inference.SAMPLES_FOR_TRAINING`): a distribution-changing `extra_args` option is refused with rl's
        fix; and the orchestrator leaves the groups-of-one check to `_groups_with_signal`
        (`config.recipes.SIGNAL_DECIDED_BY_RL`)."""
        token, signal = SAMPLES_FOR_TRAINING.set(True), SIGNAL_DECIDED_BY_RL.set(True)
        try:
            return handler(data)
        finally:
            SIGNAL_DECIDED_BY_RL.reset(signal)
            SAMPLES_FOR_TRAINING.reset(token)

    @model_validator(mode="before")
    @classmethod
    def _propagate_shared(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key in SHARED_FIELDS:
            if key not in data or data[key] is None:
                continue
            value = data[key]
            if hasattr(value, "model_dump"):
                value = value.model_dump()
            for section in SECTIONS:
                target_cls = cls.model_fields[section].annotation
                if key not in target_cls.model_fields:
                    continue
                sec = data.get(section)
                if hasattr(sec, "model_dump"):
                    sec = sec.model_dump(exclude_unset=True)
                sec = dict(sec or {})
                sec[key] = merge_shared(value, sec.get(key), f"{key}", f"{section}.{key}")
                data[section] = sec
        return data

    @model_validator(mode="after")
    def _orchestrator_may_load_weights(self) -> RLConfig:
        check_inference_access(self)
        return self

    @model_validator(mode="after")
    def _same_distribution(self) -> RLConfig:
        check_training_distribution(self)
        return self

    @model_validator(mode="after")
    def _lengths_fit(self) -> RLConfig:
        check_lengths(self)
        return self

    @model_validator(mode="after")
    def _same_rollout_transport(self) -> RLConfig:
        """Trainer and orchestrator must use one rollout transport (type, port and token; the hosts may differ: a
        multi-node trainer connects to the orchestrator's node), or the trainer would wait for batches that never
        come its way."""
        check_sides_agree(self, "rollout_transport", "the trainer would never receive its batches; ",
                          token_env=ENV_TOKEN)  # fmt: skip
        return self

    @model_validator(mode="after")
    def _weight_group(self) -> RLConfig:
        check_weight_transport(self)
        return self

    @model_validator(mode="after")
    def _gate_keeps_kl_groups(self) -> RLConfig:
        """With a reference-KL or teacher term in the loss (`trainer.loss.ref_kl_coef > 0`, `teacher_kl_coef > 0`) a
        group whose advantages are all 0 still has a gradient: the orchestrator's signal gate admits it
        (`orchestrator.gate.keep_for_kl`, which `rl` sets from the loss; `check_keep_for_kl` refuses a value set
        against it)."""
        check_keep_for_kl(self)
        if float(getattr(self.trainer.loss, "ref_kl_coef", 0.0)) > 0 or teacher_term(self):
            self.orchestrator.gate.keep_for_kl = True
            problem = gate_beside_kl_problem(self.orchestrator, loss_term(self))
            if problem is not None:
                raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _wire_teacher(self) -> RLConfig:
        """`[teacher.vllm]` fields left unset are `[inference.vllm]`'s (`TeacherServerConfig.inherit_vllm`), an unset
        `teacher.model.dtype` is `inference.model.dtype` (`inherit_dtype`)."""
        if self.teacher is not None:
            self.teacher.inherit_dtype(self.inference.model)
            inherited = self.teacher.inherit_vllm(self.inference.vllm)
            check_teacher_server(self, inherited)
        check_teacher(self)
        return self

    @model_validator(mode="after")
    def _groups_with_signal(self) -> RLConfig:
        """Groups of one rollout train only with a teacher or a reference-KL term in the loss
        (`config.recipes.lone_group_problem`)."""
        signal = teacher_term(self) or float(getattr(self.trainer.loss, "ref_kl_coef", 0.0)) > 0
        problem = lone_group_problem(self.orchestrator, signal, prefix="orchestrator.", fix=(
            "a teacher ([teacher.model] name = ..., with [trainer.loss] type = \"opd\") or a reference-KL term "
            "(trainer.loss.ref_kl_coef > 0)"))  # fmt: skip
        if problem is not None:
            raise ValueError(problem)
        return self


def check_keep_for_kl(cfg: RLConfig) -> None:
    """Under `rl` the loss decides `orchestrator.gate.keep_for_kl` (admit groups whose advantages are all 0, which
    train only through a reference-KL or teacher term), so a value set against it is refused rather than overridden
    or left doing nothing: `false` with such a term (rl admits those groups anyway), `true` without one (the groups
    it admits would train nothing). Raises ValueError naming the fields (backticked: the error names where they were
    set) and the fix."""
    if "keep_for_kl" not in cfg.orchestrator.gate.model_fields_set:
        return
    term = loss_term(cfg)
    signal = float(getattr(cfg.trainer.loss, "ref_kl_coef", 0.0)) > 0 or teacher_term(cfg)
    if signal and not cfg.orchestrator.gate.keep_for_kl:
        raise ValueError(
            f"`orchestrator.gate.keep_for_kl = false`, but {term} puts a reference-KL or teacher term in the loss, "
            "which still trains a group whose advantages are all 0, so rl admits such groups (keep_for_kl follows "
            "the loss under rl); remove orchestrator.gate.keep_for_kl, or set the loss term to 0 to let the gate "
            "reject them"
        )
    if not signal and cfg.orchestrator.gate.keep_for_kl:
        raise ValueError(
            "`orchestrator.gate.keep_for_kl = true` admits groups whose advantages are all 0 for the sake of a "
            "reference-KL or teacher term, but trainer.loss has neither (ref_kl_coef = 0, no teacher term), so those "
            "groups would train nothing; remove orchestrator.gate.keep_for_kl (rl sets it from the loss), or set "
            "trainer.loss.ref_kl_coef > 0"
        )


def loss_term(cfg: RLConfig) -> str:
    """The setting that puts a reference-KL or teacher term in the `rl` config `cfg`'s loss, backticked (the error
    names where it was set): `trainer.loss.ref_kl_coef`, else `trainer.loss.type = 'opd'`, else teacher_kl_coef."""
    loss = cfg.trainer.loss
    ref_kl = float(getattr(loss, "ref_kl_coef", 0.0))
    return (f"`trainer.loss.ref_kl_coef = {ref_kl:g}`" if ref_kl > 0 else
            f"`trainer.loss.type = {loss.type!r}`" if getattr(loss, "type", None) == "opd" else
            f"`trainer.loss.teacher_kl_coef = {float(getattr(loss, 'teacher_kl_coef', 0.0)):g}`")  # fmt: skip


def check_lengths(cfg: RLConfig) -> None:
    """Sequence lengths that cannot work together (the prompt lengths of tasks and the model's own context length
    are checked by `rl`'s pre-flight and the orchestrator's start). Raises ValueError naming the fields.

    - `orchestrator.seq_len` > `inference.vllm.max_model_len`: vLLM refuses every request whose prompt plus
      completion budget passes its context, and each such rollout is masked, forever;
    - `orchestrator.seq_len` > `trainer.seq_len`: the trainer refuses the orchestrator's micro-batches.
    """
    orch_seq_len, mml = cfg.orchestrator.seq_len, cfg.inference.vllm.max_model_len
    if mml is not None:
        check_seq_len_fits(orch_seq_len, mml, "inference.vllm.max_model_len",
                           f"raise inference.vllm.max_model_len to at least {orch_seq_len}")  # fmt: skip
    if orch_seq_len > cfg.trainer.seq_len:
        raise ValueError(
            f"orchestrator.seq_len = {orch_seq_len} is above trainer.seq_len = {cfg.trainer.seq_len}: the "
            "orchestrator packs micro-batches of up to orchestrator.seq_len tokens, which the trainer refuses; set "
            "`seq_len` once at the top"
        )


def check_seq_len_fits(seq_len: int, context: int, context_is: str, fix: str, error: type[Exception] = ValueError) -> None:
    """The one check of `orchestrator.seq_len` against the context length inference serves (`context_is` says
    where that length comes from: `inference.vllm.max_model_len`, the model's `max_position_embeddings`, the
    server's report). Raises `error` (default ValueError) naming both and the fix (`fix`, then "or lower seq_len")."""
    if seq_len > context:
        raise error(
            f"seq_len = {seq_len} (orchestrator.seq_len) is above {context_is} = {context}: a rollout grows up to "
            f"seq_len tokens, and vLLM refuses any request past its context length, so those rollouts would all "
            f"fail; {fix} or lower seq_len"
        )


def check_inference_access(cfg: RLConfig, environ: dict[str, str] | None = None) -> None:
    """The orchestrator must be able to call the inference servers' admin routes (`/update_weights`;
    `prime_rl.inference.guard`): it sends `orchestrator.client.api_key` as the bearer token, which must be one the
    servers accept (`inference.server.token` or `PRIME_RL_INFERENCE_TOKEN`, or vLLM's `--api-key`) when they have
    any, and a single-node server bound beyond loopback must have one (its admin routes are closed without).
    Raises ValueError naming the fields."""
    from prime_rl.http import is_loopback

    env = os.environ if environ is None else environ
    server, api_key = cfg.inference.server, cfg.orchestrator.client.api_key
    vllm_keys = [str(v) for k, v in cfg.inference.vllm.extra_args.items() if flag_name(k) == "api-key"]
    accepted = [t for t in (server.token or env.get("PRIME_RL_INFERENCE_TOKEN"), *vllm_keys, env.get("VLLM_API_KEY")) if t]
    if accepted and api_key not in accepted:
        raise ValueError(
            "the inference servers require a bearer token (inference.server.token, PRIME_RL_INFERENCE_TOKEN or vLLM's "
            "--api-key), but orchestrator.client.api_key "
            f"{'is not set' if api_key is None else 'differs'}: the orchestrator's /update_weights would be refused; "
            "set orchestrator.client.api_key to the token"
        )
    if cfg.deployment.type == "single-node" and not is_loopback(server.host) and not accepted:
        raise ValueError(
            f"inference.server.host = {server.host!r} is not loopback, and an inference server reachable from other "
            "machines keeps its admin routes (/update_weights) closed without a token; set inference.server.token "
            "and orchestrator.client.api_key to the same secret, or bind 127.0.0.1"
        )


def check_training_distribution(cfg: RLConfig) -> None:
    """The policy vLLM samples from must be the one the trainer scores (docs/design.md invariant 9): processed logprobs
    (log_softmax(logits / T), what the trainer computes) and no server option in `extra_args` that changes the
    distribution (`config.inference.DISTRIBUTION_FLAGS`, under any spelling). Top-p/top-k are
    refused by `orchestrator.train.sampling`; the client pins every other sampling option to its neutral value.
    Raises ValueError naming the field."""
    vllm = cfg.inference.vllm
    if vllm.logprobs_mode != "processed_logprobs":
        raise ValueError(
            f"inference.vllm.logprobs_mode = {vllm.logprobs_mode!r}: training needs 'processed_logprobs' (the logprob "
            "of each token under the tempered distribution it was sampled from, which the trainer recomputes); raw "
            "logprobs ignore the temperature and bias the importance ratio"
        )
    bad = distribution_flags(vllm.extra_args)
    if bad:
        key, why = bad[0]
        raise ValueError(
            f"inference.vllm.extra_args: {key!r} changes the sampled distribution ({why}), which the trainer's "
            "logprobs do not replay; training refuses it even with inference.vllm.allow_distribution_changes: "
            "remove it"
        )


def merge_shared(top: Any, section: Any, top_path: str, section_path: str) -> Any:
    """Deep-merge a shared top-level value into a section's value.

    Raises:
        ValueError: a leaf is set at both levels with different values (names both dotted paths).
    """
    if section is None:
        return top
    if isinstance(top, dict) and isinstance(section, dict):
        out = dict(section)
        for key, value in top.items():
            out[key] = merge_shared(value, section.get(key), f"{top_path}.{key}", f"{section_path}.{key}")
        return out
    if _norm(top) != _norm(section):
        raise ValueError(
            f"shared field set twice with different values: `{top_path} = {top}` and "
            f"`{section_path} = {section}`; set it once (at the top level to apply to all sections)"
        )
    return top


def _norm(value: Any) -> Any:
    """Compare scalars by text: CLI values arrive as strings, TOML values typed (`40` vs `'40'`)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float | str | Path):
        return str(value)
    return value


def check_sides_agree(cfg: RLConfig, section: str, consequence: str = "", token_env: str | None = None) -> None:
    """Trainer and orchestrator agree on the shared transport section `section` (`rollout_transport`,
    `weight_transport`): the same type and port (the hosts may differ: a multi-node trainer connects to another
    node's address), and the same `token` where the section has one. `consequence`: what a disagreement of type or
    port would do, said before the fix; `token_env`: the environment variable that also gives the token.

    Raises:
        ValueError: the sides differ; names both sides' type and port (a token's values stay out: it is a secret)
            and the fix (set the section once at the top of the rl config).
    """
    trainer_side, orch_side = getattr(cfg.trainer, section), getattr(cfg.orchestrator, section)
    if (trainer_side.type, trainer_side.port) != (orch_side.type, orch_side.port):
        raise ValueError(
            f"trainer.{section} (type {trainer_side.type!r}, port {trainer_side.port}) differs from "
            f"orchestrator.{section} (type {orch_side.type!r}, port {orch_side.port}): {consequence}set [{section}] "
            "once at the top of the rl config"
        )
    if getattr(trainer_side, "token", None) != getattr(orch_side, "token", None):
        raise ValueError(
            f"trainer.{section}.token differs from orchestrator.{section}.token: the orchestrator would refuse every "
            f"trainer request; set [{section}] token once at the top of the rl config"
            + (f" (or {token_env})" if token_env else "")
        )


def check_weight_transport(cfg: RLConfig) -> None:
    """Trainer and orchestrator use one weight transport; with `collective` the group's size follows the inference
    replicas this run starts (replicas x tensor_parallel_size workers, set into both sections'
    `weight_transport.inference_workers` when unset). A multi-node run places the group's store itself (the first
    trainer node's address, `deployment.weight_port()`; the launcher's torchrun puts trainer rank 0 on that node,
    launcher/specs.py). Without a shared filesystem (`deployment.shared_fs = false`) policy versions must travel
    over the collective and batches over tcp. Raises ValueError naming the fields that disagree or that the
    collective cannot serve (data_parallel_size > 1, resume)."""
    check_shared_fs(cfg)
    check_sides_agree(cfg, "weight_transport")
    trainer_side, orch_side = cfg.trainer.weight_transport, cfg.orchestrator.weight_transport
    if trainer_side.type != "collective":
        return
    vllm, dep = cfg.inference.vllm, cfg.deployment
    if dep.type == "multi-node":
        defaults = type(trainer_side).model_fields
        for section, wt in (("trainer", trainer_side), ("orchestrator", orch_side)):
            for name in ("host", "port"):
                if getattr(wt, name) != defaults[name].default:
                    raise ValueError(
                        f"{section}.weight_transport.{name} is not used by a multi-node run: trainer rank 0 hosts the "
                        f"weight group on the first trainer node's address (deployment.bind_host, else the node's) at "
                        f"deployment.port_base + 16 x its node index + {PORT_WEIGHTS}; leave weight_transport.{name} "
                        "unset and choose deployment.port_base"
                    )
    if vllm.data_parallel_size > 1:
        raise ValueError("weight_transport.type = 'collective' with inference.vllm.data_parallel_size > 1: each "
                         "server must be one engine; run more replicas (deployment.infer_replicas_per_node) instead")
    if cfg.resume:
        raise ValueError("resume = true with weight_transport.type = 'collective': not supported: a restarted trainer does "
                         "not send the checkpoint's policy version to the inference servers again")
    servers = dep.infer_replicas_per_node * (dep.num_infer_nodes if dep.type == "multi-node" else 1)
    workers = servers * vllm.tensor_parallel_size
    for section, wt in (("trainer", trainer_side), ("orchestrator", orch_side)):
        if wt.inference_workers is None:
            wt.inference_workers = workers
        elif wt.inference_workers != workers:
            raise ValueError(f"{section}.weight_transport.inference_workers = {wt.inference_workers}, but this run starts "
                             f"{servers} inference server(s) x tensor_parallel_size {vllm.tensor_parallel_size} = "
                             f"{workers} workers; leave it unset")  # fmt: skip


def check_shared_fs(cfg: RLConfig) -> None:
    """`deployment.shared_fs = false`: nothing may need another node's run directory, so policy versions travel
    over `weight_transport.type = "collective"` and batches over `rollout_transport.type = "tcp"`, and resume
    (checkpoints on the trainer nodes, the orchestrator's on its own) is refused, as is `ckpt.interval` with several
    trainer nodes (each would hold only its own ranks' shards); LoRA adapters, published as files,
    are refused by the collective transport itself (`TrainerConfig`). Raises ValueError naming the field and the
    fix."""
    dep = cfg.deployment
    if dep.shared_fs:
        return
    why = "deployment.shared_fs = false (each node keeps its own run directory)"
    if cfg.trainer.weight_transport.type != "collective":
        raise ValueError(f"{why} needs weight_transport.type = 'collective': with 'filesystem' every inference node "
                         "reads weights/step_N/ written on the trainer node; set [weight_transport] type = "
                         "'collective', or put output_dir on a shared filesystem (shared_fs = true)")
    if cfg.trainer.rollout_transport.type != "tcp":
        raise ValueError(f"{why} needs rollout_transport.type = 'tcp': with 'filesystem' every trainer rank reads "
                         "rollouts/step_N/ written on the orchestrator's node; set [rollout_transport] type = 'tcp', "
                         "or put output_dir on a shared filesystem (shared_fs = true)")
    if cfg.resume or cfg.trainer.ckpt.resuming:
        raise ValueError(f"{why} with resume: not supported (the trainer's checkpoints are on the trainer nodes, the "
                         "orchestrator's on its own); start a fresh run, or use a shared filesystem")
    if dep.num_train_nodes > 1 and cfg.trainer.ckpt.interval is not None:
        raise ValueError(f"{why} with {dep.num_train_nodes} trainer nodes and ckpt.interval = "
                         f"{cfg.trainer.ckpt.interval}: each trainer node could write only its own ranks' shards, so "
                         "no node would hold a loadable checkpoint (and a run without a shared filesystem cannot "
                         "resume); leave ckpt.interval unset, or use a shared filesystem")
