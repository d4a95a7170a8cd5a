"""`env-server` as a config-loader Group: the argv `rl`'s launcher builds (and the older argparse spellings) parse
into the commands' configs with the values they name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.launcher.test_launcher_preflight import nemo_cfg

from prime_rl.cli.env_server import main
from prime_rl.config.env_server import EnvServerOpenEnvConfig, EnvServerServeConfig, EnvServerWriteConfig
from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.launcher import envserver
from prime_rl.registry import import_path


def _parse(argv: list[str]):
    return main.commands.get(argv[0]).parse(argv[1:], prog=f"env-server {argv[0]}")


def test_the_launchers_serve_argv_parses(tmp_path):
    cfg = nemo_cfg(tmp_path, "--env-server.token", "s3cret")
    (plan,) = envserver.plan_env_servers(cfg, probe=lambda url: False)
    spec = envserver.serve_spec(cfg, plan, tmp_path / "log", token=cfg.env_server.token)
    got = _parse(spec.argv[spec.argv.index("serve"):])
    want = EnvServerServeConfig(dir=plan.serve_dir, host="127.0.0.1", port=9100, max_concurrent=96,
                                masked_as_error=True, idle_timeout_s=120.0, token="s3cret")  # fmt: skip
    assert got == want


def test_seconds_end_in_s_and_the_reference_spellings_parse(tmp_path):
    """`--idle-timeout-s`/`--seed-wait-s` and the reference's `--idle-timeout`/`--seed-wait` set the same fields."""
    new = _parse(["serve", str(tmp_path), "--idle-timeout-s", "7", "--seed-wait-s", "3"])
    old = _parse(["serve", str(tmp_path), "--idle-timeout", "7", "--seed-wait", "3"])
    assert new == old
    assert (old.idle_timeout_s, old.seed_wait_s) == (7.0, 3.0)


def test_write_spellings(tmp_path):
    got = _parse(["write", "gridsim", str(tmp_path), "--data-dir", "data/ercot"])
    assert got == EnvServerWriteConfig(env="gridsim", out=tmp_path, data_dir=Path("data/ercot"))
    assert got.env_args() == {"data_dir": str(Path("data/ercot").resolve())}
    assert _parse(["write", "gridsim", str(tmp_path), "--synthetic"]).env_args() == {"synthetic": True}
    assert _parse(["write", "http://127.0.0.1:8200", str(tmp_path)]).env == "http://127.0.0.1:8200"
    got = _parse(["openenv", "reverse-text", "--port", "8300", "--max-concurrent-envs", "4"])
    assert got == EnvServerOpenEnvConfig(env="reverse-text", port=8300, max_concurrent_envs=4)


@pytest.mark.parametrize("argv, msg", [
    (["write", "reverse-text", "OUT", "--synthetic"], "--synthetic applies to gridsim only, not 'reverse-text'"),
    (["write", "http://127.0.0.1:8200", "OUT", "--synthetic"], "the OpenEnv server at http://127.0.0.1:8200"),
    (["write", "gridsim", "OUT", "--synthetic", "--data-dir", "D"], "choose one"),
    (["openenv", "gridsim", "--max-concurrent-envs", "0"], "max_concurrent_envs"),
    (["serve", "DIR", "--at-capacity", "drop"], "at_capacity"),
])  # fmt: skip
def test_bad_values_name_the_field(argv, msg):
    cmd = main.commands.get(argv[0])
    with pytest.raises(ConfigError, match=re.escape(msg)):
        parse_config(import_path(cmd.config, "config"), argv[1:], positional=cmd.positional)
