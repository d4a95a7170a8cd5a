"""Online environment eval during SFT (`[eval]` in `sft`): config checks, and one end-to-end `sft` run on the tiny
model with a validation split, two mixed sources and reverse-text scored by the `inference` server sft starts,
reloaded with each published step."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest

from prime_rl.config.trainer import SFTConfig
from prime_rl.monitor.metrics import read_metrics
from prime_rl.ports import free_port

SRC = [{"name": "reverse", "env": {"id": "reverse-text"}}]


def test_eval_config_checks():
    cfg = SFTConfig(max_steps=4, eval={"interval": 2, "source": SRC})
    assert cfg.publish_interval == 2  # every eval step publishes the weights it scores
    with pytest.raises(ValueError, match="eval.interval"):
        SFTConfig(eval={"source": SRC})
    with pytest.raises(ValueError, match="eval.source"):
        SFTConfig(eval={"interval": 2})
    with pytest.raises(ValueError, match="multiple of `publish_interval = 2`"):
        SFTConfig(eval={"interval": 5, "source": SRC}, publish_interval=2)
    with pytest.raises(ValueError, match=r"\[inference\] is the server sft starts"):
        SFTConfig(inference={})
    from prime_rl.trainer import sft

    with pytest.raises(ValueError, match="needs the inference server the sft command starts"):
        sft.train(cfg)  # [eval] is never dropped: without the server there is nothing to score with


def test_server_and_eval_settings(tmp_path):
    from prime_rl.launcher.sft_eval import eval_config, inference_config

    cfg = SFTConfig(max_steps=4, output_dir=str(tmp_path / "run"), model={"name": "m", "dtype": "float32"},
                    eval={"interval": 2, "source": SRC}, inference={"server": {"port": 8123}, "model": {"dtype": "float32"}})  # fmt: skip
    inf = inference_config(cfg)
    assert inf.model.name == "m" and inf.model.dtype == "float32" and inf.server.port == 8123
    assert inf.server.weights_dir == (tmp_path / "run" / "weights").resolve()  # the server may load the run's steps
    ev = eval_config(cfg, 4)
    assert ev.backend.base_url == ["http://127.0.0.1:8123"] and ev.model.name == "m"
    assert ev.checkpoints.run_dir == (tmp_path / "run").resolve() and ev.checkpoints.steps == [4]
    assert ev.output_dir == (tmp_path / "run").resolve() and ev.eval == cfg.eval.model_copy(update={"interval": None})


@pytest.mark.slow
def test_sft_with_validation_mixing_and_online_eval(tiny_model_dir, tmp_path):
    from tests.trainer.test_sft_val import _demos, _write

    a = _write(tmp_path / "a.jsonl", _demos(12, 0, "abc"))
    b = _write(tmp_path / "b.jsonl", _demos(12, 1, "xyz"))
    run = tmp_path / "run"
    toml = tmp_path / "sft.toml"
    toml.write_text(f"""
max_steps = 4
seq_len = 256
threads = 1
output_dir = "{run}"
[model]
name = "{tiny_model_dir}"
[data]
batch_size = 8
[[data.source]]
path = "{a}"
[[data.source]]
path = "{b}"
weight = 3.0
[val]
fraction = 0.25
interval = 2
[eval]
interval = 2
num_examples = 4
[eval.sampling]
max_completion_tokens = 16
temperature = 0.0
[[eval.source]]
name = "reverse"
env.id = "reverse-text"
[inference.server]
port = {free_port()}
""")
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.sft", "@", str(toml)], capture_output=True, text=True,
                       timeout=900)  # fmt: skip
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    sft_rows = {row["step"]: row for row in read_metrics(run, "sft")}
    eval_rows = {row["step"]: row for row in read_metrics(run, "eval")}
    assert sorted(eval_rows) == [2, 4]
    for step in (2, 4):
        assert (run / "weights" / f"step_{step}" / "STABLE").is_file()
        got = {k: v for k, v in sft_rows[step].items() if k.startswith("eval/")}
        want = {k: v for k, v in eval_rows[step].items() if k.startswith("eval/")}
        assert got == want and "eval/reverse/avg@1" in got
        assert 0.0 <= got["eval/reverse/avg@1"] <= 1.0
        assert "val/loss" in sft_rows[step]
    assert sft_rows[1]["source/a/samples"] + sft_rows[1]["source/b/samples"] == 8
    folders = [p for p in (run / "eval").iterdir() if p.is_dir()]
    assert len(folders) == 1
    for step in (2, 4):
        rows = (folders[0] / f"step_{step}.jsonl").read_text().splitlines()
        assert len(rows) == 4 and all(json.loads(x)["step"] == step and "rewards" in json.loads(x) for x in rows)
    lines = [x for x in (r.stdout + r.stderr).splitlines() if "Step 4/4" in x]
    assert lines and f"Eval Avg@1 {got['eval/avg@1']:.4g}" in lines[-1], (r.stdout + r.stderr)[-3000:]
    # the server loaded the weights once per scored step
    vllm_log = (run / "logs" / "vllm.log").read_text(errors="replace")
    assert vllm_log.count('"POST /update_weights HTTP/1.1" 200') == 2, vllm_log[-3000:]
    leftover = [p for p in psutil.process_iter(["cmdline"]) if str(run) in " ".join(p.info["cmdline"] or [])]
    assert not leftover


def test_results_of_steps_to_be_retrained_are_removed(tmp_path):
    """A run restarted at step 2 into a folder that holds evals of steps 2-4 (older weights) drops 3 and 4."""
    import logging

    from prime_rl.launcher.sft_eval import OnlineEval
    from prime_rl.orchestrator.eval_sweep import model_key

    cfg = SFTConfig(max_steps=4, output_dir=str(tmp_path / "run"), model={"name": "m"},
                    eval={"interval": 2, "source": SRC})  # fmt: skip
    folder = tmp_path / "run" / "eval" / model_key("m", (tmp_path / "run").resolve())
    folder.mkdir(parents=True)
    for n in (2, 3, 4):
        (folder / f"step_{n}.json").write_text("{}")
        (folder / f"step_{n}.jsonl").write_text("")
    OnlineEval(cfg, logging.getLogger("t"))._forget_after(2)
    assert sorted(p.name for p in folder.iterdir()) == ["step_2.json", "step_2.jsonl"]
