"""A multi-node run's inference replicas bind their node's address, where the admin routes (`/update_weights`) are
closed without a token: the launch plan gives the replicas and the orchestrator one shared token."""

from __future__ import annotations

from tests.launcher.test_launch_plan import cfg_of, demo_args, free_block, rows_at, tiny  # noqa: F401 - fixture

from prime_rl.launcher.layout import Layout, Replica
from prime_rl.launcher.plan import resolve
from prime_rl.launcher.replicas import admin_token


def _replicas(*hosts: str) -> list[Replica]:
    return [Replica(index=i, bind_host=h, addr=h, port=8000 + i) for i, h in enumerate(hosts)]


def test_a_replica_beyond_loopback_gets_a_shared_token(tmp_path, tiny):  # noqa: F811
    rows_at(tmp_path / "gym-root")
    cfg = cfg_of(demo_args(tmp_path, tiny))
    assert admin_token(cfg, _replicas("127.0.0.1", "127.0.0.2"), environ={}) == {}  # loopback: routes stay open
    changes = admin_token(cfg, _replicas("127.0.0.1", "10.1.2.3"), environ={})
    token = changes["inference.server.token"]
    assert len(token) >= 24 and changes == {"inference.server.token": token, "orchestrator.client.api_key": token}
    assert admin_token(cfg, _replicas("10.1.2.3"), environ={}) != changes  # a fresh secret per run
    # a token the user configured is kept (config.rl.check_inference_access already checked the orchestrator has it)
    assert admin_token(cfg, _replicas("10.1.2.3"), environ={"PRIME_RL_INFERENCE_TOKEN": "t"}) == {}
    keyed = cfg.model_copy(update={"orchestrator": cfg.orchestrator.model_copy(
        update={"client": cfg.orchestrator.client.model_copy(update={"api_key": "mine"})})})  # fmt: skip
    assert admin_token(keyed, _replicas("10.1.2.3"), environ={}) == {
        "inference.server.token": "mine", "orchestrator.client.api_key": "mine"}  # fmt: skip


def test_the_multi_node_plan_writes_the_token_into_both_processes(tmp_path, tiny, monkeypatch):  # noqa: F811
    monkeypatch.delenv("PRIME_RL_INFERENCE_TOKEN", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    rows_at(tmp_path / "gym-root")
    args = demo_args(tmp_path, tiny)
    i = args.index("--inference.server.port")
    del args[i : i + 2]
    cfg = cfg_of(args + ["--deployment.type", "multi-node", "--deployment.num-infer-nodes", "1",
                         "--deployment.num-train-nodes", "1", "--deployment.port-base", str(free_block()),
                         "--deployment.bind-host", "0.0.0.0"])  # fmt: skip
    plan = resolve(cfg, Layout.slurm("multi-node", ["127.0.0.1", "127.0.0.1"], 0, "7"), probe=lambda u: False,
                   gpus=[])  # fmt: skip
    token = plan.config.inference.server.token
    assert token and plan.config.orchestrator.client.api_key == token
    assert cfg.inference.server.token is None  # the parsed config is not edited
