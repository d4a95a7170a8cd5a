"""The inference server's admin routes (`prime_rl.inference.guard`, `routes.attach`): a token whenever one is
configured or the bind is not loopback, `/update_weights` confined to the weights directory, the sampling API and
probes untouched; the environment `inference` gives vLLM, and its warning on a bind other than loopback. Routes
are exercised on a FastAPI app with a fake engine (the same checks through the real server:
test_admin_real_server.py)."""

from __future__ import annotations

import pytest
import torch
from fastapi import FastAPI
from fastapi.testclient import TestClient
from safetensors.torch import save_file

from prime_rl.config.inference import InferenceConfig
from prime_rl.inference import guard, routes
from prime_rl.inference.guard import AdminPolicy, is_loopback, is_public
from prime_rl.inference.server import build_env, exposure_warning


class FakeEngine:
    """What `/update_weights` calls on vLLM's engine client, recorded."""

    def __init__(self):
        self.calls: list[tuple] = []

    async def pause_generation(self, mode):
        self.calls.append(("pause", mode))

    async def collective_rpc(self, method, args=()):
        self.calls.append((method, *args))
        return [{"num_tensors": 1, "refreshed": []}]

    async def reset_prefix_cache(self):
        return True

    async def update_weight_version(self, version):
        self.calls.append(("version", version))

    async def resume_generation(self):
        self.calls.append(("resume",))


def make_app(policy: AdminPolicy, built: bool = False) -> tuple[TestClient, FakeEngine]:
    """Our routes on an app with a fake engine; `built`: its middleware stack already built, as vLLM's is."""
    app = FastAPI()
    engine = FakeEngine()
    app.state.engine_client = engine

    @app.get("/health")
    async def health():
        return {}

    @app.get("/v1/models")
    async def models():
        return {"data": []}

    @app.post("/collective_rpc")  # one of vLLM's dev routes
    async def rpc():
        return {"ran": True}

    if built:
        app.middleware_stack = app.build_middleware_stack()
    routes.attach(app, policy)
    return TestClient(app), engine


@pytest.fixture
def weights(tmp_path):
    """A run's weights directory with one published step, and a loadable folder outside it."""
    root = tmp_path / "run" / "weights"
    for d in (root / "step_1", tmp_path / "elsewhere"):
        d.mkdir(parents=True)
        save_file({"w": torch.zeros(2)}, str(d / "model.safetensors"))
    return root


def test_loopback_and_public_paths():
    assert all(map(is_loopback, ["127.0.0.1", "127.3.2.1", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "", "10.0.0.5", "node-1", "192.168.1.2"]))
    assert all(map(is_public, ["/health", "/metrics", "/v1/models", "/v1/chat/completions",
                               "/inference/v1/generate", "/tokenize"]))  # fmt: skip
    assert not any(map(is_public, ["/update_weights", "/policy_version", "/collective_rpc", "/sleep", "/pause",
                                   "/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/server_info", "/v1"]))  # fmt: skip


def test_caller_checks():
    assert AdminPolicy("127.0.0.1").refuse_caller(None) is None  # loopback, no token: open like the rest
    status, msg = AdminPolicy("0.0.0.0").refuse_caller("Bearer anything")
    assert status == 403 and "listens on 0.0.0.0 (not loopback) and has no token" in msg and "--server.token" in msg
    for host in ("127.0.0.1", "0.0.0.0"):  # a configured token is checked on any bind
        p = AdminPolicy(host, tokens=("s3cret", "vllm-key"))
        assert p.refuse_caller(None)[0] == 401
        assert p.refuse_caller("Bearer wrong")[0] == 401
        assert p.refuse_caller("Basic s3cret")[0] == 401
        assert p.refuse_caller("Bearer s3cret") is None and p.refuse_caller("bearer vllm-key") is None


def test_weights_path_confined_after_resolving_links(weights, tmp_path):
    p = AdminPolicy("127.0.0.1", weights_dir=weights)
    assert p.refuse_weights_path(str(weights / "step_1")) is None
    for outside in (tmp_path / "elsewhere", weights / ".." / ".." / "elsewhere", weights.parent):
        assert f"outside this server's weights directory {weights}" in p.refuse_weights_path(str(outside))
    (weights / "step_9").symlink_to(tmp_path / "elsewhere")
    assert p.refuse_weights_path(str(weights / "step_9")) is not None
    assert AdminPolicy("127.0.0.1").refuse_weights_path(str(tmp_path / "elsewhere")) is None  # any folder


def test_policy_from_vllm_args_and_env():
    class Args:
        host, api_key = "0.0.0.0", ["k1"]

    env = {guard.ENV_TOKEN: "t", guard.ENV_WEIGHTS_DIR: "/r/weights"}
    p = AdminPolicy.from_vllm_args(Args, env)
    assert p.host == "0.0.0.0" and p.tokens == ("t", "k1") and str(p.weights_dir) == "/r/weights"
    Args.api_key = None
    p = AdminPolicy.from_vllm_args(Args, {"VLLM_API_KEY": "k2", guard.ENV_HOST: "10.1.2.3", guard.ENV_WEIGHTS_DIR: "*"})
    assert p.host == "10.1.2.3" and p.tokens == ("k2",) and p.weights_dir is None


