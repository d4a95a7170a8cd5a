"""Per-role SFT loss masks (`data.loss_mask`): exactly which token positions carry loss for each setting, against
positions found independently by rendering prefixes of the conversation."""

from __future__ import annotations

import itertools

import pytest

from prime_rl.config.sft import LossMaskConfig
from prime_rl.models.renderer import make_renderer
from prime_rl.trainer.sft_data import render_sample

TOOLS = [{"type": "function", "function": {"name": "look", "description": "look around",
                                          "parameters": {"type": "object", "properties": {"dir": {"type": "string"}}}}}]
CONVO = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "id": "c1", "function": {"name": "look", "arguments": {"dir": "n"}}}]},
    {"role": "tool", "content": "a wall", "tool_call_id": "c1"},
    {"role": "assistant", "content": "done"},
]  # fmt: skip


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.fixture(scope="module")
def renderer(tokenizer):
    return make_renderer(tokenizer, "qwen3", False)


def expected_positions(renderer, roles: set[str]) -> set[int]:
    """Message i spans render(messages[:i+1]) minus render(messages[:i]); an assistant message starts after its
    generation prompt and ends at its first <|im_end|> (the token the model stops on)."""
    end_id = renderer.render_ids([{"role": "user", "content": "x"}])[-2]  # ChatML: ... <|im_end|> \n
    full = renderer.render_ids(CONVO, tools=TOOLS)
    out: set[int] = set()
    for i, m in enumerate(CONVO):
        if m["role"] not in roles:
            continue
        before = renderer.render_ids(CONVO[:i], tools=TOOLS) if i else []
        upto = renderer.render_ids(CONVO[: i + 1], tools=TOOLS)
        assert full[: len(upto)] == upto  # the rendering of a prefix is a prefix of the rendering
        lo, hi = len(before), len(upto)
        if m["role"] == "assistant":
            lo = len(renderer.render_ids(CONVO[:i], tools=TOOLS, add_generation_prompt=True))
            hi = next(k for k in range(lo, hi) if full[k] == end_id) + 1
        out |= set(range(lo, hi))
    return out - {0}  # the first token has no prediction


@pytest.mark.parametrize("flags", list(itertools.product([False, True], repeat=4))[1:])  # all-false: refused, below
def test_loss_mask_positions_per_role(renderer, flags):
    cfg = LossMaskConfig(**dict(zip(("system", "user", "assistant", "tool"), flags, strict=True)))
    s = render_sample(renderer, CONVO, TOOLS, cfg.roles())
    got = {int(k) for k in s.loss_mask.nonzero()[0]}
    assert got == expected_positions(renderer, set(cfg.roles()))


@pytest.mark.parametrize(
    ("role", "text"),
    [
        ("user", "<|im_start|>user\nhi<|im_end|>\n"),
        ("tool", "<|im_start|>user\n<tool_response>\na wall\n</tool_response><|im_end|>\n"),
        ("assistant", '<tool_call>\n{"name": "look", "arguments": {"dir": "n"}}\n</tool_call><|im_end|>done<|im_end|>'),
    ],
)
def test_one_role_masks_that_role_s_text(renderer, tokenizer, role, text):
    s = render_sample(renderer, CONVO, TOOLS, frozenset({role}))
    assert tokenizer.decode([int(t) for t, m in zip(s.input_ids, s.loss_mask, strict=True) if m]) == text


def test_defaults_are_the_reference_s():
    assert LossMaskConfig().roles() == {"assistant"}


def test_a_mask_with_no_role_is_refused_naming_the_fields_and_where_they_were_set(tmp_path):
    """Every role false leaves no loss token in any sample: refused when the config is read (not after the model
    loads), naming the four fields, the file that set them and the fix."""
    from prime_rl.config.loader import ConfigError, parse_config
    from prime_rl.config.trainer import SFTConfig

    with pytest.raises(ValueError, match="all false: no token would carry loss.*set loss_mask.assistant = true"):
        LossMaskConfig(assistant=False)
    cfg = tmp_path / "mask.toml"
    cfg.write_text("[data.loss_mask]\nassistant = false\nsystem = false\n")
    with pytest.raises(ConfigError, match=rf"nothing to train on.*data.loss_mask.assistant in {cfg}\)"):
        parse_config(SFTConfig, ["@", str(cfg)])
    assert LossMaskConfig(assistant=False, tool=True).roles() == {"tool"}
