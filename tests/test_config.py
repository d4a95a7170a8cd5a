"""Config system: composition, precedence, shared-field propagation, error messages, dry-run, seed config."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.config.rl import RLConfig

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "examples" / "gridsim" / "seed.toml"


def _write(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_precedence_defaults_files_cli(tmp_path):
    default = OrchestratorConfig().batch_size
    assert parse_config(OrchestratorConfig, []).batch_size == default
    f = _write(tmp_path, "a.toml", "batch_size = 16\n[train]\ngroup_size = 4\n")
    assert parse_config(OrchestratorConfig, ["@", f]).batch_size == 16
    cfg = parse_config(OrchestratorConfig, ["@", f, "--batch-size", "24"])
    assert cfg.batch_size == 24 and cfg.train.group_size == 4


def test_two_files_deep_merge_left_to_right(tmp_path):
    a = _write(tmp_path, "a.toml", "batch_size = 16\n[train]\ngroup_size = 4\n[train.sampling]\ntemperature = 0.7\n")
    b = _write(tmp_path, "b.toml", "[train.sampling]\nmax_completion_tokens = 99\n")
    cfg = parse_config(OrchestratorConfig, ["@", a, "@", b])
    assert cfg.train.sampling.temperature == 0.7  # kept from a (deep merge, not replace)
    assert cfg.train.sampling.max_completion_tokens == 99
    c = _write(tmp_path, "c.toml", "[train.sampling]\ntemperature = 0.3\n")
    assert parse_config(OrchestratorConfig, ["@", a, "@", c]).train.sampling.temperature == 0.3
    assert parse_config(OrchestratorConfig, ["@", c, "@", a]).train.sampling.temperature == 0.7


def test_shared_fields_propagate(tmp_path):
    f = _write(tmp_path, "rl.toml", 'max_steps = 7\nseq_len = 512\noutput_dir = "out/x"\n[model]\nname = "m"\n'
               "[ckpt]\ninterval = 3\n")
    cfg = parse_config(RLConfig, ["@", f])
    for sec in (cfg.trainer, cfg.orchestrator):
        assert sec.max_steps == 7 and sec.seq_len == 512 and sec.ckpt.interval == 3
        assert sec.model.name == "m" and sec.output_dir == Path("out/x")
    assert cfg.inference.model.name == "m" and cfg.inference.output_dir == Path("out/x")


def test_shared_field_merges_with_section_subfields(tmp_path):
    f = _write(tmp_path, "rl.toml", '[model]\nname = "m"\n[trainer.model.lora]\nrank = 4\n')
    cfg = parse_config(RLConfig, ["@", f])
    assert cfg.trainer.model.name == "m" and cfg.trainer.model.lora.rank == 4


def test_shared_field_conflict_raises(tmp_path):
    f = _write(tmp_path, "rl.toml", "max_steps = 7\n[trainer]\nmax_steps = 8\n")
    with pytest.raises(ConfigError, match=r"max_steps.*trainer\.max_steps"):
        parse_config(RLConfig, ["@", f])
    # same value at both levels is fine, including typed TOML vs string CLI
    g = _write(tmp_path, "ok.toml", "max_steps = 7\n")
    assert parse_config(RLConfig, ["@", g, "--trainer.max-steps", "7"]).trainer.max_steps == 7
    with pytest.raises(ConfigError, match="model.name"):
        parse_config(RLConfig, ["--model.name", "a", "--orchestrator.model.name", "b"])


def test_unknown_key_names_path_and_suggests(tmp_path):
    f = _write(tmp_path, "typo.toml", "[orchestrator]\nbatch_sise = 3\n")
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["@", f])
    assert "orchestrator.batch_sise" in str(e.value)
    assert "did you mean `orchestrator.batch_size`" in str(e.value)


def test_wrong_type_names_field_value_and_type():
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["--orchestrator.batch-size", "many"])
    msg = str(e.value)
    assert "orchestrator.batch_size" in msg and "'many'" in msg and "integer" in msg


def test_batch_size_must_be_multiple_of_group_size():
    with pytest.raises(ConfigError, match="multiple of train.group_size"):
        parse_config(OrchestratorConfig, ["--batch-size", "10", "--train.group-size", "4"])


def test_seed_config_parses_with_values_from_file():
    cfg = parse_config(RLConfig, ["@", str(SEED)])
    assert cfg.trainer.max_steps == 40 and cfg.orchestrator.max_steps == 40
    assert cfg.trainer.optim.lr == 2e-5
    assert cfg.trainer.model.lora.rank == 32 and cfg.trainer.model.lora.alpha == 64.0
    assert cfg.orchestrator.batch_size == 32 and cfg.orchestrator.concurrency.max_inflight == 64
    src = cfg.orchestrator.train.source[0]
    assert src.env.taskset.task.resources_url == "http://127.0.0.1:9100"
    assert src.env.agent.max_turns == 4
    assert cfg.orchestrator.train.sampling.temperature == 1.1
    assert cfg.inference.vllm.tool_call_parser == "hermes"
    assert cfg.deployment.num_infer_gpus == 3


def _run(args, cwd):
    return subprocess.run([sys.executable, "-m", "prime_rl.cli.rl", *args], cwd=cwd, capture_output=True, text=True)


def _runnable(tmp_path: Path) -> list[str]:
    """Flags that make the seed config pass `--dry-run` here, whatever else listens on this machine: a real (tiny)
    model, a free inference port and a free port for the GridSim resources server (the seed's 9100 may be taken by
    another server, whose rows rl would then expect to exist)."""
    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.ports import free_port

    return ["--model.name", str(cached_tiny_model()), "--inference.server.port", str(free_port()),
            "--orchestrator.train.source.0.env.taskset.task.resources-url", f"http://127.0.0.1:{free_port()}"]


def test_rl_dry_run_writes_resolved_configs(tmp_path):
    r = _run(["@", str(SEED), "--output-dir", str(tmp_path / "run"), "--orchestrator.batch-size", "64",
              *_runnable(tmp_path), "--dry-run"], tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    configs = tmp_path / "run" / "configs"
    orch = tomllib.loads((configs / "orchestrator.toml").read_text())
    trainer = tomllib.loads((configs / "trainer.toml").read_text())
    inf = tomllib.loads((configs / "inference.toml").read_text())
    assert orch["batch_size"] == 64 and orch["max_steps"] == 40 and orch["train"]["group_size"] == 8
    assert trainer["optim"]["lr"] == 2e-5 and trainer["model"]["name"] == _runnable(tmp_path)[1]
    assert inf["vllm"]["tool_call_parser"] == "hermes"
    # the resolved file parses back to the same config
    again = parse_config(OrchestratorConfig, ["@", str(configs / "orchestrator.toml")])
    assert again.batch_size == 64


def test_rl_typo_exits_nonzero_with_hint(tmp_path):
    f = _write(tmp_path, "typo.toml", "[orchestrator]\nbatch_sise = 3\n")
    r = _run(["@", f, "--dry-run"], tmp_path)
    assert r.returncode != 0
    assert "orchestrator.batch_sise" in r.stderr and "batch_size" in r.stderr


CMDS = {"rl": "rl", "sft": "sft", "trainer": "trainer", "orchestrator": "orchestrator", "inference": "inference",
        "evals": "evals", "eval": "eval", "env-server": "env_server", "gridsim": "gridsim", "prime-rl": "prime_rl",
        "dashboard": "dashboard"}


def test_help_is_fast_as_a_ratio_to_a_bare_python_start():
    """benchmarks/cli_help.py, 3 interleaved runs: every `--help` under 40 bare `python -c pass` starts (measured
    7-20x on 2 loaded cores; 100-170x for `rl` before config.fast_help, which this guard would catch)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cli_help", REPO / "benchmarks" / "cli_help.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    res = bench.measure(tuple(sorted(CMDS)), runs=3)
    slow = {c: round(r["ratio"], 1) for c, r in res.items() if r["ratio"] > 40}
    assert not slow, (slow, res["python -c pass"])


