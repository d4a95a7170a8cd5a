"""SFT with a validation split and two mixed sources: `val/loss` equals an independent float64 NLL of the held-out
conversations under the published weights, validation leaves training unchanged, per-source metrics add up."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from prime_rl.config.trainer import SFTConfig
from prime_rl.models.renderer import load_tokenizer, make_renderer
from prime_rl.monitor.metrics import read_metrics
from prime_rl.trainer import sft
from prime_rl.trainer.sft_data import load_chat_rows, render_sample
from prime_rl.trainer.sft_mix import held_out_split


def _demos(n: int, seed: int, letters: str) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        w = "".join(rng.choice(list(letters), 5))
        rows.append({"messages": [{"role": "user", "content": f"reverse {w}"},
                                  {"role": "assistant", "content": w[::-1]}]})  # fmt: skip
    return rows


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _independent_nll(model_dir, rows, renderer) -> float:
    """Sum of -log p(token) over loss tokens / their count, float64, one conversation at a time."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float64)
    nll, n = 0.0, 0
    with torch.no_grad():
        for r in rows:
            s = render_sample(renderer, r["messages"])
            ids = torch.as_tensor(s.input_ids)[None]
            logp = torch.log_softmax(model(ids).logits[0, :-1].double(), -1)
            lp = logp.gather(-1, ids[0, 1:, None])[:, 0]
            m = torch.as_tensor(s.loss_mask[1:])
            nll -= float(lp[m].sum())
            n += int(m.sum())
    return nll / n


def test_validation_and_mixing(tiny_model_dir, tmp_path):
    a = _write(tmp_path / "a.jsonl", _demos(12, 0, "abc"))
    b = _write(tmp_path / "b.jsonl", _demos(12, 1, "xyz"))
    base = dict(
        model={"name": str(tiny_model_dir)}, optim={"lr": 3e-3}, max_steps=6, seq_len=128, threads=1,
        data={"source": [{"path": str(a), "weight": 1.0}, {"path": str(b), "weight": 3.0, "label": "bee"}],
              "batch_size": 8},
    )  # fmt: skip
    cfg = SFTConfig(**base, output_dir=str(tmp_path / "run"),
                    val={"fraction": 0.25, "interval": 4, "eval_on_start": True, "batch_size": 2})  # fmt: skip
    last = sft.run(cfg)
    rows = read_metrics(tmp_path / "run", "sft")
    by_step = {r["step"]: r for r in rows if "val/loss" in r}
    assert sorted(by_step) == [0, 4, 6]  # start, interval, last step
    train_rows = [r for r in rows if "loss" in r]
    assert len(train_rows) == 6
    for r in train_rows:
        assert r["source/a/samples"] + r["source/bee/samples"] == 8
        assert r["source/a/nll"] >= 0 and r["source/bee/nll"] >= 0
    assert sum(r["source/bee/samples"] for r in train_rows) > sum(r["source/a/samples"] for r in train_rows)
    # val/loss at the last step: the NLL of the held-out rows of both sources under the published weights
    tok = load_tokenizer(str(tiny_model_dir), None)
    renderer = make_renderer(tok, cfg.renderer)
    held = []
    for p in (a, b):
        r = load_chat_rows(path=p)
        held += [r[i] for i in held_out_split(len(r), 0.25, cfg.seed)[1]]
    assert len(held) == 6
    want = _independent_nll(tmp_path / "run" / "weights" / "step_6", held, renderer)
    assert last["val/loss"] == pytest.approx(want, rel=1e-4)
    assert last["val/perplexity"] == pytest.approx(np.exp(want), rel=1e-4)
    # validation takes no gradient step: the same run without [val] trains on the same rows (the held-out ones
    # removed by hand) and logs the same training losses
    _write(tmp_path / "a2.jsonl", [r for i, r in enumerate(load_chat_rows(path=a))
                                   if i in held_out_split(12, 0.25, cfg.seed)[0]])  # fmt: skip
    _write(tmp_path / "b2.jsonl", [r for i, r in enumerate(load_chat_rows(path=b))
                                   if i in held_out_split(12, 0.25, cfg.seed)[0]])  # fmt: skip
    base["data"]["source"] = [{"path": str(tmp_path / "a2.jsonl"), "weight": 1.0, "label": "a"},
                              {"path": str(tmp_path / "b2.jsonl"), "weight": 3.0, "label": "bee"}]  # fmt: skip
    sft.run(SFTConfig(**base, output_dir=str(tmp_path / "plain")))
    plain = [r["loss"] for r in read_metrics(tmp_path / "plain", "sft")]
    assert plain == pytest.approx([r["loss"] for r in train_rows], rel=1e-6)
