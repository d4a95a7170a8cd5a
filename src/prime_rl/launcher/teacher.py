"""`rl`'s pre-flight check of on-policy distillation's teacher (`[teacher]`): its model resolves and its tokenizer is
the student's. The orchestrator checks the running server again (`prime_rl.orchestrator.teacher`)."""

from __future__ import annotations

from prime_rl.config.rl import RLConfig
from prime_rl.launcher.errors import PreflightError


def check_teacher_model(cfg: RLConfig) -> None:
    """With `[teacher]`: `teacher.model.name` resolves (a local folder or a hub id), and its tokenizer maps every
    token to the same id as the student's (`model.name`: the orchestrator's), with the same end-of-sequence id;
    the teacher scores the student's token ids, so any other tokenizer gives meaningless logprobs.

    Raises:
        PreflightError: the teacher model does not resolve, or the tokenizers differ (names both models, how many
            tokens differ and one example)."""
    if cfg.teacher is None:
        return
    from prime_rl.launcher.fields import as_set
    from prime_rl.models.hub import ModelNotFoundError, resolve_model
    from prime_rl.models.renderer import load_tokenizer

    student, teacher = cfg.orchestrator.model.name, cfg.teacher.model.name
    try:
        resolve_model(teacher)
    except ModelNotFoundError as e:
        raise PreflightError(e.named(*as_set(cfg, "teacher.model.name"))) from None
    student_tok, teacher_tok = load_tokenizer(student), load_tokenizer(teacher)
    sv, tv = student_tok.get_vocab(), teacher_tok.get_vocab()
    differ = sorted(k for k in sv.keys() | tv.keys() if sv.get(k) != tv.get(k))
    if differ or student_tok.eos_token_id != teacher_tok.eos_token_id:
        example = differ[0] if differ else student_tok.eos_token
        raise PreflightError(
            f"the teacher's tokenizer differs from the student's: teacher.model.name = {teacher!r} and model.name = "
            f"{student!r} map {len(differ)} token(s) to other ids (e.g. {example!r}: student {sv.get(example)}, "
            f"teacher {tv.get(example)}; end-of-sequence id student {student_tok.eos_token_id}, teacher "
            f"{teacher_tok.eos_token_id}); the teacher scores the student's token ids, so both must share one "
            "tokenizer: choose a teacher of the student's model family"
        )
