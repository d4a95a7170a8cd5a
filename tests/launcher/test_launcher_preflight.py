"""Pre-flight checks, placement, resume, env-server planning and step-line parsing (no child processes)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from prime_rl.config.loader import parse_config
from prime_rl.config.rl import RLConfig
from prime_rl.launcher import envserver, preflight, resume
from prime_rl.launcher.console import LogTail, parse_step_line
from prime_rl.launcher.errors import PreflightError
from prime_rl.launcher.layout import local_replicas
from prime_rl.launcher.placement import place
from prime_rl.monitor.rundir import RunDir
from prime_rl.ports import free_port, port_free

REPO = Path(__file__).resolve().parents[2]


def fake_model(d: Path) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text("{}")
    return d


def nemo_cfg(tmp_path: Path, *extra: str) -> RLConfig:
    """The seed config with its model and rows pointed into tmp_path."""
    model = fake_model(tmp_path / "model")
    rows = tmp_path / "gym-root/resources_servers/gridsim_v1/data/train.jsonl"
    cfg = parse_config(RLConfig, ["@", str(REPO / "examples/gridsim/seed.toml"), "--model.name", str(model),
                                  "--output-dir", str(tmp_path / "run"), *extra])
    cfg.orchestrator.train.source[0].env.taskset.dataset = rows
    return cfg


def test_port_taken_names_port_and_holder(tmp_path):
    cfg = nemo_cfg(tmp_path)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not port_free("127.0.0.1", port)
        cfg.inference.server.port = port
        with pytest.raises(PreflightError) as ei:
            preflight.check_ports(local_replicas(cfg), [])
        msg = str(ei.value)
        assert f"port {port} (inference.server.port)" in msg
        import os

        assert f"pid {os.getpid()}" in msg  # this test process holds it
    assert port_free("127.0.0.1", port)


def test_env_server_port_checked_only_when_rl_starts_it(tmp_path):
    cfg = nemo_cfg(tmp_path)
    cfg.inference.server.port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        plan = envserver.EnvServerPlan(f"http://127.0.0.1:{port}", "127.0.0.1", port, tmp_path, None, ["src0"])
        with pytest.raises(PreflightError, match=f"port {port} \\(the env server for"):
            preflight.check_ports(local_replicas(cfg), [plan])
        preflight.check_ports(local_replicas(cfg), [])  # a server already answering there is used, not started: no check


def test_model_and_data_and_sizes(tmp_path):
    cfg = nemo_cfg(tmp_path)
    cfg.inference.model.name = str(tmp_path / "nope")
    with pytest.raises(PreflightError, match=r"inference.model.name = .*nope.*no such folder.*prime-rl tiny-model"):
        preflight.check_model(cfg)
    cfg = nemo_cfg(tmp_path)
    preflight.check_model(cfg)
    # rows missing and not going to be written by rl (no plan): names the field
    with pytest.raises(PreflightError, match=r"orchestrator.train.source\[0\].env.taskset.dataset = .*no such file"):
        preflight.check_data(cfg, [])
    rows = Path(cfg.orchestrator.train.source[0].env.taskset.dataset)
    rows.parent.mkdir(parents=True)
    rows.write_text("{}\n")
    with pytest.raises(PreflightError, match="eval rows .*eval.jsonl.* not found"):  # seed sets eval.interval
        preflight.check_data(cfg, [])
    (rows.parent / "eval.jsonl").write_text("{}\n")
    preflight.check_data(cfg, [])
    cfg.orchestrator.batch_size = 30  # 30 % 8 != 0
    with pytest.raises(PreflightError, match=r"batch_size \(30\) must be a multiple of .*group_size \(8\)"):
        preflight.check_sizes(cfg)


def test_capacity(tmp_path):
    cfg = nemo_cfg(tmp_path, "--env-server.max-concurrent", "48")  # seed: max_inflight 64
    url = cfg.orchestrator.train.source[0].env.taskset.task.resources_url
    plan = envserver.EnvServerPlan(url, "127.0.0.1", 9100, tmp_path, None, ["s"])
    with pytest.raises(PreflightError, match=r"max_inflight \(64\) is above env_server.max_concurrent .*\(48\)"):
        preflight.check_capacity(cfg, [plan])
    cfg.env_server.max_concurrent = 96
    preflight.check_capacity(cfg, [plan])


def test_client_follows_inference_port(tmp_path):
    cfg = nemo_cfg(tmp_path, "--inference.server.port", "8123")
    assert preflight.check_client(cfg, local_replicas(cfg)) == ["http://127.0.0.1:8123"]
    cfg = nemo_cfg(tmp_path, "--inference.server.port", "8123", "--orchestrator.client.base-url", '["http://127.0.0.1:8000"]')
    with pytest.raises(PreflightError, match="base_url has 'http://127.0.0.1:8000' but rl serves inference at"):
        preflight.check_client(cfg, local_replicas(cfg))


def test_client_must_name_this_machine_and_http(tmp_path):
    """A base_url with rl's port but another host (or https) would send the orchestrator elsewhere than the servers
    rl starts here: refused. This machine's own names pass."""
    def check(url):
        cfg = nemo_cfg(tmp_path, "--inference.server.port", "8123", "--orchestrator.client.base-url", f'["{url}"]')
        return preflight.check_client(cfg, local_replicas(cfg))

    for url in ("http://127.0.0.1:8123", "http://localhost:8123", f"http://{socket.gethostname()}:8123"):
        assert check(url) == [url]
    with pytest.raises(PreflightError, match="a host other than this machine"):
        check("http://192.0.2.7:8123")  # TEST-NET-1 (RFC 5737): never an address of this machine
    with pytest.raises(PreflightError, match="speak plain http"):
        check("https://127.0.0.1:8123")


