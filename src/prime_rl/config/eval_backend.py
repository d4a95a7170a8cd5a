"""Where `evals` samples the model (`[backend]`), a tagged union chosen by `type`: the inference server(s)
(`server`, with the client settings), transformers in the eval process (`transformers`, with its batching
settings), or a backend of your own (`custom`). Each type takes only its own settings; a setting of another type is
refused with the field and the type it belongs to."""

from __future__ import annotations

import typing
from typing import Annotated, Any, Literal

from pydantic import Field

from prime_rl.config.base import BaseConfig
from prime_rl.config.client import ClientConfig

BUILT_IN = ("server", "transformers")


class ServerBackendConfig(ClientConfig):
    """`backend.type = "server"` (default): the inference server(s) at `base_url` serve `model.name`."""

    type: Literal["server"] = Field("server", description="The inference server(s) at base_url.")


class TransformersBackendConfig(BaseConfig):
    """`backend.type = "transformers"`: load `model.name` in the eval process and sample with transformers
    `generate` (no server; slower per token)."""

    type: Literal["transformers"] = Field("transformers", description="transformers generate in this process.")
    max_batch: int = Field(64, gt=0, description="Most concurrent requests sampled in one generate call.")
    threads: int | None = Field(None, gt=0, description="torch threads (default: torch's choice).")


class CustomBackendConfig(BaseConfig):
    """`backend.type = "custom"`: an `InferenceBackend` of your own (docs/extending.md); its `from_config(cfg)`
    reads its settings from `cfg.backend.kwargs`."""

    type: Literal["custom"] = Field("custom", description="An inference backend of your own.")
    import_path: str = Field(
        min_length=1, description="`package.module:Class` of the backend, or a name registered in `BACKENDS`."
    )
    kwargs: dict[str, Any] = Field(default_factory=dict, description="The backend's own settings.")


BackendConfig = Annotated[
    ServerBackendConfig | TransformersBackendConfig | CustomBackendConfig, Field(discriminator="type")
]
"""Where `evals` samples, chosen by `type`: `server` (default), `transformers` or `custom`."""

LEGACY_SECTIONS = {"client": "server", "local": "transformers"}
"""Top-level sections of the flat form -> the backend type whose settings they hold (`[client]` is also the
reference's spelling)."""


def backend_from_flat(data: Any) -> Any:
    """Map the flat form of an `evals` config onto `[backend]`: `backend = "NAME"` (a string: server, transformers,
    or a registered name / `module:Class`, which means `type = "custom"` with that `import_path`), with the server's
    settings in `[client]` and transformers' in `[local]`. A table that states `type = "module:Class"` means custom
    too.

    Raises:
        ValueError: `[client]` or `[local]` beside a backend of another type, or a setting given both in it and in
            `[backend]` (names the field and the fix).
    """
    if not isinstance(data, dict):
        return data
    out = dict(data)
    backend = out.get("backend", {})
    if isinstance(backend, str):
        backend = {"type": backend}
    elif isinstance(backend, BaseConfig):
        backend = backend.model_dump(exclude_unset=True) | {"type": backend.type}
    elif not isinstance(backend, dict):
        return data
    backend = dict(backend)
    kind = backend.get("type")
    if isinstance(kind, str) and kind not in (*BUILT_IN, "custom"):
        backend = {**backend, "type": "custom", "import_path": kind}
    for section, owner in LEGACY_SECTIONS.items():
        if section not in out:
            continue
        settings = out.pop(section)
        if isinstance(settings, BaseConfig):
            settings = settings.model_dump(exclude_unset=True)
        if not isinstance(settings, dict) or not settings:
            continue
        kind = backend.get("type", "server")
        if kind != owner:
            field = next(iter(settings))
            raise ValueError(f"{section}.{field}: a setting of backend.type = {owner!r}, but backend.type is {kind!r}; "
                             f"drop [{section}] or set backend.type = {owner!r}")  # fmt: skip
        both = sorted(set(settings) & (set(backend) - {"type"}))
        if both:
            raise ValueError(f"{section}.{both[0]} and backend.{both[0]} are both set: keep backend.{both[0]} "
                             f"(the [{section}] section is the older spelling of [backend])")  # fmt: skip
        variant = ServerBackendConfig if owner == "server" else TransformersBackendConfig
        settings = {k: [v] if isinstance(v, str) and _is_list(variant, k) else v for k, v in settings.items()}
        backend = {"type": owner, **settings, **backend}
    if backend or "backend" in data:
        out["backend"] = backend
    return out


def _is_list(model: type[BaseConfig], name: str) -> bool:
    """Whether field `name` of `model` is a list (a `--client.base-url URL` flag of the flat form gives one text)."""
    finfo = model.model_fields.get(name)
    return finfo is not None and typing.get_origin(finfo.annotation) is list