@pytest.mark.parametrize("cmd", sorted(CMDS))
def test_entry_points_answer_help_without_heavy_imports(cmd):
    exe = Path(sys.executable).parent / cmd
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    probe = (
        "import sys\n"
        f"from prime_rl.cli.{CMDS[cmd]} import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'vllm', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_resolved_config_round_trips_none_over_non_none_default(tmp_path):
    """A field set to None whose default is not None must stay None in the child's config (TOML has no null)."""
    from prime_rl.config.loader import config_to_toml
    from prime_rl.config.trainer import TrainerConfig

    assert TrainerConfig().optim.max_norm is not None
    cfg = parse_config(TrainerConfig, ["--optim.max-norm", "None", "--weights.keep-last", "None"])
    assert cfg.optim.max_norm is None and cfg.weights.keep_last is None
    path = tmp_path / "t.toml"
    path.write_text(config_to_toml(cfg))
    again = parse_config(TrainerConfig, ["@", str(path)])
    assert again == cfg
    full = parse_config(RLConfig, ["@", str(SEED)])
    path.write_text(config_to_toml(full))
    assert parse_config(RLConfig, ["@", str(path)]) == full


def test_eval_may_decode_greedily_but_training_must_sample():
    cfg = parse_config(OrchestratorConfig, ["--eval.sampling.temperature", "0", "--eval.interval", "5"])
    assert cfg.eval.sampling.temperature == 0.0
    with pytest.raises(ConfigError, match=r"train\.sampling\.temperature"):
        parse_config(OrchestratorConfig, ["--train.sampling.temperature", "0"])


def test_config_file_without_at_gets_a_hint():
    with pytest.raises(ConfigError, match=r"passed after `@`: `rl @ examples/gridsim/rl.toml"):
        parse_config(RLConfig, ["examples/gridsim/rl.toml"], prog="rl")


def test_errors_name_the_file_or_flag_and_both_spellings(tmp_path):
    """With several `@` files, a bad key names the file that set it; a flag names the flag; a hint gives both the
    TOML key and the command-line flag."""
    good = _write(tmp_path, "good.toml", "[orchestrator]\nbatch_size = 8\n")
    bad = _write(tmp_path, "bad.toml", "[orchestrator]\nbatch_sise = 3\n")
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["@", good, "@", bad])
    assert f"(in {bad})" in str(e.value) and str(good) not in str(e.value)
    assert "did you mean `orchestrator.batch_size` (flag `--orchestrator.batch-size`)" in str(e.value)
    wrong = _write(tmp_path, "wrong.toml", "[orchestrator]\nbatch_size = 'x'\n")
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["@", wrong, "@", good, "@", wrong])  # the last file that sets it is the culprit
    assert str(e.value).count(f"(in {wrong})") == 1
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["@", good, "--orchestrator.batch-size", "many"])
    assert "(from --orchestrator.batch-size)" in str(e.value)
    # a section-level validator error naming the field: its flag is named, not a file that holds the section only
    trains = _write(tmp_path, "train.toml", "[orchestrator.train]\ngroup_size = 4\n")
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["@", trains, "--orchestrator.train.sampling.top-p", "0.9"])
    assert "(from --orchestrator.train.sampling.top-p)" in str(e.value) and str(trains) not in str(e.value)
    assert "top_p = 0.9 truncates the sampling distribution" in str(e.value)


