"""`memoize_encode`: the renderer's cached `encode`/`decode` give what the tokenizer gives, also through transformers'
own callers (`batch_decode` calls `decode(token_ids=..., ...)` by keyword: TRL decodes completions that way)."""

from __future__ import annotations

import copy

import pytest

from prime_rl.models.renderer import load_tokenizer, memoize_encode
from prime_rl.models.tiny import cached_tiny_model


def test_memoized_tokenizer_equals_the_plain_one_in_every_call_form():
    plain = load_tokenizer(cached_tiny_model(hidden=64, layers=2, seed=0))
    memo = memoize_encode(copy.deepcopy(plain))
    ids = plain.encode(
        "Hello <|im_start|>assistant\n7 worlds apart, reversed text and digits 0123", add_special_tokens=False
    )
    short = ids[:3]
    for skip in (False, True):
        # positional (cached), twice so the second answer comes from the cache
        assert memo.decode(short, skip_special_tokens=skip) == plain.decode(short, skip_special_tokens=skip)
        assert memo.decode(short, skip_special_tokens=skip) == plain.decode(short, skip_special_tokens=skip)
        assert memo.decode(ids[0]) == plain.decode(ids[0])
        # past the cache's length limit, and a batch given to decode: straight through
        assert len(ids) > 8
        assert memo.decode(ids, skip_special_tokens=skip) == plain.decode(ids, skip_special_tokens=skip)
        assert memo.decode([short, ids]) == plain.decode([short, ids])
        # keyword form and batch_decode (failed before: "missing 1 required positional argument: 'ids'")
        assert memo.decode(token_ids=short, skip_special_tokens=skip) == plain.decode(short, skip_special_tokens=skip)
        assert memo.batch_decode([short, ids], skip_special_tokens=skip) == plain.batch_decode(
            [short, ids], skip_special_tokens=skip
        )
    assert memo.encode("<|im_start|>assistant\n", add_special_tokens=False) == plain.encode(
        "<|im_start|>assistant\n", add_special_tokens=False
    )


def test_renderer_tokenizer_answers_like_the_plain_one():
    """`RendererTokenizer` (what `make_renderer` gives a `renderers` renderer) answers every call a renderer makes
    as the plain tokenizer does: its fast paths and caches (offsets call, decode, token ids) change no answer."""
    import numpy as np

    from prime_rl.models.renderer import RendererTokenizer

    plain = load_tokenizer(cached_tiny_model(hidden=64, layers=2, seed=0))
    fast = RendererTokenizer(memoize_encode(copy.deepcopy(plain)))
    assert fast._backend is not None, "the stock tokenizer should take the fast paths"
    texts = ["a", "", "user\n", "Hello <|im_start|>assistant\n7 worlds", "x" * 33, "é ü <think>\n" * 60, "y" * 600]
    for text in texts * 2:  # twice: the second answers of short and long texts come from the cache
        for kw in ({}, {"add_special_tokens": False}, {"add_special_tokens": False, "return_offsets_mapping": True},
                   {"return_offsets_mapping": True}, {"add_special_tokens": False, "return_attention_mask": False}):
            got, want = fast(text, **kw), plain(text, **kw)
            assert dict(got) == dict(want), (text, kw)
            assert len(got.encodings) == len(want.encodings) == 1
            got["input_ids"].append(-1)  # a caller changing its answer changes no later answer
        assert fast.encode(text, add_special_tokens=False) == plain.encode(text, add_special_tokens=False)
    assert fast(["a", "b"], add_special_tokens=False)["input_ids"] == plain(["a", "b"], add_special_tokens=False)["input_ids"]
    ids = plain.encode("Hello <|im_start|>assistant\n7 worlds apart, reversed text and digits 0123")
    for skip in (False, True):
        for x in (ids, ids[:3], ids[0], [ids[:3], ids], np.asarray(ids), [np.int64(i) for i in ids]):
            assert fast.decode(x, skip_special_tokens=skip) == plain.decode(x, skip_special_tokens=skip)
    for tok in ("<think>", "</think>", "<|im_end|>", "not-a-token"):
        assert fast.convert_tokens_to_ids(tok) == plain.convert_tokens_to_ids(tok)
        assert fast.convert_tokens_to_ids(tok) == plain.convert_tokens_to_ids(tok)
    assert fast.convert_tokens_to_ids(["<think>", "a"]) == plain.convert_tokens_to_ids(["<think>", "a"])
    assert (fast.unk_token_id, fast.eos_token_id, fast.pad_token_id, fast.name_or_path, len(fast)) == (
        plain.unk_token_id, plain.eos_token_id, plain.pad_token_id, plain.name_or_path, len(plain))
    # a backend left truncating (by a caller's own truncation=True call) is restored by transformers, not skipped
    plain_t = copy.deepcopy(plain)
    fast_t = RendererTokenizer(plain_t)
    long = "z" * 600
    plain_t(long, truncation=True, max_length=5)
    assert fast_t(long, add_special_tokens=False)["input_ids"] == plain(long, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("thinking", [False, True])
def test_renderer_on_the_fast_tokenizer_renders_bridges_and_parses_alike(monkeypatch, thinking):
    """The GridSim agent loop's renderer calls (first prompt, parse, tool bridge, parse) give the same token ids,
    content masks and parses through `make_renderer` (RendererTokenizer) as on the plain tokenizer."""
    from prime_rl.config.orchestrator import OrchestratorConfig
    from prime_rl.models import renderer as mod
    from prime_rl.orchestrator.sources import build_source

    plain = load_tokenizer(cached_tiny_model(hidden=64, layers=2, seed=0))
    fast = mod.make_renderer(copy.deepcopy(plain), "qwen3", thinking)
    fast_tok = mod.RendererTokenizer
    assert isinstance(fast._tokenizer, fast_tok)
    monkeypatch.setattr(mod, "RendererTokenizer", lambda tok: tok)
    slow = mod.make_renderer(copy.deepcopy(plain), "qwen3", thinking)
    assert not isinstance(slow._tokenizer, fast_tok)
    cfg = OrchestratorConfig(output_dir="unused", train={"group_size": 2, "source": [{"env": {"id": "gridsim"}}]})
    tasks = build_source(cfg.train.source[0]).tasks("train")[:4]
    call = '<tool_call>\n{"name": "submit_schedule", "arguments": {"schedule": [1, 0, -1]}}\n</tool_call><|im_end|>'
    completions = [plain.encode(t, add_special_tokens=False) for t in (call, "<think>\nhm\n</think>\n\n" + call, "ok")]
    tool = [{"role": "tool", "name": "submit_schedule", "tool_call_id": "call_0_0", "content": "Profit $12.50."}]

    def play(r):
        out = []
        for task in tasks:
            prompt = r.render(task.messages, tools=task.tools, add_generation_prompt=True)
            out.append((prompt.token_ids, prompt.is_content))
            for c in completions:
                out.append(r.parse_response(c, prompt_ids=prompt.token_ids))
                b = r.bridge_to_next_turn(prompt.token_ids, c, tool, tools=task.tools)
                out.append(None if b is None else (b.token_ids, b.is_content))
        return out

    assert play(fast) == play(slow)
