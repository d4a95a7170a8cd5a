"""SFT: assistant-only loss masks from the renderer, packing, data order, and training that lowers the loss."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from prime_rl.config.trainer import SFTConfig
from prime_rl.models.renderer import make_renderer
from prime_rl.monitor.metrics import read_metrics
from prime_rl.trainer import sft
from prime_rl.trainer.sft_data import (
    SFTDataError,
    SFTSample,
    load_jsonl,
    pack_samples,
    render_sample,
    shard_micro_batches,
    step_indices,
)

TOOLS = [{"type": "function", "function": {"name": "look", "description": "look around",
                                          "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}}}}]
TOOL_CONVO = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "id": "c1", "function": {"name": "look", "arguments": {"dir": "n"}}}]},
    {"role": "tool", "content": "a wall", "tool_call_id": "c1"},
    {"role": "assistant", "content": "done"},
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


def _spans(tok, s: SFTSample) -> list[str]:
    out, cur = [], []
    for t, m in zip(s.input_ids.tolist(), s.loss_mask.tolist(), strict=True):
        if m:
            cur.append(t)
        elif cur:
            out.append(tok.decode(cur))
            cur = []
    if cur:
        out.append(tok.decode(cur))
    return out


@pytest.mark.parametrize("thinking", [False, True])
def test_loss_mask_covers_exactly_the_assistant_emissions(tokenizer, thinking):
    s = render_sample(make_renderer(tokenizer, "qwen3", thinking), TOOL_CONVO, TOOLS)
    call = '<tool_call>\n{"name": "look", "arguments": {"dir": "n"}}\n</tool_call><|im_end|>'
    if thinking:  # the model writes its (here empty) think block; Qwen3 drops it from turns before the last
        expected = [call, "<think>\n\n</think>\n\ndone<|im_end|>"]
    else:  # the generation prompt pre-fills the empty think block: the model never samples it
        expected = [call, "done<|im_end|>"]
    assert _spans(tokenizer, s) == expected
    text = tokenizer.decode(s.input_ids.tolist())
    assert "a wall" in text and "a wall" not in "".join(_spans(tokenizer, s))  # tool results excluded
    # the rendering is the orchestrator's prompt format: the prompt before turn 2 is a prefix of the sample
    r = make_renderer(tokenizer, "qwen3", thinking)
    prompt = r.render_ids(TOOL_CONVO[:2], tools=TOOLS, add_generation_prompt=True)
    assert s.input_ids[: len(prompt)].tolist() == list(prompt)


def test_pack_and_shard():
    samples = [SFTSample(np.arange(n) + 1, np.arange(n) % 2 == 1) for n in (5, 7, 3, 9, 2)]
    mbs = pack_samples(samples, seq_len=12)
    assert [len(m) for m in mbs] == [12, 12, 2]  # 5+7 | 3+9 | 2 (in order, nothing split)
    assert mbs[1].position_ids.tolist() == [0, 1, 2] + list(range(9))
    assert sum(m.num_loss_tokens for m in mbs) == sum(int(s.loss_mask.sum()) for s in samples)
    shares = [shard_micro_batches(mbs, r, 2) for r in (0, 1)]
    assert len(shares[0]) == len(shares[1]) == 2
    assert sorted(len(m) for s in shares for m in s if m.num_loss_tokens) == [2, 12, 12]


def test_step_indices_cover_each_epoch_once():
    n, bs = 10, 4
    stream = sum((step_indices(s, bs, n, seed=1, shuffle=True) for s in range(1, 6)), [])
    assert sorted(stream[:10]) == list(range(10)) and sorted(stream[10:20]) == list(range(10))
    assert stream[:10] != stream[10:20]  # a new permutation per epoch
    assert step_indices(3, bs, n, 0, False) == [8, 9, 0, 1]


def test_bad_rows_are_named(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text(json.dumps({"messages": [{"role": "user", "content": "x"}]}) + "\n")
    with pytest.raises(SFTDataError, match=r"d.jsonl', row 1: no assistant message"):
        load_jsonl(p)
    with pytest.raises(FileNotFoundError, match="data.path"):
        load_jsonl(tmp_path / "missing.jsonl")


def reverse_demos(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        w = "".join(rng.choice(list("abcdef"), 5))
        rows.append({"messages": [{"role": "user", "content": f"reverse {w}"},
                                  {"role": "assistant", "content": w[::-1]}]})
    return rows


def test_sft_lowers_loss_and_publishes_loadable_model(tiny_model_dir, tmp_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    data = tmp_path / "demos.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in reverse_demos(16)))
    cfg = SFTConfig(
        model={"name": str(tiny_model_dir)}, data={"path": str(data), "batch_size": 8}, output_dir=str(tmp_path / "run"),
        optim={"lr": 3e-3}, max_steps=12, seq_len=128, threads=1, publish_interval=6,
    )
    sft.run(cfg)
    rows = read_metrics(tmp_path / "run", "sft")
    losses = [r["loss"] for r in rows]
    assert len(losses) == 12
    assert losses[0] == pytest.approx(np.log(265), rel=0.05)  # random init: ~uniform over the vocabulary
    assert losses[-1] < losses[0] - 1.5, losses
    out = tmp_path / "run" / "weights" / "step_12"
    assert (out / "STABLE").is_file() and (tmp_path / "run" / "weights" / "step_6" / "STABLE").is_file()
    AutoModelForCausalLM.from_pretrained(str(out))
    got, want = (AutoConfig.from_pretrained(str(d)).to_dict() for d in (out, tiny_model_dir))
    got.pop("_name_or_path"), want.pop("_name_or_path")
    assert got == want


def test_sft_on_gridsim_demonstrations_lowers_loss(tiny_model_dir, tmp_path):
    import subprocess
    import sys

    demos = tmp_path / "gridsim.jsonl"
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.gridsim", "sft-data", str(demos)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    small = tmp_path / "small.jsonl"
    small.write_text("".join(demos.read_text().splitlines(keepends=True)[:8]))
    cfg = SFTConfig(
        model={"name": str(tiny_model_dir)}, data={"path": str(small), "batch_size": 4},
        output_dir=str(tmp_path / "run"), optim={"lr": 3e-3}, max_steps=6, seq_len=2048, threads=1,
    )
    sft.run(cfg)
    losses = [row["loss"] for row in read_metrics(tmp_path / "run", "sft")]
    assert losses[-1] < losses[0] - 0.5, losses
    assert (tmp_path / "run" / "weights" / "step_6" / "STABLE").is_file()


def test_sft_cli_missing_model_folder_is_one_line_not_a_hub_traceback(tmp_path):
    """A wrong `--model.name` fails before the tokenizer loads (which would try the hub) with the field named."""
    import subprocess
    import sys

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}) + "\n")
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.sft", "--model.name", str(tmp_path / "nope"),
                        "--data.path", str(data), "--max-steps", "1", "--output-dir", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert "model.name" in r.stderr and "no such folder" in r.stderr and "Traceback" not in r.stderr


def test_sft_cli_logs_every_row_to_an_offline_wandb_run(tiny_model_dir, tmp_path):
    """`sft ... --wandb.offline true`: the command's own forwarder puts each metrics.jsonl row into one offline
    W&B run with the resolved config; read back from the run file."""
    import subprocess
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from wandb_offline import read_offline_run

    data = tmp_path / "demos.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in reverse_demos(8)))
    run = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "prime_rl.cli.sft", "--model.name", str(tiny_model_dir),
                        "--data.path", str(data), "--data.batch-size", "4", "--max-steps", "3", "--seq-len", "128",
                        "--threads", "1", "--output-dir", str(run), "--wandb.offline", "true",
                        "--wandb.project", "sft-test"], capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    rows = read_metrics(run, "sft")
    back = read_offline_run(run)
    assert (back.project, back.job_type, back.exit_code) == ("sft-test", "sft", 0)
    assert back.config["sft"]["data"]["batch_size"] == 4 and back.config["sft"]["max_steps"] == 3
    logged = back.rows("sft")
    assert [x["step"] for x in logged] == [1, 2, 3] == [x["step"] for x in rows]
    for want, got in zip(rows, logged, strict=True):
        assert got["loss"] == want["loss"] and got["lr"] == want["lr"]
