"""Where the orchestrator samples rollouts (`[orchestrator.backend]`), a tagged union chosen by `type`: the
inference server(s) (`server`, the default; its settings are `[orchestrator.client]`, the reference's spelling), or an
inference backend of your own (`custom`, its settings in `backend.kwargs`). A setting of the backend that is not
chosen is refused, naming the field and the fix."""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal

from pydantic import Field

from prime_rl.config.base import BaseConfig
from prime_rl.config.client import ClientConfig
from prime_rl.config.eval_backend import CustomBackendConfig
from prime_rl.config.secrets import REDACTED, is_secret


class ServerClientBackendConfig(BaseConfig):
    """`backend.type = "server"` (default): the inference server(s) that `[orchestrator.client]` reaches (base_url,
    timeouts, retries) serve `model.name` and load each new policy version."""

    type: Literal["server"] = Field(
        "server", description="The inference server(s) at client.base_url (settings in [orchestrator.client])."
    )


OrchestratorBackendConfig = Annotated[ServerClientBackendConfig | CustomBackendConfig, Field(discriminator="type")]
"""Where the orchestrator samples, chosen by `type`: `server` (default) or `custom`."""


_VARIANT_FIELDS = set(ServerClientBackendConfig.model_fields) | set(CustomBackendConfig.model_fields)


def backend_from_name(value: Any) -> Any:
    """Read the short forms of `backend`: a string (`backend = "server"`, or a name registered in `BACKENDS` /
    `package.module:Class`, which means `type = "custom"` with that `import_path`), and a table whose `type` is such
    a name. Anything else is returned as is, for the union to validate.

    Raises:
        ValueError: a setting of `[orchestrator.client]` (base_url, ...), or a name close to one (`base_ur`), written
            in the server backend's table (names the field and the section it belongs in).
    """
    if isinstance(value, str):
        value = {"type": value}
    if isinstance(value, dict) and value.get("type", "server") == "server":
        misplaced = [key for key in value if key in ClientConfig.model_fields]
        for key in value:
            close = difflib.get_close_matches(str(key), list(ClientConfig.model_fields), n=1, cutoff=0.6)
            if not misplaced and close and key not in _VARIANT_FIELDS:
                raise ValueError(f"{key} is not a setting of the server backend; did you mean client.{close[0]} (a "
                                 "setting of the server backend's client, which the orchestrator reads from "
                                 "[client])?")
        if misplaced:
            raise ValueError(f"{misplaced[0]} is a setting of the server backend's client, which the orchestrator "
                             f"reads from [client]; move it there (client.{misplaced[0]})")  # fmt: skip
    if isinstance(value, dict) and isinstance(value.get("type"), str) and value["type"] not in ("server", "custom"):
        return {**value, "type": "custom", "import_path": value["type"]}
    return value


def client_problem(backend: ServerClientBackendConfig | CustomBackendConfig, client: ClientConfig) -> str | None:
    """None unless `[orchestrator.client]` holds a setting (a value other than its default) while `backend.type` is
    not `server`: the client's settings reach the inference servers of the server backend only, and another backend
    would ignore them. Else the refusal, naming the first such field (as `client.NAME = value`, a secret's value
    redacted) and the fix; the sections it names (`[client]`) are the orchestrator config's, which `rl`'s error
    report names `[orchestrator.client]` (`config.loader.format_validation_error`)."""
    if backend.type == "server":
        return None
    default = ClientConfig()
    changed = [name for name in ClientConfig.model_fields if getattr(client, name) != getattr(default, name)]
    if not changed:
        return None
    name = changed[0]
    value = REDACTED if is_secret(name) else repr(getattr(client, name))
    return (f"`client.{name} = {value}`: a setting of backend.type = 'server' (the inference-server client), but "
            f"backend.type is {backend.type!r} ({backend.import_path}); drop the [client] settings (a custom "
            f"backend reads its own settings from backend.kwargs) or set backend.type = 'server'")  # fmt: skip
