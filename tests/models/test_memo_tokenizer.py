"""`memoize_encode`: the renderer's cached `encode`/`decode` give what the tokenizer gives, also through transformers'
own callers (`batch_decode` calls `decode(token_ids=..., ...)` by keyword: TRL decodes completions that way)."""

from __future__ import annotations

import copy

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
