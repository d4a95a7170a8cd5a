"""Configuration of the `env-server` commands: `write` (NeMo Gym rows and config), `serve` (the NeMo Gym resources
server) and `openenv` (the OpenEnv server)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from prime_rl.config.base import BaseConfig

LogLevel = Literal["critical", "error", "warning", "info", "debug", "trace"]


def is_url(text: str) -> bool:
    """Whether `text` names a server (`http://` or `https://`) rather than a built-in environment."""
    return text.startswith(("http://", "https://"))


class EnvDataConfig(BaseConfig):
    """Which data a built-in environment plays (GridSim's arguments; the other environments take none)."""

    env: str = Field(description="Built-in environment: gridsim, reverse-text, digit-bandit, tool-bandit, reasoning-gym (or module:attr).")
    data_dir: Path | None = Field(
        None, description="gridsim: folder of ERCOT DAMLZHBSPP_<year>.xlsx files (default: the packaged 2021-2024 days)."
    )
    synthetic: bool = Field(False, description="gridsim: seeded synthetic days instead of real ones.")
    forward_from: dt.date | None = Field(
        None, description="gridsim: train and eval rows from the days before this date (YYYY-MM-DD), and forward "
        "rows (data/forward.jsonl, 200 days) from the days on or after it."
    )
    train_from: dt.date | None = Field(
        None, description="gridsim: train rows only from the days on or after this date (YYYY-MM-DD; the split is "
        "drawn as without it, then cut: eval and forward rows are unchanged)."
    )

    @field_validator("forward_from", "train_from", mode="before")
    @classmethod
    def _iso_date(cls, value: Any) -> Any:
        from prime_rl.config.gridsim import iso_date

        return iso_date(value)

    @field_validator("env")
    @classmethod
    def _url_has_a_scheme(cls, value: str) -> str:
        scheme, sep, rest = value.partition("://")
        if sep and not is_url(value):
            raise ValueError(f"{value!r} looks like a URL, but its scheme is {scheme!r}: an `env-server openenv` "
                             f"server's URL starts with http:// or https:// (e.g. http://{rest})")  # fmt: skip
        _, colon, port = value.rpartition(":")
        if not sep and colon and port.isdigit():
            raise ValueError(f"{value!r} looks like HOST:PORT; a server's URL needs its scheme: http://{value}")
        return value

    @model_validator(mode="after")
    def _gridsim_data_only(self) -> EnvDataConfig:
        if self.data_dir is not None and self.synthetic:
            raise ValueError("--data-dir and --synthetic both given: choose one")
        given = [flag for flag, value in (("--data-dir", self.data_dir), ("--synthetic", self.synthetic),
                                          ("--forward-from", self.forward_from), ("--train-from", self.train_from))
                 if value]  # fmt: skip
        named = f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'}"
        if given and is_url(self.env):
            raise ValueError(f"{named} to a built-in environment; the OpenEnv server at {self.env} already chose its "
                             "data")  # fmt: skip
        if given and self.env != "gridsim":
            raise ValueError(f"{named} to gridsim only, not {self.env!r}")
        if self.train_from and self.forward_from and self.train_from >= self.forward_from:
            raise ValueError(f"--train-from {self.train_from} is not before --forward-from {self.forward_from}: every "
                             "training day would be a forward day; choose an earlier --train-from")  # fmt: skip
        return self

    def env_args(self) -> dict[str, Any]:
        """Keyword arguments of the environment (`load_env(env, **env_args)`); the data folder made absolute, so a
        server started elsewhere finds it."""
        args: dict[str, Any] = {}
        if self.data_dir is not None:
            args["data_dir"] = str(self.data_dir.expanduser().resolve())
        if self.synthetic:
            args["synthetic"] = True
        if self.forward_from is not None:
            args["forward_from"] = self.forward_from.isoformat()
        if self.train_from is not None:
            args["train_from"] = self.train_from.isoformat()
        return args


class EnvServerWriteConfig(EnvDataConfig):
    """`env-server write ENV OUT`: a built-in environment's NeMo Gym folder, or an `env-server openenv` URL's.

    Writes OUT/resources_servers/<env>_v1/ (NeMo Gym config, data/train.jsonl, data/eval.jsonl, server.json; with
    gridsim's --forward-from also data/forward.jsonl); when ENV is an OpenEnv server's URL, its tasks and tools are
    read through the OpenEnv client."""

    env: str = Field(
        description="Built-in environment (gridsim, reverse-text, ...), or the root URL of an `env-server openenv` "
        "server (http://HOST:PORT) to read the tasks from."
    )
    out: Path = Field(description="Output root (laid out like NeMo Gym's: OUT/resources_servers/<env>_v1/).")


class EnvServerServeConfig(BaseConfig):
    """`env-server serve DIR`: a written resources server directory over HTTP (NeMo Gym's protocol)."""

    dir: Path = Field(description="OUT/resources_servers/<env>_v1 (or OUT holding exactly one).")
    port: int = Field(9100, ge=0, le=65535, description="Port to bind.")
    host: str = Field("127.0.0.1", description="Bind address (default 127.0.0.1: this machine only).")
    masked_as_error: bool = Field(False, description="Answer unmeasurable episodes with 503, not 200.")
    idle_timeout_s: float = Field(
        120.0, gt=0, validation_alias=AliasChoices("idle_timeout_s", "idle_timeout"),
        description="End sessions idle this many seconds (also accepted as `idle_timeout`).",
    )
    max_concurrent: int = Field(96, ge=1, description="Episodes (seeded, not verified) at once.")
    at_capacity: Literal["queue", "reject"] = Field(
        "queue", description="queue: a seed waits up to --seed-wait-s seconds for a free slot, then its verify answers masked "
        "(works with clients that never retry); reject: answer 503 + Retry-After."
    )
    seed_wait_s: float = Field(
        30.0, gt=0, validation_alias=AliasChoices("seed_wait_s", "seed_wait"),
        description="Seconds a queued seed waits for a slot (also accepted as `seed_wait`).",
    )
    token: str | None = Field(None, description="Require `Authorization: Bearer TOKEN` (except GET /health).")
    log_level: LogLevel = Field("warning", description="uvicorn's log level.")


class EnvServerOpenEnvConfig(EnvDataConfig):
    """`env-server openenv ENV`: a built-in environment's tasks as OpenEnv environments, one per split.

    openenv-core's own server (reset, step, state, schema, metadata, health and the /ws session) at /<split>: `all`
    (every task) and `eval`. An episode is one task; GET /<split>/tasks lists a split's task ids."""

    port: int = Field(8200, ge=0, le=65535, description="Port to bind (not inference's).")
    host: str = Field("127.0.0.1", description="Bind address (default 127.0.0.1: this machine only).")
    max_concurrent_envs: int = Field(
        96, ge=1, description="WebSocket sessions (episodes in play) at once, per split; one more is refused with "
        "OpenEnv's CAPACITY_REACHED answer."
    )
    log_level: LogLevel = Field("warning", description="uvicorn's log level.")
