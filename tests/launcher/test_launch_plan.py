"""The launch plan (`launcher/plan.py`) and `rl --dry-run`: resolution leaves the parsed config as it was, single-
and multi-node plans run the same checks, and the dry run refuses (exit 2, naming the field) each thing that would
stop the real run: a model that does not resolve, missing rows, a malformed URL, a taken port, a seq_len above the
model's context, a renderer without the thinking setting asked for, and something at resources_url that is not
the expected env server (a stdlib stub server)."""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest

from prime_rl.config.loader import parse_config
from prime_rl.config.rl import RLConfig
from prime_rl.launcher import envserver
from prime_rl.launcher.dryrun import dry_run
from prime_rl.launcher.errors import PreflightError
from prime_rl.launcher.evolve import map_sources, with_task
from prime_rl.launcher.layout import Layout
from prime_rl.launcher.plan import CHECKS, NODE_CHECKS, RunPlan, resolve
from prime_rl.ports import free_port

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples/gridsim/rl.toml"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def tiny() -> Path:
    from prime_rl.models.tiny import cached_tiny_model

    return cached_tiny_model()


def rows_at(root: Path) -> Path:
    """Train and eval rows of a `gridsim_v1` server under `root` (content is not read by these checks' subjects
    beyond the prompt-length sample, which reads GridSim-like rows)."""
    rows = root / "resources_servers/gridsim_v1/data/train.jsonl"
    rows.parent.mkdir(parents=True, exist_ok=True)
    row = {"task_id": "t0", "responses_create_params": {"input": [{"role": "user", "content": "Plan the day."}]}}
    rows.write_text(json.dumps(row) + "\n")
    (rows.parent / "eval.jsonl").write_text(json.dumps({**row, "task_id": "e0"}) + "\n")
    return rows


def demo_args(tmp: Path, model: Path, rows: Path | None = None, url: str | None = None, *extra: str) -> list[str]:
    """The demo config with the tiny model, its own run directory, free ports and rows under tmp."""
    rows = rows or tmp / "gym-root/resources_servers/gridsim_v1/data/train.jsonl"
    url = url or f"http://127.0.0.1:{free_port()}"
    source = [{"name": "gridsim", "env": {"taskset": {"id": "nemo-gym", "dataset": str(rows),
                                                      "task": {"resources_url": url}},
                                          "agent": {"max_turns": 4}}}]  # fmt: skip
    return ["@", str(DEMO), "--model.name", str(model), "--output-dir", str(tmp / "run"),
            "--inference.server.port", str(free_port()), "--orchestrator.train.source", json.dumps(source), *extra]  # fmt: skip


def cfg_of(args: list[str]) -> RLConfig:
    return parse_config(RLConfig, args)


