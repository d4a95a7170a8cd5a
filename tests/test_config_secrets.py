"""Resolved configs (`configs/*.toml`, `--dry-run`) hold no secrets: a secret's value is written as `<redacted>`, the
writing process passes it on in PRIME_RL_SECRETS, and a file read without it is refused, naming the field, the file
and the fix."""

from __future__ import annotations

import json
import os

import pytest

from prime_rl.config.inference import InferenceConfig
from prime_rl.config.loader import ConfigError, config_to_toml, parse_config, write_config
from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.config.rl import RLConfig
from prime_rl.config.secrets import SECRETS_ENV, is_secret
from prime_rl.config.trainer import TrainerConfig

FLAGS = ["--client.api-key", "key-123", "--rollout-transport.token", "tok-456",
         "--train.source", '[{"name": "g", "env": {"taskset": {"id": "nemo-gym", "dataset": "rows.jsonl", "task": {"token": "gym-789"}}}}]']


def test_secret_names():
    assert all(map(is_secret, ["api_key", "token", "password", "client_secret", "hf_token"]))
    assert not any(map(is_secret, ["max_tokens", "env_tokens", "tokenizer", "token_budget", "max_completion_tokens"]))


def test_the_resolved_config_holds_no_secret_and_reads_back_by_environment(tmp_path):
    cfg = parse_config(OrchestratorConfig, FLAGS)
    assert cfg.train.source[0].env.taskset.task.token == "gym-789"
    path = write_config(cfg, tmp_path / "configs" / "orchestrator.toml")
    text = path.read_text()
    assert not any(s in text for s in ("key-123", "tok-456", "gym-789")) and text.count('"<redacted>"') == 3
    assert json.loads(os.environ[SECRETS_ENV])["orchestrator"] == {
        "client.api_key": "key-123", "rollout_transport.token": "tok-456",
        "train.source.0.env.taskset.task.token": "gym-789"}  # fmt: skip
    assert parse_config(OrchestratorConfig, ["@", str(path)]) == cfg


def test_a_redacted_secret_without_the_environment_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "orchestrator.toml"
    path.write_text(config_to_toml(parse_config(OrchestratorConfig, FLAGS)))
    monkeypatch.delenv(SECRETS_ENV, raising=False)
    with pytest.raises(ConfigError) as e:
        parse_config(OrchestratorConfig, ["@", str(path)])
    msg = str(e.value)
    assert f"client.api_key: <redacted> (in {path}): resolved configs hold no secrets; pass it with --client.api-key, " \
           f"""or as {SECRETS_ENV}='{{"orchestrator": {{"client.api_key": "..."}}}}'""" in msg
    assert "rollout_transport.token: <redacted>" in msg and "train.source[0].env.taskset.task.token" in msg
    assert parse_config(OrchestratorConfig, ["@", str(path), "--client.api-key", "k", "--rollout-transport.token", "t",
                                             "--train.source.0.env.taskset.task.token", "g"]).client.api_key == "k"


def test_rl_writes_no_secret_under_configs_and_its_children_read_them(tmp_path):
    """The configs rl writes for its processes (and rl.toml) hold no secret; each parses back, secrets included,
    in a process that inherits rl's environment."""
    from prime_rl.launcher.plan import resolve, write_configs
    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.ports import free_port

    cfg = parse_config(RLConfig, ["--model.name", str(cached_tiny_model()), "--output-dir", str(tmp_path / "run"),
                                  "--inference.server.port", str(free_port()), "--inference.server.token", "srv-1",
                                  "--orchestrator.client.api-key", "srv-1", "--rollout-transport.type", "tcp",
                                  "--rollout-transport.token", "tok-456"])  # fmt: skip
    paths = write_configs(resolve(cfg, probe=lambda url: False))
    assert {"rl", "trainer", "orchestrator", "inference"} <= set(paths)
    for name, path in paths.items():
        assert "tok-456" not in path.read_text() and "srv-1" not in path.read_text(), name
    orch = parse_config(OrchestratorConfig, ["@", str(paths["orchestrator"])])
    assert orch.client.api_key == "srv-1" and orch.rollout_transport.token == "tok-456"
    assert parse_config(InferenceConfig, ["@", str(paths["inference"])]).server.token == "srv-1"
    assert parse_config(TrainerConfig, ["@", str(paths["trainer"])]).rollout_transport.token == "tok-456"
    assert parse_config(RLConfig, ["@", str(paths["rl"])]).trainer.rollout_transport.token == "tok-456"


