"""The model `sft` publishes loads in vLLM and generates what transformers generates from the same folder."""

from __future__ import annotations

import json

import httpx
import pytest
import torch
from tests.trainer.test_sft import reverse_demos

from prime_rl.config.trainer import SFTConfig
from prime_rl.trainer import sft


@pytest.mark.slow
def test_sft_output_loads_in_vllm(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from prime_rl.inference.testing import start_server

    data = tmp_path / "demos.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in reverse_demos(8)))
    cfg = SFTConfig(model={"name": str(tiny_model_dir)}, data={"path": str(data), "batch_size": 8},
                    output_dir=str(tmp_path / "run"), optim={"lr": 3e-3}, max_steps=4, seq_len=128, threads=1)
    sft.run(cfg)
    out = tmp_path / "run" / "weights" / "step_4"
    prompt = [257, 117, 115, 101, 114, 10, 104, 105, 258, 10, 257, 97, 115, 115, 105, 115, 116, 97, 110, 116, 10]
    model = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    with torch.no_grad():
        ref = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[0, len(prompt):].tolist()
    with start_server(out, log_path=tmp_path / "vllm.log") as srv:
        r = httpx.post(f"{srv.base_url}/v1/completions", timeout=60, json={
            "model": str(out), "prompt": prompt, "max_tokens": 8, "temperature": 0.0, "return_token_ids": True,
            "ignore_eos": True})
        r.raise_for_status()
        got = r.json()["choices"][0]["token_ids"]
    assert got == ref