@pytest.mark.parametrize("built", [False, True], ids=["fresh app", "built middleware stack"])
def test_update_weights_route_refuses_callers_and_paths(weights, tmp_path, built):
    client, engine = make_app(AdminPolicy("0.0.0.0", weights_dir=weights), built)
    body = {"path": str(weights / "step_1"), "version": 1}
    r = client.post("/update_weights", json=body)
    assert r.status_code == 403 and "has no token" in r.json()["error"] and engine.calls == []
    assert client.get("/health").status_code == 200 and client.get("/v1/models").status_code == 200
    assert client.post("/collective_rpc").status_code == 403 and client.get("/policy_version").status_code == 403

    client, engine = make_app(AdminPolicy("0.0.0.0", tokens=("s3cret",), weights_dir=weights), built)
    auth = {"Authorization": "Bearer s3cret"}
    assert client.post("/update_weights", json=body).status_code == 401
    assert client.post("/update_weights", json=body, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert client.post("/collective_rpc").status_code == 401
    r = client.post("/update_weights", json={"path": str(tmp_path / "elsewhere"), "version": 2}, headers=auth)
    assert r.status_code == 403 and "outside this server's weights directory" in r.json()["error"]
    assert engine.calls == []  # nothing reached the engine
    r = client.post("/update_weights", json=body, headers=auth)
    assert r.status_code == 200 and r.json()["version"] == 1
    assert ("prime_load_weights", str(weights / "step_1")) in engine.calls and ("version", "1") in engine.calls
    assert client.get("/policy_version", headers=auth).json()["path"] == str(weights / "step_1")
    assert client.post("/collective_rpc", headers=auth).json() == {"ran": True}


def test_loopback_without_token_keeps_admin_routes_open(weights):
    client, engine = make_app(AdminPolicy("127.0.0.1", weights_dir=weights))
    r = client.post("/update_weights", json={"path": str(weights / "step_1"), "version": 3})
    assert r.status_code == 200 and ("version", "3") in engine.calls


def test_env_and_warning_of_the_inference_command(tmp_path):
    cfg = InferenceConfig(model={"name": "/m"}, output_dir=tmp_path / "run")
    env = build_env(cfg, cpu=True, base={})
    assert env[guard.ENV_HOST] == "127.0.0.1" and env[guard.ENV_WEIGHTS_DIR] == str(tmp_path / "run" / "weights")
    assert guard.ENV_TOKEN not in env and exposure_warning(cfg, {}) is None
    wide = InferenceConfig(model={"name": "/m"}, server={"host": "0.0.0.0", "token": "t", "weights_dir": "/w"})
    env = build_env(wide, cpu=True, base={})
    assert env[guard.ENV_TOKEN] == "t" and env[guard.ENV_WEIGHTS_DIR] == "/w" and env[guard.ENV_HOST] == "0.0.0.0"
    assert "sampling API (/v1, /inference) is open" in exposure_warning(wide, {})
    bare = InferenceConfig(model={"name": "/m"}, server={"host": "0.0.0.0", "any_weights_path": True})
    assert build_env(bare, cpu=True, base={})[guard.ENV_WEIGHTS_DIR] == "*"
    assert "without a token: its admin routes" in exposure_warning(bare, {})
    assert "without a token" not in exposure_warning(bare, {guard.ENV_TOKEN: "t"})
    keyed = InferenceConfig(model={"name": "/m"}, server={"host": "0.0.0.0"}, vllm={"extra_args": {"--api_key": "k"}})
    assert exposure_warning(keyed, {}) is None


def test_rl_refuses_a_wide_bind_without_token_and_a_token_the_orchestrator_does_not_send():
    from pydantic import ValidationError

    from prime_rl.config.rl import RLConfig, check_inference_access

    with pytest.raises(ValidationError, match=r"inference.server.host = '0.0.0.0' is not loopback.*server.token"):
        RLConfig(inference={"server": {"host": "0.0.0.0"}})
    with pytest.raises(ValidationError, match=r"orchestrator.client.api_key is not set: .*/update_weights"):
        RLConfig(inference={"server": {"token": "t"}})
    with pytest.raises(ValidationError, match=r"orchestrator.client.api_key differs"):
        RLConfig(inference={"server": {"host": "0.0.0.0", "token": "t"}}, orchestrator={"client": {"api_key": "u"}})
    RLConfig(inference={"server": {"host": "0.0.0.0", "token": "t"}}, orchestrator={"client": {"api_key": "t"}})
    cfg = RLConfig(inference={"vllm": {"extra_args": {"--api_key": "k"}}}, orchestrator={"client": {"api_key": "k"}})
    check_inference_access(cfg, {})
    check_inference_access(cfg, {"PRIME_RL_INFERENCE_TOKEN": "t"})  # either accepted token will do
    with pytest.raises(ValueError, match="api_key differs"):
        check_inference_access(RLConfig(orchestrator={"client": {"api_key": "x"}}), {"VLLM_API_KEY": "k"})
    check_inference_access(RLConfig(), {})  # loopback, no token: open