def test_missing_config_file_names_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["@", "nothere.toml"])
    assert "'nothere.toml' not found" in str(e.value) and str(tmp_path) in str(e.value)


def test_rl_wandb_goes_to_the_launcher_not_the_children(tmp_path):
    """`rl` forwards every process's rows to one W&B run itself: the resolved child configs carry no [wandb]
    (else trainer and orchestrator would open runs of their own), rl.toml keeps it."""
    r = _run(["@", str(SEED), "--output-dir", str(tmp_path / "run"), "--wandb.project", "p", "--wandb.offline", "true",
              *_runnable(tmp_path), "--dry-run"], tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    configs = tmp_path / "run" / "configs"
    assert tomllib.loads((configs / "rl.toml").read_text())["wandb"] == {"project": "p", "offline": True}
    for child in ("trainer", "orchestrator"):
        assert "wandb" not in tomllib.loads((configs / f"{child}.toml").read_text())


@pytest.mark.parametrize("flags,message", [
    (["--trainer.rollout-transport.type", "tcp"], "trainer.rollout_transport (type 'tcp', port 29650) differs from "
     "orchestrator.rollout_transport (type 'filesystem', port 29650): the trainer would never receive its batches; set "
     "[rollout_transport] once at the top of the rl config (trainer.rollout_transport from "
     "--trainer.rollout-transport.type)"),
    (["--trainer.rollout-transport.token", "a"], "trainer.rollout_transport.token differs from "
     "orchestrator.rollout_transport.token: the orchestrator would refuse every trainer request; set [rollout_transport] "
     "token once at the top of the rl config (or PRIME_RL_ROLLOUT_TOKEN) (trainer.rollout_transport.token from "
     "--trainer.rollout-transport.token)"),
    (["--trainer.weight-transport.port", "5001"], "trainer.weight_transport (type 'filesystem', port 5001) differs from "
     "orchestrator.weight_transport (type 'filesystem', port 29660): set [weight_transport] once at the top of the rl "
     "config (trainer.weight_transport from --trainer.weight-transport.port)"),
])  # fmt: skip
def test_both_sides_of_a_shared_transport_section_must_agree(flags, message):
    """Trainer and orchestrator read one rollout and one weight transport (config.rl.check_sides_agree); a token's
    value never appears in the message, the flag that set the differing side does."""
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["--model.name", "m", *flags])
    assert str(e.value).strip() == message


