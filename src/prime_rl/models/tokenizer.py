"""Byte-level tokenizer in the Qwen3 chat format, for tiny test models.

Ids 0-255 are the 256 bytes (GPT-2 byte-to-unicode alphabet, no merges), so every UTF-8 string round-trips.
Then come Qwen3's added tokens, in this order:

| id  | token               | special |
|-----|---------------------|---------|
| 256 | `<|endoftext|>`     | yes (pad) |
| 257 | `<|im_start|>`      | yes     |
| 258 | `<|im_end|>`        | yes (eos) |
| 259 | `<tool_call>`       | no      |
| 260 | `</tool_call>`      | no      |
| 261 | `<tool_response>`   | no      |
| 262 | `</tool_response>`  | no      |
| 263 | `<think>`           | no      |
| 264 | `</think>`          | no      |

As in Qwen3, the tool and think tags are added tokens but not special: `skip_special_tokens=True` keeps them, which
vLLM's `hermes` tool parser and `qwen3` reasoning parser rely on. The chat template is Qwen3's (Hermes-style tools).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

NUM_BYTES = 256
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NON_SPECIAL_ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
ADDED_TOKENS = SPECIAL_TOKENS + NON_SPECIAL_ADDED_TOKENS
VOCAB_SIZE = NUM_BYTES + len(ADDED_TOKENS)  # 265

TOKEN_IDS = {tok: NUM_BYTES + i for i, tok in enumerate(ADDED_TOKENS)}
PAD_TOKEN_ID = TOKEN_IDS["<|endoftext|>"]
EOS_TOKEN_ID = TOKEN_IDS["<|im_end|>"]


def qwen3_chat_template() -> str:
    """The Qwen3 chat template (tools in Hermes style, optional `<think>` blocks) shipped with prime-rl."""
    return resources.files("prime_rl.models").joinpath("qwen3_chat_template.jinja").read_text(encoding="utf-8")


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-unicode map (the alphabet of `tokenizers`' ByteLevel)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    extra = 0
    for byte in range(256):
        if byte not in bs:
            bs.append(byte)
            cs.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def build_tokenizer_json() -> dict:
    """The `tokenizer.json` contents (Hugging Face `tokenizers` format) of the byte-level tokenizer."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {ch: b for b, ch in _bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL_ADDED_TOKENS])
    data = json.loads(tok.to_str())
    got = {t["content"]: t["id"] for t in data["added_tokens"]}
    if got != TOKEN_IDS:  # pragma: no cover - guards the id table above against a `tokenizers` change
        raise RuntimeError(f"added-token ids {got} differ from the expected {TOKEN_IDS}")
    return data


def write_tokenizer(out_dir: str | Path, model_max_length: int = 4096) -> Path:
    """Write `tokenizer.json`, `tokenizer_config.json` and `chat_template.jinja` to `out_dir`.

    Loadable by `transformers.AutoTokenizer.from_pretrained(out_dir)` and by vLLM. Returns `out_dir`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(build_tokenizer_json(), ensure_ascii=False), encoding="utf-8")
    added_decoder = {
        str(TOKEN_IDS[t]): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": t in SPECIAL_TOKENS,
        }
        for t in ADDED_TOKENS
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added_decoder,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "model_max_length": model_max_length,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "errors": "replace",
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8")
    (out / "chat_template.jinja").write_text(qwen3_chat_template(), encoding="utf-8")
    return out
