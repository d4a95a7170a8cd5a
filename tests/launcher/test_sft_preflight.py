"""`sft`'s checks that load no model (`launcher.sft_preflight`): `sft --dry-run` refuses a missing data file (of
data.path, a [[data.source]] or val.data) and an [[eval.source]] with an unknown env.id, exit 2 with one line and no
traceback, and prints the checks it ran; a real run refuses the same before it loads the model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prime_rl.config.trainer import SFTConfig
from prime_rl.launcher.errors import PreflightError
from prime_rl.launcher.sft_preflight import check_sft, data_files
from prime_rl.ports import free_port

ROW = {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}


def _rows(path: Path) -> Path:
    path.write_text(json.dumps(ROW) + "\n")
    return path


def _sft(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prime_rl.cli.sft", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)  # fmt: skip


def test_every_local_data_file_is_checked(tmp_path):
    a, b, val = _rows(tmp_path / "a.jsonl"), _rows(tmp_path / "b.jsonl"), _rows(tmp_path / "val.jsonl")
    cfg = SFTConfig(data={"source": [{"path": a}, {"path": b}, {"name": "org/hub-ds"}]}, val={"data": {"path": val}})
    assert data_files(cfg) == [("data.source.0.path", a), ("data.source.1.path", b), ("val.data.path", val)]
    assert check_sft(cfg) == ["data"]
    b.unlink()
    with pytest.raises(PreflightError, match=rf"data.source.1.path = '{b}': no such file or folder"):
        check_sft(cfg)
    assert data_files(SFTConfig(data={"name": "org/hub-ds"})) == []  # a dataset name is looked up when loaded


def test_eval_sources_must_name_a_registered_environment(tmp_path):
    data = {"path": _rows(tmp_path / "d.jsonl")}
    ok = SFTConfig(data=data, eval={"interval": 2, "source": [{"name": "rt", "env": {"id": "reverse-text"}}]})
    assert check_sft(ok) == ["data", "eval environments"]
    bad = SFTConfig(data=data, eval={"interval": 2, "source": [{"name": "rt", "env": {"id": "reverse-text"}},
                                                               {"name": "typo", "env": {"id": "revers-text"}}]})  # fmt: skip
    with pytest.raises(PreflightError, match=r"eval.source.1.env.id \(source 'typo'\) = 'revers-text': unknown "
                                             r"environment; choose one of: .*reverse-text"):
        check_sft(bad)


def test_dry_run_refuses_a_missing_data_file_and_an_unknown_env_and_reports_the_checks(tmp_path):
    cfg = tmp_path / "sft.toml"
    cfg.write_text('[data]\npath = "missing.jsonl"\n')
    r = _sft(["@", str(cfg), "--output-dir", str(tmp_path / "run"), "--dry-run"], tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.startswith(f"sft: error: data.path = 'missing.jsonl' (in {cfg}): no such file or folder")
    assert f"working directory {tmp_path}" in r.stderr and not (tmp_path / "run").exists()  # nothing written
    _rows(tmp_path / "missing.jsonl")
    eval_args = ["--eval.interval", "2", "--eval.source", json.dumps([{"name": "rt", "env": {"id": "revers-text"}}])]
    r = _sft(["@", str(cfg), "--output-dir", str(tmp_path / "run"), *eval_args, "--dry-run"], tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "eval.source.0.env.id (source 'rt') (from --eval.source) = 'revers-text': unknown environment" in r.stderr
    eval_args[-1] = eval_args[-1].replace("revers-text", "reverse-text")
    eval_args += ["--inference.server.port", str(free_port())]
    r = _sft(["@", str(cfg), "--output-dir", str(tmp_path / "run"), *eval_args, "--dry-run"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[:4] == [
        "checked (no model loaded, nothing started):",
        "  ok  data: every local data file (data.path, [[data.source]] path, val.data.path) exists",
        "  ok  eval environments: every [[eval.source]] env.id is a registered environment or an import path that "
        "imports",
        "  ok  eval server port: the port of the inference server [eval] starts (inference.server.port) is free",
    ]
    assert (tmp_path / "run" / "configs" / "sft.toml").is_file()


def test_a_run_refuses_an_unknown_env_before_it_loads_the_model(tmp_path):
    """The model folder does not exist either: the eval source's env.id is named first, so no training step (nor
    the model load) comes before the refusal."""
    _rows(tmp_path / "d.jsonl")
    r = _sft(["--model.name", str(tmp_path / "no-model"), "--data.path", "d.jsonl", "--max-steps", "1",
              "--output-dir", str(tmp_path / "run"), "--eval.interval", "1",
              "--eval.source", json.dumps([{"name": "x", "env": {"id": "no-such-env"}}])], tmp_path)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "sft: error: eval.source.0.env.id (source 'x') (from --eval.source) = 'no-such-env': unknown environment" in r.stderr


def test_dry_run_refuses_a_taken_eval_server_port(tmp_path):
    """`sft --dry-run` with [eval] checks the port of the inference server it would start, as `rl --dry-run` does:
    taken, it exits 2 naming the port, the field, the flag that set it and the holder."""
    import socket

    _rows(tmp_path / "d.jsonl")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        args = ["--data.path", "d.jsonl", "--output-dir", str(tmp_path / "run"), "--inference.server.port", str(port)]
        evals = json.dumps([{"name": "rt", "env": {"id": "reverse-text"}}])
        r = _sft([*args, "--eval.interval", "2", "--eval.source", evals, "--dry-run"], tmp_path)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert r.stderr.startswith(f"sft: error: port {port} (inference.server.port (from --inference.server.port), "
                                   "the inference server [eval] starts) is already in use by ")  # fmt: skip
        assert not (tmp_path / "run").exists()


def test_evals_dry_run_refuses_an_unknown_env_and_reports_the_check(tmp_path):
    """`evals --dry-run` runs the same environment check (`check_eval_envs`) on its [[eval.source]]: an unknown
    env.id exits 2 with one line (field, source, file, value, the registered names) and writes nothing; a known one
    prints the check and writes the resolved config."""
    cfg = tmp_path / "ev.toml"
    cfg.write_text('[[eval.source]]\nname = "x"\nenv.id = "revers-text"\n')
    args = ["@", str(cfg), "--output-dir", str(tmp_path / "out"), "--dry-run"]
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.evals", *args], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.startswith(f"evals: error: eval.source.0.env.id (source 'x') (in {cfg}) = 'revers-text': unknown "
                               "environment; choose one of: ")  # fmt: skip
    assert "reverse-text" in r.stderr and not (tmp_path / "out").exists()
    cfg.write_text('[[eval.source]]\nname = "x"\nenv.id = "reverse-text"\n')
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.evals", *args], capture_output=True, text=True,
                       cwd=tmp_path, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[:2] == [
        "checked (no model loaded, nothing started):",
        "  ok  eval environments: every [[eval.source]] env.id is a registered environment or an import path that "
        "imports",
    ]
    assert (tmp_path / "out" / "configs" / "evals.toml").is_file()


def test_dry_runs_warn_about_an_eval_num_examples_above_the_eval_split(tmp_path, monkeypatch, capsys):
    """`evals --dry-run` and `sft --dry-run` say what evals and sft's eval warn at start (before: nothing): a
    num_examples above a source's eval split (reverse-text: 100 tasks) is named with where it was set and the fix;
    one within the split says nothing."""
    from prime_rl.config.loader import parse_config
    from prime_rl.config.orchestrator import EvalCommandConfig
    from prime_rl.launcher.sft_preflight import dry_run_checks, evals_dry_run_checks

    monkeypatch.chdir(tmp_path)
    ev = tmp_path / "ev.toml"
    ev.write_text('[eval]\nnum_examples = 100000\n[[eval.source]]\nname = "rt"\nenv.id = "reverse-text"\n'
                  '[[eval.source]]\nname = "own"\nenv.id = "reverse-text"\nnum_examples = 5\n')  # fmt: skip
    evals_dry_run_checks(parse_config(EvalCommandConfig, ["@", str(ev)]))
    out = capsys.readouterr().out
    assert "  ok  eval split sizes: every [[eval.source]] num_examples is within its eval split" in out
    assert out.count("warning: ") == 1, out
    assert (f"warning: eval.num_examples=100000 (in {ev}) is above the 100 tasks in the eval split of source 'rt': "
            "it is evaluated on all 100; set eval.num_examples to at most 100 (unset: the whole split)") in out
    _rows(tmp_path / "rows.jsonl")
    source = json.dumps([{"name": "rt", "env": {"id": "reverse-text"}, "num_examples": 300}])
    sft = parse_config(SFTConfig, ["--data.path", "rows.jsonl", "--eval.interval", "2", "--eval.source", source,
                                   "--inference.server.port", str(free_port())])  # fmt: skip
    dry_run_checks(sft)
    out = capsys.readouterr().out
    assert ("warning: eval.source.0.num_examples=300 (from --eval.source) is above the 100 tasks in the eval split "
            "of source 'rt'") in out, out
    evals_dry_run_checks(parse_config(EvalCommandConfig, ["@", str(ev), "--eval.num-examples", "100"]))
    assert "warning: " not in capsys.readouterr().out
