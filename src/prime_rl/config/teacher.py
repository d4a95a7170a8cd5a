"""Configuration of on-policy distillation's teacher: the frozen model whose logprobs score the student's rollouts
(`[orchestrator.teacher]`), the teacher inference server `rl` starts (`[teacher]`), and `rl`'s checks that the two
and the trainer's teacher term fit together (`check_teacher`, `check_teacher_server`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator

from prime_rl.config.base import BaseConfig, ModelConfig
from prime_rl.config.client import server_root
from prime_rl.config.inference import InferenceConfig, ServerConfig, VllmConfig

if TYPE_CHECKING:
    from prime_rl.config.client import ClientConfig


class TeacherConfig(BaseConfig):
    """`[orchestrator.teacher]`: the teacher inference server(s). After a group is sampled, every sample (prompt
    and completion tokens) is sent to the teacher's `/v1/completions` with `prompt_logprobs`, and the teacher's
    logprob of each sampled token goes to the trainer with the batch (the reference prime-rl's
    `[orchestrator.algo.teacher]`, `name` + `base_url`). The teacher's tokenizer must equal the student's (checked
    at start). Train on it with `[trainer.loss] type = "opd"` or `teacher_kl_coef`."""

    name: str = Field(description="The model the teacher server serves (its `model.name`), sent with each request.")
    base_url: list[str] = Field(
        default_factory=lambda: ["http://127.0.0.1:8001"],
        description="One URL per teacher server (requests spread over them): http(s)://HOST:PORT; a trailing /v1 "
        "(the OpenAI-style base URL) is dropped. `rl` with [teacher] sets it.",
    )
    api_key: str | None = Field(None, description="Sent as `Authorization: Bearer KEY` (servers started with one).")
    request_timeout_s: float = Field(600.0, gt=0, description="Read timeout of one scoring request.")
    max_retries: int = Field(5, ge=0, description="Retries on 5xx and transport errors (exponential backoff).")
    health_timeout_s: float = Field(300.0, gt=0, description="How long to wait for the servers' /health at start.")

    @field_validator("base_url")
    @classmethod
    def _server_roots(cls, urls: list[str]) -> list[str]:
        return [server_root(u) for u in urls]

    def client(self) -> ClientConfig:
        """The inference client settings of the teacher servers (`prime_rl.inference.routing.Router`)."""
        from prime_rl.config.client import ClientConfig

        return ClientConfig(base_url=self.base_url, api_key=self.api_key, request_timeout_s=self.request_timeout_s,
                            max_retries=self.max_retries, health_timeout_s=self.health_timeout_s)  # fmt: skip


NOT_INHERITED = ("tensor_parallel_size", "data_parallel_size", "enable_lora", "max_lora_rank",
                 "weight_update_pause_mode", "extra_args", "allow_distribution_changes")
"""The `[inference.vllm]` fields `[teacher.vllm]` does not inherit (`TeacherServerConfig.inherit_vllm`)."""


class TeacherVllmConfig(VllmConfig):
    """`[teacher.vllm]`: vLLM's options of the teacher server (`VllmConfig`'s fields); a field left unset is
    `[inference.vllm]`'s but for `NOT_INHERITED` (`TeacherServerConfig.inherit_vllm`), which `rl --help-all` and
    docs/config.md show as its default (`SHOWN_DEFAULTS`)."""

    SHOWN_DEFAULTS: ClassVar[dict[str, str]] = {
        name: "[inference.vllm]'s" for name in VllmConfig.model_fields if name not in NOT_INHERITED
    }
    """Field -> the default `--help` and docs/config.md show instead of the field's own (`config.help.panels`,
    `cli.config_docs`): where the value of an unset field comes from."""


class TeacherModelConfig(ModelConfig):
    """`[teacher.model]`: the teacher model; `name` has no default (the teacher is the model named here), and an
    unset `dtype` is the student's (`TeacherServerConfig.inherit_dtype`)."""

    name: str = Field(description=ModelConfig.model_fields["name"].description)
    dtype: Literal["auto", "float32", "bfloat16"] | None = Field(
        None, description="Compute dtype; None = the student's (inference.model.dtype, which the shared [model] sets); "
        "auto = bfloat16 on GPU, on CPU as model.dtype's auto.",
    )


class TeacherAddressConfig(ServerConfig):
    """`[teacher.server]`: where the teacher server listens (port 8001, its vLLM log `logs/vllm-teacher.log`)."""

    port: int = Field(8001, gt=0, lt=65536, description=ServerConfig.model_fields["port"].description)
    log_file: Path | None = Field(None, description="vLLM's own output; default: <output_dir>/logs/vllm-teacher.log.")