def test_inference_urls_drop_a_trailing_v1_and_refuse_no_scheme_or_another_path(tmp_path):
    """prime-rl adds its routes to a server's root URL: the OpenAI-style `.../v1` names the same server (kept as the
    root), a URL without http:// or with another path is refused naming the field and where it was set."""
    from prime_rl.config.orchestrator import EvalCommandConfig

    cfg = parse_config(RLConfig, ["--orchestrator.client.base-url", "http://127.0.0.1:8000/v1/",
                                  "--orchestrator.teacher", '{"name": "t", "base_url": ["http://127.0.0.1:8011/v1"]}',
                                  "--trainer.loss.type", "opd"])  # fmt: skip
    assert cfg.orchestrator.client.base_url == ["http://127.0.0.1:8000"]
    assert cfg.orchestrator.teacher.base_url == ["http://127.0.0.1:8011"]
    assert cfg.orchestrator.teacher.client().base_url == ["http://127.0.0.1:8011"]
    evals = parse_config(EvalCommandConfig, ["--model.name", "m", "--backend.base-url", "http://127.0.0.1:8001/v1"])
    assert evals.backend.base_url == ["http://127.0.0.1:8001"]
    teacher = tmp_path / "teacher.toml"
    teacher.write_text('[orchestrator.teacher]\nname = "t"\nbase_url = ["127.0.0.1:8011"]\n[trainer.loss]\ntype = "opd"\n')
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["@", str(teacher)])
    assert ("orchestrator.teacher.base_url: '127.0.0.1:8011' is not an http(s) URL with a host: write "
            f"http://127.0.0.1:8011 (in {teacher})") in str(e.value)  # fmt: skip
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["--orchestrator.client.base-url", "http://127.0.0.1:8000/api"])
    assert "orchestrator.client.base_url: 'http://127.0.0.1:8000/api' has a path" in str(e.value)
    assert "write http://127.0.0.1:8000 (a trailing /v1 is accepted) (from --orchestrator.client.base-url)" in str(e.value)
