"""The inference-backend seam: the registry's built-in backends satisfy the protocol, the orchestrator refuses a
backend that cannot load weights, unknown names are refused naming `backend`, and a backend plugged in by import
path is built from the command's config."""

from __future__ import annotations

import json

import pytest

from prime_rl.config.orchestrator import ClientConfig, EvalCommandConfig, OrchestratorConfig
from prime_rl.inference.backend import BACKENDS, InferenceBackend, build_backend
from prime_rl.inference.client import InferenceClient
from prime_rl.registry import RegistryError


class EchoBackend:
    """A backend outside prime-rl, plugged in as `backend = "tests.inference.test_backend:EchoBackend"`."""

    loads_weights = True

    def __init__(self, urls: list[str]):
        self.urls = urls

    @classmethod
    def from_config(cls, cfg):
        return cls(cfg.backend.kwargs["urls"])

    async def generate(self, prompt_ids, sampling, *, rollout_id=None, stop_token_ids=None, max_tokens=None): ...
    async def wait_healthy(self, timeout_s=None): ...
    async def check_model(self, name): ...
    async def update_weights(self, path, version): ...
    def check_alive(self): ...
    async def context_length(self): ...
    async def aclose(self): ...


def test_builtin_backends_and_protocol():
    assert {"server", "transformers"} <= set(BACKENDS.names())
    assert BACKENDS.get("server") is InferenceClient and InferenceClient.loads_weights
    client = build_backend(OrchestratorConfig(client=ClientConfig(base_url=["http://h:1", "http://h:2"])),
                           loads_weights=True)  # fmt: skip
    assert isinstance(client, InferenceClient) and isinstance(client, InferenceBackend)
    assert client.urls == ["http://h:1", "http://h:2"]


async def test_transformers_backend_is_refused_for_training_and_built_for_eval(tiny_model_dir, tmp_path):
    with pytest.raises(RegistryError, match=r"^backend = 'transformers': this backend cannot load new policy "
                                            r"versions.*choose one that can: server"):
        build_backend(OrchestratorConfig(backend="transformers"), loads_weights=True)
    client = build_backend(EvalCommandConfig(backend="transformers", model={"name": str(tiny_model_dir)},
                                             output_dir=tmp_path))  # fmt: skip
    assert isinstance(client, InferenceBackend) and not client.loads_weights
    await client.wait_healthy()
    await client.check_model(str(tiny_model_dir))
    with pytest.raises(ValueError, match="but the transformers backend loaded"):
        await client.check_model(str(tmp_path))
    with pytest.raises(NotImplementedError):
        await client.update_weights(str(tiny_model_dir), 1)
    client.check_alive()
    assert await client.context_length() == json.loads((tiny_model_dir / "config.json").read_text())[
        "max_position_embeddings"]
    await client.aclose()


def test_unknown_and_plugged_in_backends():
    with pytest.raises(RegistryError, match=r"^backend = 'sglang': unknown inference backend; choose one of: "
                                            r"server, transformers"):
        build_backend(OrchestratorConfig(backend="sglang"))
    cfg = OrchestratorConfig(backend={"type": f"{__name__}:EchoBackend", "kwargs": {"urls": ["http://h:7"]}})
    b = build_backend(cfg, loads_weights=True)
    assert type(b).__name__ == "EchoBackend" and b.urls == ["http://h:7"]
    assert isinstance(b, InferenceBackend)