class TeacherServerConfig(BaseConfig):
    """`[teacher]` of `rl`: the teacher inference server `rl` starts next to the policy's (single-node runs), serving
    `model.name` frozen (no weight updates); `rl` points `[orchestrator.teacher]` at it. Its tokenizer must be the
    student's. On GPU it shares the first inference GPU: set both servers' `vllm.gpu_memory_utilization` so they
    fit together (`shared_gpu_problem` refuses a sum above 0.95). An unset `model.dtype` is the student's
    (`inherit_dtype`)."""

    model: TeacherModelConfig = Field(
        description="The teacher model (`[teacher.model] name = ...`); dtype unset = the student's (inference.model.dtype)."
    )
    server: TeacherAddressConfig = Field(TeacherAddressConfig(), description="Address of the teacher server (port 8001).")
    vllm: TeacherVllmConfig = Field(
        TeacherVllmConfig(),
        description="vLLM engine options of the teacher server; a field not set here is [inference.vllm]'s, except "
        "the parallel sizes, LoRA, weight_update_pause_mode, extra_args and allow_distribution_changes. The parallel "
        "sizes must be 1 (one device); max_model_len must hold seq_len + 1 tokens.",
    )

    def inherit_vllm(self, policy: VllmConfig) -> set[str]:
        """Fill the `vllm` fields not set under `[teacher.vllm]` from `policy` (`[inference.vllm]`), but for
        `NOT_INHERITED`: the parallel sizes (the teacher runs on one device beside replica 0), LoRA serving and the
        weight-update pause (the teacher is frozen), and `extra_args` / `allow_distribution_changes` (server flags
        such as the policy server's `--api-key`, which the orchestrator does not send to the teacher). Returns the
        names of the fields taken from `policy`."""
        own = self.vllm.model_dump(exclude_unset=True)
        taken = policy.model_dump(exclude=set(NOT_INHERITED) | set(own))
        self.vllm = TeacherVllmConfig(**(taken | own))
        return set(taken)

    def inherit_dtype(self, policy: ModelConfig) -> bool:
        """Set `model.dtype` from `policy` (`inference.model`: the student's, which the shared `[model]` sets) when
        `[teacher.model]` leaves it unset (None), so the teacher scores in the precision the student samples in. Returns
        whether it was taken."""
        if self.model.dtype is not None:
            return False
        self.model = self.model.model_copy(update={"dtype": policy.dtype})
        return True

    def inference_config(self, output_dir: Path) -> InferenceConfig:
        """The `inference` config of the teacher server (plain `ServerConfig`, `ModelConfig`, `VllmConfig`): its vLLM
        log `<output_dir>/logs/vllm-teacher.log` unless `server.log_file` is set."""
        log_file = self.server.log_file or Path(output_dir) / "logs" / "vllm-teacher.log"
        server = ServerConfig(**self.server.model_dump(exclude_unset=True) | {"port": self.server.port,
                                                                               "log_file": log_file})  # fmt: skip
        model = ModelConfig(**self.model.model_dump(exclude_unset=True) | {"dtype": self.model.dtype or "auto"})
        vllm = VllmConfig(**self.vllm.model_dump(exclude_unset=True))
        return InferenceConfig(model=model, server=server, vllm=vllm, output_dir=output_dir)

    @property
    def url(self) -> str:
        """The teacher server's base URL as the orchestrator reaches it."""
        host = "127.0.0.1" if self.server.host in ("0.0.0.0", "::") else self.server.host
        return f"http://{host}:{self.server.port}"


def teacher_term(cfg: Any) -> bool:
    """Whether the `rl` config `cfg`'s trainer loss has a teacher term (`trainer.loss.teacher_kl_coef > 0`; `type =
    "opd"` sets it)."""
    return float(getattr(cfg.trainer.loss, "teacher_kl_coef", 0.0)) > 0


def check_teacher(cfg: Any) -> None:
    """On-policy distillation's three parts must come together: `[teacher]` (the server rl starts; single-node)
    sets `orchestrator.teacher` to it (name and URL); a teacher (either way) needs a teacher term in the loss
    (`trainer.loss.type = "opd"` or `teacher_kl_coef > 0`), and that term needs a teacher. Raises ValueError
    naming the fields."""
    teacher = cfg.teacher
    if teacher is not None:
        if cfg.deployment.type == "multi-node":
            raise ValueError("[teacher] starts the teacher server on a single-node run only; on several nodes start "
                             "one yourself (`inference @ teacher.toml`) and set [orchestrator.teacher] name and base_url")  # fmt: skip
        wired = TeacherConfig(name=teacher.model.name, base_url=[teacher.url])
        if cfg.orchestrator.teacher is not None and (cfg.orchestrator.teacher.name, cfg.orchestrator.teacher.base_url) \
                != (wired.name, wired.base_url):
            raise ValueError(f"[teacher] starts `teacher.model.name = {teacher.model.name!r}` at {teacher.url}, but "
                             f"[orchestrator.teacher] names `orchestrator.teacher.name = {cfg.orchestrator.teacher.name!r}`"
                             f" at `orchestrator.teacher.base_url = {cfg.orchestrator.teacher.base_url}`: set one of "
                             "them (rl points [orchestrator.teacher] at the server [teacher] starts)")  # fmt: skip
        if cfg.orchestrator.teacher is None:
            cfg.orchestrator.teacher = wired
        if teacher.server.port == cfg.inference.server.port:
            raise ValueError(f"teacher.server.port = {teacher.server.port} is inference.server.port too: give the "
                             "teacher server its own port")  # fmt: skip
    if cfg.orchestrator.teacher is not None and not teacher_term(cfg):
        named = (f"`teacher.model.name = {teacher.model.name!r}`" if teacher is not None else
                 f"`orchestrator.teacher.name = {cfg.orchestrator.teacher.name!r}`")  # fmt: skip
        raise ValueError(f"{named} sets a teacher, but trainer.loss has no teacher term, so its logprobs would be "
                         "ignored: set [trainer.loss] type = \"opd\" (or teacher_kl_coef > 0)")  # fmt: skip
    if cfg.orchestrator.teacher is None and teacher_term(cfg):
        loss = cfg.trainer.loss
        term = (f"`trainer.loss.type = {loss.type!r}`" if loss.type == "opd" else
                f"`trainer.loss.teacher_kl_coef = {loss.teacher_kl_coef:g}`")  # fmt: skip
        raise ValueError(f"{term} puts a teacher term in trainer.loss, but no teacher scores the rollouts: set "
                         "[teacher.model] name = ... (rl starts it) or [orchestrator.teacher]")  # fmt: skip