def test_the_plan_carries_node_0s_secrets_to_the_other_nodes(tmp_path, monkeypatch):
    """A multi-node run: node 0 writes the configs (secrets redacted) and puts their secrets in the plan it shares
    (`RunPlan.secrets`, launcher/multinode.py); another node, whose environment lacks them, adopts them from the
    plan before starting its processes."""
    from prime_rl.config.secrets import adopt, given
    from prime_rl.launcher.plan import RunPlan, resolve, write_configs
    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.ports import free_port

    cfg = parse_config(RLConfig, ["--model.name", str(cached_tiny_model()), "--output-dir", str(tmp_path / "run"),
                                  "--inference.server.port", str(free_port()), "--rollout-transport.type", "tcp",
                                  "--rollout-transport.token", "tok-456"])  # fmt: skip
    plan = resolve(cfg, probe=lambda url: False)
    path = write_configs(plan)["trainer"]
    shared = plan.model_copy(update={"secrets": given()}).model_dump(mode="json")
    monkeypatch.delenv(SECRETS_ENV)  # the other node's environment
    with pytest.raises(ConfigError, match="rollout_transport.token: <redacted>"):
        parse_config(TrainerConfig, ["@", str(path)])
    adopt(RunPlan.model_validate(shared).secrets)
    assert parse_config(TrainerConfig, ["@", str(path)]).rollout_transport.token == "tok-456"


@pytest.mark.slow
def test_a_run_whose_configs_hold_no_secret_uses_them(tmp_path):
    """`rl` with a rollout token over tcp and an inference admin token: every process reads its secret from the
    environment rl gives it (the run trains its steps: a stub gives nonzero advantages), and no file under configs/
    holds one."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.ports import free_port

    repo = Path(__file__).resolve().parents[1]
    cfg = tmp_path / "rl.toml"
    cfg.write_text(f"""
max_steps = 2
seq_len = 2048
output_dir = "{tmp_path / 'run'}"
[model]
name = "{cached_tiny_model(hidden=64, layers=2)}"
[rollout_transport]
type = "tcp"
port = {free_port()}
token = "tok-456"
[orchestrator]
batch_size = 8
[orchestrator.advantage]
type = "custom"
import_path = "tests.orchestrator.rl_stubs:alternating_advantages"
[orchestrator.client]
api_key = "srv-1"
[orchestrator.train]
group_size = 4
[orchestrator.train.sampling]
max_completion_tokens = 32
[[orchestrator.train.source]]
name = "gridsim"
env.taskset.id = "nemo-gym"
env.taskset.dataset = "{tmp_path / 'gym/resources_servers/gridsim_v1/data/train.jsonl'}"
env.taskset.task.resources_url = "http://127.0.0.1:{free_port()}"
env.agent.max_turns = 2
[inference.server]
port = {free_port()}
token = "srv-1"
""")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}  # the stub
    r = subprocess.run([str(Path(sys.executable).parent / "rl"), "@", str(cfg)], capture_output=True, text=True,
                       timeout=900, cwd=repo, env=env)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert sorted({int(m) for m in re.findall(r"^Step (\d+)/\d+ \|", r.stdout + r.stderr, flags=re.M)}) == [1, 2]
    for path in (tmp_path / "run" / "configs").glob("*.toml"):
        assert "tok-456" not in path.read_text() and "srv-1" not in path.read_text(), path