def test_run_dirs_must_agree(tmp_path):
    cfg = RLConfig()
    cfg.trainer.output_dir = tmp_path / "a"
    with pytest.raises(PreflightError, match="share one run directory"):
        preflight.check_run_dirs(cfg)


def test_placement_cpu_and_gpu():
    cfg = RLConfig()
    p = place(cfg, gpus=[], ncores=2)
    assert p.device == "cpu" and p.trainer_procs == 1 and p.updates["trainer.threads"] == 1
    assert p.env["trainer"]["OMP_NUM_THREADS"] == "1" and p.env["orchestrator"]["OMP_NUM_THREADS"] == "1"
    assert place(RLConfig(), gpus=[], ncores=16).updates["trainer.threads"] == 8
    cfg = parse_config(RLConfig, ["--deployment.num-train-gpus", "2", "--deployment.num-infer-gpus", "3"])
    p = place(cfg, gpus=["0", "1", "2", "3", "4", "5"])
    assert p.trainer_procs == 2 and p.updates["orchestrator.num_train_ranks"] == 2
    assert p.env["trainer"]["CUDA_VISIBLE_DEVICES"] == "0,1" and p.env["inference"]["CUDA_VISIBLE_DEVICES"] == "2,3,4"
    assert p.updates["inference.vllm.data_parallel_size"] == 3
    assert cfg.inference.vllm.data_parallel_size == 1  # place() leaves the config as it was
    with pytest.raises(PreflightError, match=r"= 5 GPUs, but only 4 are visible"):
        place(parse_config(RLConfig, ["--deployment.num-train-gpus", "2", "--deployment.num-infer-gpus", "3"]),
              gpus=["0", "1", "2", "3"])


def test_resume_picks_newest_complete_and_drops_later_steps(tmp_path):
    run = RunDir(tmp_path)
    with pytest.raises(PreflightError, match="no complete checkpoint"):
        resume.latest_checkpoint(run)
    for n in (2, 4, 6):
        for part in ("trainer", "orchestrator"):
            d = run.checkpoint_step(n) / part
            d.mkdir(parents=True)
            (d / "state.bin").write_text("x")
            if (n, part) != (6, "trainer"):  # step 6's trainer part never got its marker: incomplete
                (d / "STABLE").write_text("")
    for n in range(1, 8):
        run.rollout_step(n).mkdir(parents=True)
        run.weight_step(n).mkdir(parents=True)
    assert resume.complete_checkpoints(run) == [2, 4]
    assert resume.latest_checkpoint(run) == 4
    resume.drop_steps_after(run, 4)
    assert [n for n in range(1, 8) if run.rollout_step(n).exists()] == [1, 2, 3, 4]
    assert [n for n in range(1, 8) if run.weight_step(n).exists()] == [1, 2, 3, 4]
    assert not run.checkpoint_step(6).exists()
    assert resume.previous_run(run)
    resume.clean(run)
    assert resume.previous_run(run) == []


def test_env_server_plan(tmp_path):
    cfg = nemo_cfg(tmp_path)
    plans = envserver.plan_env_servers(cfg, probe=lambda url: False)
    assert len(plans) == 1
    p = plans[0]
    assert (p.host, p.port) == ("127.0.0.1", 9100)
    assert p.serve_dir == tmp_path / "gym-root/resources_servers/gridsim_v1"
    assert p.write_root == tmp_path / "gym-root"  # rows missing: rl writes them first
    assert envserver.plan_env_servers(cfg, probe=lambda url: True) == []  # already answering: used as is
    spec = envserver.serve_spec(cfg, p, tmp_path / "log")
    argv = spec.argv[spec.argv.index("serve"):]
    assert argv[:2] == ["serve", str(p.serve_dir)]
    assert "--masked-as-error" in argv and argv[argv.index("--idle-timeout") + 1] == "120"
    assert argv[argv.index("--port") + 1] == "9100" and argv[argv.index("--max-concurrent") + 1] == "96"
    cfg.orchestrator.train.source[0].env.taskset.task.resources_url = "http://10.1.2.3:9100"
    with pytest.raises(PreflightError, match="not on this machine"):
        envserver.plan_env_servers(cfg, probe=lambda url: False)
    cfg.orchestrator.train.source[0].env.taskset.task.resources_url = "http://127.0.0.1:9100"
    cfg.env_server.auto_start = False
    with pytest.raises(PreflightError, match="auto_start"):
        envserver.plan_env_servers(cfg, probe=lambda url: False)