@contextmanager
def stub_server(health: dict | str):
    """A stdlib HTTP server on a free loopback port answering `GET /health` with `health` (200) and 404 elsewhere."""
    body = (health if isinstance(health, str) else json.dumps(health)).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            ok = self.path == "/health"
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body if ok else b'{"detail": "Not Found"}')

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def run_dry(args: list[str], capsys) -> tuple[int, str, str]:
    """`rl ARGS --dry-run` in this process: (exit status, stdout, stderr)."""
    from prime_rl.launcher.slurm import submit_rl

    cfg = cfg_of(args)
    code = dry_run(cfg) if cfg.slurm is None else submit_rl(cfg.model_copy(update={"dry_run": True}), args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_resolution_leaves_the_config_unchanged_and_single_and_multi_node_run_the_same_checks(tmp_path, tiny):
    rows_at(tmp_path / "gym-root")
    cfg = cfg_of(demo_args(tmp_path, tiny, None, None, "--ckpt.keep-last", "2"))
    before = cfg.model_dump()
    single = resolve(cfg, Layout.single(), probe=lambda url: False, gpus=[])
    assert cfg.model_dump() == before  # deep equality: nothing of the parsed config was edited
    assert single.checks == list(CHECKS) and single.deferred == []
    # the resolved config is a new object that carries what the plan decided
    rc = single.config
    assert rc is not cfg and rc.orchestrator.client.base_url == [single.replicas[0].url]
    assert rc.orchestrator.ckpt.keep_last == 2 + cfg.orchestrator.max_async_level + 1 != cfg.orchestrator.ckpt.keep_last
    assert rc.trainer.threads is not None and cfg.trainer.threads is None
    assert [p.name for p in single.processes] == ["env-server", "inference", "trainer", "orchestrator"]

    args = demo_args(tmp_path, tiny)
    i = args.index("--inference.server.port")
    del args[i : i + 2]  # a multi-node run takes its ports from deployment.port_base
    multi_cfg = cfg_of(args + ["--deployment.type", "multi-node", "--deployment.num-infer-nodes", "1",
                               "--deployment.num-train-nodes", "1", "--deployment.port-base", str(free_block())])  # fmt: skip
    before = multi_cfg.model_dump()
    node0 = resolve(multi_cfg, Layout.slurm("multi-node", ["127.0.0.1", "127.0.0.1"], 0, "7"), probe=lambda u: False,
                    gpus=[])  # fmt: skip
    assert multi_cfg.model_dump() == before
    assert node0.checks == single.checks  # the same checks, in the same order
    # the env server moved to its node's port block, and the source follows it in the resolved config only
    moved = node0.config.orchestrator.train.source[0].env.taskset.task.resources_url
    assert moved == node0.env_servers[0].url != multi_cfg.orchestrator.train.source[0].env.taskset.task.resources_url
    assert node0.config.orchestrator.num_train_ranks == 1 and node0.process("trainer").nodes == [1]
    # the plan the other nodes read is typed JSON and reads back equal (without the configs, read from configs/)
    again = RunPlan.model_validate_json(node0.model_dump_json())
    assert again.model_dump() == node0.model_dump() and again.config is None
    submit = resolve(multi_cfg, Layout.submit(multi_cfg), probe=lambda u: False)
    assert submit.checks == [c for c in CHECKS if c not in NODE_CHECKS] and submit.deferred == list(NODE_CHECKS)


def free_block(n: int = 32) -> int:
    """A base port with `n` free ports after it."""
    for _ in range(100):
        base = free_port()
        if base + n < 65536 and all(_free(base + k) for k in range(n)):
            return base
    raise RuntimeError("no block of free ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_dry_run_refuses_a_model_that_does_not_resolve(tmp_path):
    """The command of the report, as a user types it (before: exit 0 and the configs written)."""
    r = subprocess.run([str(BIN / "rl"), "@", str(DEMO), "--model.name", "does/not/exist", "--output-dir",
                        str(tmp_path / "run"), "--dry-run"], capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "model.name = 'does/not/exist' (from --model.name): no such folder" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run/configs").exists()


@pytest.mark.parametrize("url, shown", [("localhost:8000", "write http://localhost:8000"),
                                        ("htp://x", "is not an http(s) URL with a host")])  # fmt: skip
def test_dry_run_refuses_a_malformed_client_url(tmp_path, tiny, capsys, url, shown):
    """Refused when the config is read (a config error: the CLI exits 2), naming the field, the flag and the fix."""
    from prime_rl.config.argv import ConfigError

    rows_at(tmp_path / "gym-root")
    with pytest.raises(ConfigError) as err:
        run_dry(demo_args(tmp_path, tiny, None, None, "--orchestrator.client.base-url", json.dumps([url])), capsys)
    assert f"orchestrator.client.base_url: {url!r}" in str(err.value) and shown in str(err.value)
    assert "(from --orchestrator.client.base-url)" in str(err.value)
    assert not (tmp_path / "run/configs").exists()


def test_dry_run_refuses_missing_rows(tmp_path, tiny, capsys):
    """Rows missing at a server that already answers (rl will not write them): named with the fix."""
    with stub_server({"status": "ok", "env": "gridsim", "name": "gridsim_v1"}) as url:
        code, out, err = run_dry(demo_args(tmp_path, tiny, None, url), capsys)
    assert code == 2, out + err
    assert "orchestrator.train.source[0].env.taskset.dataset = " in err and "no such file" in err


def test_dry_run_refuses_a_taken_port(tmp_path, tiny, capsys):
    rows_at(tmp_path / "gym-root")
    args = demo_args(tmp_path, tiny)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        args[args.index("--inference.server.port") + 1] = str(port)
        code, out, err = run_dry(args, capsys)
    assert code == 2, out + err
    assert f"port {port} (inference.server.port) is already in use" in err


@pytest.mark.parametrize("role", ["trainer", "orchestrator"])
def test_dry_run_refuses_a_taken_metrics_port(tmp_path, tiny, capsys, role):
    """The metrics endpoints are bound by the trainer and the orchestrator rl starts: a taken port is refused before
    anything starts (it crashed the trainer with a traceback after vLLM's start-up)."""
    rows_at(tmp_path / "gym-root")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        code, out, err = run_dry(demo_args(tmp_path, tiny) + [f"--{role}.metrics-server.port", str(port)], capsys)
    assert code == 2, out + err
    assert f"port {port} ({role}.metrics_server.port) is already in use" in err


def test_dry_run_refuses_seq_len_above_the_models_context(tmp_path, tiny, capsys):
    rows_at(tmp_path / "gym-root")
    code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, "--seq-len", "8192"), capsys)  # tiny model: 4096
    assert code == 2, out + err
    assert "seq_len = 8192 (orchestrator.seq_len) is above the model's context length" in err and "= 4096" in err


def test_dry_run_refuses_thinking_on_a_renderer_without_it(tmp_path, tiny, capsys):
    """`prime-qwen3` has no enable_thinking setting: refused with that reason, exit 2 (before: the dry run passed and
    the real run's pre-flight died with a ValueError traceback blaming the chat template)."""
    rows_at(tmp_path / "gym-root")
    code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, "--orchestrator.renderer.name", "prime-qwen3",
                                       "--orchestrator.renderer.enable-thinking", "true"), capsys)  # fmt: skip
    assert code == 2, out + err
    assert "orchestrator.renderer (name = 'prime-qwen3')" in err
    assert "renderer 'prime-qwen3' has no enable_thinking setting (its settings: thinking_retention" in err
    assert "chat template" not in err
    # the same with [slurm] on a multi-node deployment: the same checks run before the job is submitted
    args = demo_args(tmp_path, tiny, None, None, "--orchestrator.renderer.name", "prime-qwen3",
                     "--orchestrator.renderer.enable-thinking", "true")
    i = args.index("--inference.server.port")
    del args[i : i + 2]
    args += ["--deployment.type", "multi-node", "--deployment.num-train-nodes", "1", "--slurm.job-name", "x"]
    code, out, err = run_dry(args, capsys)
    assert code == 2 and "has no enable_thinking setting" in err, out + err
    assert not (tmp_path / "run/slurm/rl.sbatch").exists()


