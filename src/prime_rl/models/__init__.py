"""Model factories: tiny random Qwen3-architecture models with a byte-level Qwen3-format tokenizer."""

from prime_rl.models.tiny import build_tiny_model, cached_tiny_model, tiny_qwen3_config
from prime_rl.models.tokenizer import EOS_TOKEN_ID, PAD_TOKEN_ID, TOKEN_IDS, VOCAB_SIZE, write_tokenizer

__all__ = [
    "build_tiny_model",
    "cached_tiny_model",
    "tiny_qwen3_config",
    "write_tokenizer",
    "EOS_TOKEN_ID",
    "PAD_TOKEN_ID",
    "TOKEN_IDS",
    "VOCAB_SIZE",
]