def test_step_lines(tmp_path):
    assert parse_step_line("Step 12 | 1m 23s | Reward 0.7508 | Trainable 32/32 (100.0%)") == (
        12, "Step 12 | 1m 23s | Reward 0.7508 | Trainable 32/32 (100.0%)")
    assert parse_step_line("12:00:01 INFO    [orchestrator] Step 3 | 0m 2s | Reward 0.1\n")[0] == 3
    assert parse_step_line("\x1b[32mStep 4 | x\x1b[0m") == (4, "Step 4 | x")
    assert parse_step_line("Step 7/50 | 0m 3s | Reward 0.5") == (7, "Step 7/50 | 0m 3s | Reward 0.5")
    assert parse_step_line("waiting for Step 5 weights") is None
    assert parse_step_line("Stepping 5 | x") is None
    f = tmp_path / "o.log"
    f.write_text("old line\n")
    t = LogTail(f)
    assert t.read_lines() == []
    with open(f, "a") as fh:
        fh.write("Step 1 | a\nStep 2 | b")  # second line not complete yet
    assert t.read_lines() == ["Step 1 | a"]
    with open(f, "a") as fh:
        fh.write(" more\n")
    assert t.read_lines() == ["Step 2 | b more"]
    assert json.dumps(LogTail(tmp_path / "none").read_lines()) == "[]"


def test_orchestrator_keeps_enough_checkpoints_to_overlap_the_trainer():
    from prime_rl.launcher.plan import retention

    cfg = parse_config(RLConfig, ["--ckpt.interval", "1", "--ckpt.keep-last", "2", "--orchestrator.max-async-level", "1"])
    # trainer keeps steps {N-1, N}; the orchestrator may be at N+2: it must keep N+2, N+1, N, N-1
    assert cfg.trainer.ckpt.keep_last == 2 and retention(cfg) == {"orchestrator.ckpt.keep_last": 4}


def test_step_view_prints_step_and_eval_lines_once(tmp_path):
    import io

    from rich.console import Console

    from prime_rl.launcher.console import StepView, parse_eval_line

    line = "2026-11-29 12:00:01 INFO    [prime_rl.orchestrator] Eval policy 40 | gridsim avg@2 0.7819 pass@2 0.055"
    assert parse_eval_line(line) == (40, "Eval policy 40 | gridsim avg@2 0.7819 pass@2 0.055")
    assert parse_eval_line("Step 3 | x") is None
    log = tmp_path / "orchestrator.log"
    log.write_text("")
    out = io.StringIO()
    view = StepView(log, total=2, console=Console(file=out, width=200))
    log.write_text(f"{line}\nStep 1 | a\n{line}\nStep 1 | a\nEval policy 0 | g avg@1 0.5\n")
    view.poll()
    assert view.lines == ["Eval policy 40 | gridsim avg@2 0.7819 pass@2 0.055", "Step 1 | a", "Eval policy 0 | g avg@1 0.5"]


@pytest.mark.parametrize("args, field", [
    (["--orchestrator.train.source", '[{"name": "r", "env": {"id": "no-such-env"}}]'],
     "orchestrator.train.source['r'].env.id = 'no-such-env': unknown environment"),
    (["--orchestrator.advantage.type", "custom", "--orchestrator.advantage.import-path", "no_such_mod:fn"],
     "orchestrator.advantage.import_path = 'no_such_mod:fn': cannot import module 'no_such_mod'"),
    (["--trainer.loss.type", "custom", "--trainer.loss.import-path", "prime_rl.envs.base:no_such_loss"],
     "trainer.loss.import_path = 'prime_rl.envs.base:no_such_loss'"),
])  # fmt: skip
def test_unknown_extension_names_the_field_before_anything_starts(tmp_path, args, field):
    """A name or import path that does not resolve is a pre-flight error naming the field (before: the launcher
    died with a traceback when it built the sources, or the orchestrator/trainer failed once the run was going)."""
    cfg = parse_config(RLConfig, ["--output-dir", str(tmp_path / "run"), "--model.name", str(fake_model(tmp_path)),
                                  *args])  # fmt: skip
    with pytest.raises(PreflightError) as e:
        preflight.check_extensions(cfg)
    assert str(e.value).startswith(field), str(e.value)


def test_dry_run_refuses_an_unknown_environment(tmp_path):
    """`rl --dry-run` resolves the environments too (before: it wrote the configs of a run that could never start)."""
    import subprocess
    import sys

    r = subprocess.run([str(Path(sys.executable).parent / "rl"), "--output-dir", str(tmp_path / "run"),
                        "--model.name", str(fake_model(tmp_path)), "--orchestrator.train.source",
                        '[{"name": "r", "env": {"id": "no-such-env"}}]', "--dry-run"],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "env.id = 'no-such-env': unknown environment" in r.stderr, r.stderr
    assert not (tmp_path / "run/configs").exists()