def test_resources_url_answered_by_something_else_is_refused(tmp_path, tiny, capsys):
    """A stdlib server answering /health 200 without naming an environment (and 404 elsewhere) at resources_url is
    not taken for the env server (before: it was, every seed got 404 and a short run ended 0 having trained
    nothing)."""
    rows_at(tmp_path / "gym-root")
    with stub_server({"status": "ok"}) as url:
        code, out, err = run_dry(demo_args(tmp_path, tiny, None, url), capsys)
    assert code == 2, out + err
    assert f"resources_url = {url!r} answers GET /health with HTTP 200" in err and "'{\"status\": \"ok\"}'" in err
    assert "not a resources server" in err


def test_resources_url_of_another_environment_is_refused(tmp_path):
    """The env server of another environment's rows answers there: refused naming both."""
    rows = rows_at(tmp_path / "gym-root")
    cfg = cfg_of(["--model.name", str(tmp_path), "--orchestrator.train.source", json.dumps(
        [{"name": "g", "env": {"taskset": {"id": "nemo-gym", "dataset": str(rows)}}}])])  # fmt: skip
    def at(url: str) -> RLConfig:
        return map_sources(cfg, lambda path, src: with_task(src, resources_url=url))

    with stub_server({"status": "ok", "env": "reverse-text", "name": "reverse_text_v1"}) as url:
        with pytest.raises(PreflightError) as e:
            envserver.check_env_servers(at(url), [])
        msg = str(e.value)
        assert f"resources_url = {url!r} is the env server of 'reverse_text_v1' (environment 'reverse-text'" in msg
        assert "are 'gridsim_v1''s" in msg
    with stub_server({"status": "ok", "env": "gridsim", "name": "gridsim_v1"}) as url:
        envserver.check_env_servers(at(url), [])  # the right one passes


