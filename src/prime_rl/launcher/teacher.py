"""`rl`'s pre-flight check of on-policy distillation's teacher (`[teacher]`): its model resolves, its tokenizer is
the student's, and its own context holds a whole sample when `teacher.vllm.max_model_len` is unset. The orchestrator checks the running server again (`prime_rl.orchestrator.teacher`)."""

from __future__ import annotations

from prime_rl.config.rl import RLConfig
from prime_rl.launcher.errors import PreflightError


def check_teacher_model(cfg: RLConfig) -> None:
    """With `[teacher]`: `teacher.model.name` resolves (a local folder or a hub id), and its tokenizer maps every
    token to the same id as the student's (`model.name`: the orchestrator's), with the same end-of-sequence id;
    the teacher scores the student's token ids, so any other tokenizer gives meaningless logprobs.

    Raises:
        PreflightError: the teacher model does not resolve, or the tokenizers differ (names both models, how many
            tokens differ and one example), or its own context is too short (`check_teacher_context`)."""
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
        (t_name, t_where), (s_name, s_where) = as_set(cfg, "teacher.model.name"), as_set(cfg, "orchestrator.model.name")
        raise PreflightError(
            f"the teacher's tokenizer differs from the student's: {t_name} = {teacher!r}{t_where} and {s_name} = "
            f"{student!r}{s_where} map {len(differ)} token(s) to other ids (e.g. {example!r}: student {sv.get(example)}, "
            f"teacher {tv.get(example)}; end-of-sequence id student {student_tok.eos_token_id}, teacher "
            f"{teacher_tok.eos_token_id}); the teacher scores the student's token ids, so both must share one "
            "tokenizer: choose a teacher of the student's model family"
        )
    check_teacher_context(cfg)


def check_teacher_context(cfg: RLConfig) -> None:
    """With `[teacher]` and `teacher.vllm.max_model_len` unset (under both `[teacher.vllm]` and `[inference.vllm]`),
    vLLM serves the teacher model's own context (`max_position_embeddings` of its config.json); the teacher scores
    samples of up to `seq_len` tokens plus one generated token, so that context must hold `seq_len + 1` (a set
    max_model_len is checked by the config, `config.teacher.check_teacher_server`).

    Raises:
        PreflightError: the context is shorter (names the model, its config file, seq_len and where it was set)."""
    import json
    from pathlib import Path

    from prime_rl.launcher.fields import as_set
    from prime_rl.models.hub import resolve_model

    if cfg.teacher is None or cfg.teacher.vllm.max_model_len is not None:
        return
    cfg_file = Path(resolve_model(cfg.teacher.model.name)) / "config.json"
    try:
        ctx = json.loads(cfg_file.read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return
    seq_len = cfg.orchestrator.seq_len
    if isinstance(ctx, int) and ctx <= seq_len:
        name, where = as_set(cfg, "orchestrator.seq_len")
        raise PreflightError(
            f"{name} = {seq_len}{where}, but the teacher model {cfg.teacher.model.name!r} holds {ctx} tokens "
            f"(max_position_embeddings in {cfg_file}, which vLLM serves when teacher.vllm.max_model_len is unset) "
            f"and scores whole samples plus one generated token, so it needs {seq_len + 1}: lower {name} to at most "
            f"{ctx - 1}, or choose a teacher with a longer context"
        )
