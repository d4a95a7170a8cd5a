"""Publishing the output head of tied and untied models (`trainer.weights.check_output_head`)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig

from prime_rl.trainer.publish import check_output_head


def test_tied_head_must_be_the_embedding_and_untied_head_must_be_published():
    e = torch.randn(8, 4)
    tied, untied = LlamaConfig(tie_word_embeddings=True), LlamaConfig(tie_word_embeddings=False)
    check_output_head({"model.embed_tokens.weight": e, "lm_head.weight": e.clone()}, tied)
    check_output_head({"model.embed_tokens.weight": e}, tied)
    check_output_head({"model.embed_tokens.weight": e, "lm_head.weight": e + 1}, untied)
    with pytest.raises(RuntimeError, match="differs from model.embed_tokens.weight"):
        check_output_head({"model.embed_tokens.weight": e, "lm_head.weight": e + 1e-3}, tied)
    with pytest.raises(RuntimeError, match="no lm_head.weight"):
        check_output_head({"model.embed_tokens.weight": e}, untied)