def test_a_written_rl_toml_resolves_again_on_the_node(tmp_path, tiny):
    """What a Slurm job's nodes read is the `configs/rl.toml` written at submission, where every field is explicit
    (base_url too): resolving it on the node points the orchestrator at the replicas rl starts there (before this
    was handled, node 0 refused its own replicas' ports: multi-node always, single-node with a non-default
    inference.server.port)."""
    from prime_rl.config.loader import write_config
    from prime_rl.launcher.plan import launch_config

    rows_at(tmp_path / "gym-root")
    args = demo_args(tmp_path, tiny)
    i = args.index("--inference.server.port")
    del args[i : i + 2]
    multi = cfg_of(args + ["--deployment.type", "multi-node", "--deployment.num-train-nodes", "1",
                           "--deployment.port-base", str(free_block())])  # fmt: skip
    written = write_config(launch_config(multi), tmp_path / "rl.toml")
    again = cfg_of(["@", str(written)])
    assert "base_url" in again.orchestrator.client.model_fields_set
    plan = resolve(again, Layout.slurm("multi-node", ["127.0.0.1", "127.0.0.1"], 0, "7"), probe=lambda u: False, gpus=[])
    assert plan.config.orchestrator.client.base_url == [r.url for r in plan.replicas]
    port = free_port()
    single = cfg_of(["@", str(write_config(launch_config(cfg_of(demo_args(tmp_path, tiny) + [
        "--inference.server.port", str(port)])), tmp_path / "single.toml"))])  # fmt: skip
    plan = resolve(single, Layout.single(), probe=lambda u: False, gpus=[])
    assert plan.config.orchestrator.client.base_url == [f"http://127.0.0.1:{port}"]


def test_the_real_run_refuses_a_stub_at_resources_url_before_starting_anything(tmp_path, tiny):
    """`rl` itself (not only --dry-run) runs the same resolution: exit 2, no process started, no config written."""
    from prime_rl.launcher.rl import launch_and_wait

    rows_at(tmp_path / "gym-root")
    with stub_server({"status": "ok"}) as url:
        assert launch_and_wait(cfg_of(demo_args(tmp_path, tiny, None, url))) == 2
    assert not (tmp_path / "run/configs").exists() and not (tmp_path / "run/logs/trainer.console.log").exists()


def test_dry_run_warns_about_an_eval_num_examples_above_the_eval_split(tmp_path, tiny, capsys):
    """The orchestrator warns at start that an eval num_examples above the eval split evaluates the whole split;
    `rl --dry-run` says the same (before: it passed silently), naming the field and where it was set."""
    rows_at(tmp_path / "gym-root")  # one eval row
    code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, "--orchestrator.eval.interval", "5",
                                       "--orchestrator.eval.num-examples", "100000"), capsys)  # fmt: skip
    assert code == 0, out + err
    assert ("warning: orchestrator.eval.num_examples=100000 (from --orchestrator.eval.num-examples) is above the 1 "
            "tasks in the eval split of source 'gridsim': it is evaluated on all 1; set orchestrator.eval.num_examples "
            "to at most 1 (unset: the whole split)") in out, out
    code, out, err = run_dry(demo_args(tmp_path, tiny, None, None, "--orchestrator.eval.interval", "5",
                                       "--orchestrator.eval.num-examples", "1"), capsys)  # fmt: skip
    assert code == 0 and "num_examples=" not in out, out + err