def check_teacher_server(cfg: Any, inherited: set[str] = frozenset()) -> None:
    """The teacher server `[teacher]` starts must serve as one engine and hold a whole sample: rl starts it on one
    device beside inference replica 0 (the first inference GPU, or the CPU), so `teacher.vllm.tensor_parallel_size`
    and `data_parallel_size` must be 1; it scores samples of up to `seq_len` tokens with one generated token
    (`prompt_logprobs`, `max_tokens = 1`), so a set `teacher.vllm.max_model_len` must be at least `seq_len + 1`
    (the orchestrator checks the running server the same way, `inference.scoring.PromptScorer.check`; an unset one
    is the model's own context, checked by rl's pre-flight). `inherited`: the `teacher.vllm` fields taken from
    `[inference.vllm]`. Raises ValueError naming the fields (backticked, so the error names where they were set)
    and the fix."""
    vllm = cfg.teacher.vllm
    for name in ("tensor_parallel_size", "data_parallel_size"):
        size = getattr(vllm, name)
        if size != 1:
            raise ValueError(
                f"`teacher.vllm.{name} = {size}`: rl starts the teacher server as one engine on one device beside "
                f"inference replica 0 (the first inference GPU, or the CPU); set teacher.vllm.{name} = 1, or start a "
                f"teacher split over several GPUs yourself (`inference @ teacher.toml`) and point [orchestrator.teacher] "
                "(name, base_url) at it instead of [teacher]"
            )
    seq_len, mml = cfg.orchestrator.seq_len, vllm.max_model_len
    if mml is None or mml > seq_len:
        return
    seq_name = "seq_len" if cfg.seq_len is not None else "orchestrator.seq_len"
    held = (f"`inference.vllm.max_model_len = {mml}`, which teacher.vllm.max_model_len inherits (unset under "
            "[teacher.vllm])" if "max_model_len" in inherited else f"`teacher.vllm.max_model_len = {mml}`")
    raise ValueError(
        f"the teacher server holds {held} tokens, but it scores whole samples of up to `{seq_name} = {seq_len}` "
        f"tokens plus one generated token, so it needs {seq_len + 1}: every scoring request past its context would "
        f"fail; set teacher.vllm.max_model_len = {seq_len + 1} (or more), or lower {seq_name}"
    )


SHARED_GPU_LIMIT = 0.95
"""The most of one GPU's memory the teacher server and inference replica 0 may ask for together."""


def shared_gpu_problem(cfg: Any, where: Callable[[str], str]) -> str | None:
    """On GPU, rl starts the `[teacher]` server on the first inference GPU, beside inference replica 0 (when rl
    starts inference servers: `orchestrator.backend.type = "server"`): each vLLM server takes its
    `gpu_memory_utilization` share of that GPU's memory and must find it free when it starts, so the two shares must
    sum to at most `SHARED_GPU_LIMIT`. `where(field)` says where the field was set (` (in FILE)`, ` (from --flag)`,
    ""). Returns the refusal (both fields named, the teacher's as inherited when unset, and the fix), or None."""
    if cfg.teacher is None or cfg.orchestrator.backend.type != "server":
        return None
    field = "vllm.gpu_memory_utilization"
    teacher, policy = cfg.teacher.vllm.gpu_memory_utilization, cfg.inference.vllm.gpu_memory_utilization
    if teacher + policy <= SHARED_GPU_LIMIT:
        return None
    own = where(f"teacher.{field}")
    named = f"teacher.{field} = {teacher:g}" + (own or f" (unset under [teacher.vllm]: inference.{field}'s)")
    return (f"the teacher server shares the first inference GPU with inference replica 0, but {named} and inference."
            f"{field} = {policy:g}{where(f'inference.{field}')} ask for {teacher + policy:.2f} of its memory together, "
            "so the second server would not start; set them to sum to at most "
            f"{SHARED_GPU_LIMIT:g} (e.g. [inference.vllm] gpu_memory_utilization = 0.45 and [teacher.vllm] "
            "gpu_memory_utilization = 0.45, or less for the smaller model)")  # fmt: skip
