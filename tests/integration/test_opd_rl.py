"""`rl` end to end with on-policy distillation on tiny models: a random student (seed 0) and a teacher with the same
tokenizer (seed 1), started by `rl` from `[teacher]`; `[trainer.loss] type = "opd"`. Every step logs a finite
`teacher/kl` (orchestrator) and `teacher_kl` (trainer) and trains (the teacher term trains zero-advantage steps);
the teacher logprobs the trainer got equal an independent float64 transformers forward of the teacher model, and
`teacher/kl` equals the mean of inference minus teacher logprobs over the batch's loss tokens."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.slow


def test_rl_with_a_teacher_logs_teacher_kl(tmp_path):
    from tests.learning.ladder import LADDER, rl_run

    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.monitor.metrics import read_metrics
    from prime_rl.ports import free_port

    student = cached_tiny_model(hidden=64, layers=2, seed=0)
    teacher = cached_tiny_model(hidden=64, layers=2, seed=1)
    # on GPU the teacher shares the first inference GPU: 0.45 of it each (the teacher inherits inference's share)
    extra = ["--max-steps", "3", "--orchestrator.eval.interval", "100", "--trainer.loss.type", "opd",
             "--teacher.model.name", str(teacher), "--teacher.model.dtype", "float32",
             "--teacher.server.port", str(free_port()),
             "--inference.vllm.gpu-memory-utilization", "0.45"]  # fmt: skip
    run = tmp_path / "opd"
    rl_run(LADDER / "digit.toml", student, run, seed=0, extra=extra, timeout_s=900)
    rows = read_metrics(run, "orchestrator")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert math.isfinite(r["teacher/kl"]) and r["teacher/tokens"] > 0
        assert not any(k.startswith("errors/teacher") for k in r)
    got, want, kl = _teacher_check(run / "rollouts" / "step_1" / "rank_0.bin", teacher)
    assert len(got) == rows[0]["teacher/tokens"] > 0
    assert got == pytest.approx(want, abs=2e-3)  # vLLM's fp32 CPU forward against float64
    assert rows[0]["teacher/kl"] == pytest.approx(kl, rel=1e-4, abs=1e-6)
    trainer = read_metrics(run, "trainer")
    assert [r["step"] for r in trainer] == [1, 2, 3]
    for r in trainer:
        assert math.isfinite(r["teacher_kl"]) and r["skipped_update"] == 0.0
    assert (run / "logs" / "vllm-teacher.log").is_file()


def _teacher_check(batch_file, teacher):
    """(teacher logprobs in the batch, the same from a float64 transformers forward of `teacher`, mean of inference
    minus teacher logprob), over every loss token of the batch file."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from prime_rl.transport.batch import read_batch

    model = AutoModelForCausalLM.from_pretrained(str(teacher), dtype=torch.float64).eval()
    got, want, diff = [], [], []
    for mb in read_batch(batch_file).micro_batches:
        starts = [int(i) for i in np.nonzero(mb.position_ids == 0)[0]] + [len(mb)]
        for a, b in zip(starts[:-1], starts[1:], strict=True):
            ids = torch.from_numpy(mb.input_ids[a:b]).long()
            with torch.no_grad():
                logp = torch.log_softmax(model(input_ids=ids[None]).logits[0, :-1], dim=-1)
            ref = logp.gather(-1, ids[1:, None])[:, 0].tolist()
            for t in range(a + 1, b):
                if mb.loss_mask[t]:
                    got.append(float(mb.teacher_logprobs[t]))
                    want.append(ref[t - a - 1])
                    diff.append(float(mb.inference_logprobs[t]) - float(mb.teacher_logprobs[t]))
    return got, want, sum(diff) / len(diff)
