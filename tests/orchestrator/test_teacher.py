"""On-policy distillation's teacher client (`prime_rl.orchestrator.teacher`) against a scripted HTTP server: parsing
vLLM's prompt logprobs, scoring a group (loss tokens kept, failures and non-finite logprobs masking their rollout),
the start-up checks (served model, context, tokenizer: refused naming both models), packing and `teacher/kl`."""

from __future__ import annotations

import json

import pytest
from aiohttp import web

from prime_rl.config.teacher import TeacherConfig
from prime_rl.envs.base import Task
from prime_rl.inference.backend import InferenceError
from prime_rl.inference.scoring import check_same_tokens, parse_prompt_logprobs, probe_text
from prime_rl.orchestrator.packing import pack_items, pack_step
from prime_rl.orchestrator.teacher import Teacher, TeacherMismatch, teacher_metrics
from prime_rl.orchestrator.types import Rollout, Sample
from prime_rl.ports import free_port


def byte_tokenizer():
    """The tiny models' byte-level Qwen3-format tokenizer (transformers)."""
    from transformers import AutoTokenizer

    from prime_rl.models.tiny import cached_tiny_model

    return AutoTokenizer.from_pretrained(str(cached_tiny_model()))


def teacher_lp(token: int, position: int) -> float:
    """The scripted teacher's logprob of `token` at `position`."""
    return -0.01 * token - 0.1 * position


def vllm_answer(ids: list[int], nan_at: int | None = None) -> dict:
    """A `/v1/completions` answer shaped like vLLM's with `prompt_logprobs = 0`: None first, then {id: {...}}."""
    plp = [None] + [{str(t): {"logprob": float("nan") if i == nan_at else teacher_lp(t, i), "rank": 1,
                              "decoded_token": "x"}} for i, t in enumerate(ids) if i > 0]  # fmt: skip
    return {"choices": [{"index": 0, "text": "a", "prompt_logprobs": plp}]}


class FakeTeacher:
    """One teacher server: /health, /v1/models (model `name`, `max_model_len`), /tokenize (ids from `tokenize`),
    /v1/completions (vLLM-shaped prompt logprobs; 400 for a prompt starting with 99, NaN at position 2 for one
    starting with 98). `bodies` records the completion requests."""

    def __init__(self, name: str = "teacher-model", max_model_len: int = 4096, tokenize=None):
        self.name, self.max_model_len, self.tokenize = name, max_model_len, tokenize
        self.bodies: list[dict] = []

    async def start(self) -> str:
        port = free_port()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        return f"http://127.0.0.1:{port}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw) if raw else None
        if request.path == "/health":
            return web.Response(status=200)
        if request.path == "/v1/models":
            return web.json_response({"data": [{"id": self.name, "max_model_len": self.max_model_len}]})
        if request.path == "/tokenize":
            return web.json_response({"tokens": self.tokenize(body["prompt"])})
        if request.path == "/v1/completions":
            self.bodies.append(body)
            ids = body["prompt"]
            if ids[0] == 99:
                return web.Response(status=400, text="refused")
            return web.Response(text=json.dumps(vllm_answer(ids, nan_at=2 if ids[0] == 98 else None)),
                                content_type="application/json")  # json.dumps writes NaN as vLLM's server does
        return web.Response(status=404)

    async def close(self) -> None:
        await self.runner.cleanup()


def rollout(ids: list[int], mask: list[bool], k: int) -> Rollout:
    s = Sample(list(ids), list(mask), [-0.5 if m else 0.0 for m in mask])
    return Rollout(task=Task(task_id="t", split="train", index=0, messages=[]), source="s", samples=[s], rollout_id=f"t/g0/r{k}", reward=1.0)


def test_parse_prompt_logprobs():
    ids = [5, 17, 3, 40]
    assert parse_prompt_logprobs(ids, vllm_answer(ids), "u") == [0.0, teacher_lp(17, 1), teacher_lp(3, 2), teacher_lp(40, 3)]
    bad = vllm_answer(ids)
    bad["choices"][0]["prompt_logprobs"][2] = {"4": {"logprob": -1.0}}  # another token than the prompt's
    with pytest.raises(InferenceError, match="no prompt logprob of token 3 at position 2"):
        parse_prompt_logprobs(ids, bad, "u")
    with pytest.raises(InferenceError, match="3 prompt logprobs for a 4-token prompt"):
        parse_prompt_logprobs(ids, vllm_answer(ids[:3]), "u")
    with pytest.raises(InferenceError, match="no prompt_logprobs"):
        parse_prompt_logprobs(ids, {"choices": [{"text": "a"}]}, "u")


async def test_score_group_keeps_loss_tokens_and_masks_failures():
    fake = FakeTeacher()
    url = await fake.start()
    teacher = Teacher(TeacherConfig(name="teacher-model", base_url=[url], max_retries=0))
    try:
        mask = [False, False, True, True, False, True]
        good = rollout([1, 2, 3, 4, 5, 6], mask, 0)
        refused = rollout([99, 2, 3, 4, 5, 6], mask, 1)
        nan = rollout([98, 2, 3, 4, 5, 6], mask, 2)
        already = rollout([1, 2, 3, 4, 5, 6], mask, 3)
        already.mask("env/error", "boom")
        await teacher.score_group([good, refused, nan, already])
    finally:
        await teacher.aclose()
        await fake.close()
    want = [teacher_lp(t, i) if m else 0.0 for i, (t, m) in enumerate(zip([1, 2, 3, 4, 5, 6], mask, strict=True))]
    assert good.samples[0].teacher_logprobs == pytest.approx(want) and not good.masked
    assert refused.masked and refused.error_kind == "teacher/error" and "400" in refused.error_message
    assert nan.masked and nan.error_kind == "teacher/non_finite"
    assert already.error_kind == "env/error" and already.samples[0].teacher_logprobs is None
    assert len(fake.bodies) == 3  # the masked rollout is not sent
    b = fake.bodies[0]
    assert (b["model"], b["max_tokens"], b["prompt_logprobs"]) == ("teacher-model", 1, 0)


async def test_check_refuses_another_tokenizer_model_or_short_context():
    tok = byte_tokenizer()
    same = FakeTeacher(tokenize=lambda text: tok.encode(text, add_special_tokens=False))
    url = await same.start()
    try:
        await Teacher(TeacherConfig(name="teacher-model", base_url=[url])).check(tok, "student-model", 2048)
        with pytest.raises(TeacherMismatch, match=r"holds 4096 tokens.*seq_len \+ 1"):
            await Teacher(TeacherConfig(name="teacher-model", base_url=[url])).check(tok, "student-model", 4096)
        with pytest.raises(TeacherMismatch, match=r"serves \['teacher-model'\], not 'other' \(teacher.name"):
            await Teacher(TeacherConfig(name="other", base_url=[url])).check(tok, "student-model", 2048)
    finally:
        await same.close()
    shifted = FakeTeacher(tokenize=lambda text: [t + 1 for t in tok.encode(text, add_special_tokens=False)])
    url = await shifted.start()
    try:
        with pytest.raises(TeacherMismatch, match=r"student 'student-model' \(model.name.*teacher 'teacher-model'"):
            await Teacher(TeacherConfig(name="teacher-model", base_url=[url])).check(tok, "student-model", 2048)
    finally:
        await shifted.close()


async def test_start_check_refusals_name_where_the_teacher_and_model_were_set(tmp_path):
    """The orchestrator's start checks name where its command line set model.name, teacher.name, teacher.base_url
    and seq_len (a file or a flag)."""
    from prime_rl.config.loader import parse_config
    from prime_rl.config.orchestrator import OrchestratorConfig

    tok = byte_tokenizer()
    shifted = FakeTeacher(tokenize=lambda text: [t + 1 for t in tok.encode(text, add_special_tokens=False)])
    url = await shifted.start()
    path = tmp_path / "orch.toml"
    path.write_text(f'model.name = "student-model"\n\n[teacher]\nname = "teacher-model"\nbase_url = ["{url}"]\n')
    try:
        cfg = parse_config(OrchestratorConfig, ["@", str(path), "--seq-len", "4096"])
        with pytest.raises(TeacherMismatch, match=rf"student 'student-model' \(model.name, in {path}\) and .* for the "
                                                  rf"teacher 'teacher-model' \(teacher.name, in {path}\)"):
            await Teacher(cfg.teacher).check(tok, cfg.model.name, 2048)
        with pytest.raises(TeacherMismatch, match=r"seq_len = 4096 tokens \(seq_len, from --seq-len\) needs"):
            await Teacher(cfg.teacher).check(tok, cfg.model.name, cfg.seq_len)
        cfg = parse_config(OrchestratorConfig, ["@", str(path), "--teacher.name", "other"])
        with pytest.raises(TeacherMismatch, match=rf"at {url} \(teacher.base_url, in {path}\) serves "
                                                  r"\['teacher-model'\], not 'other' \(teacher.name, from "
                                                  r"--teacher.name\)"):
            await Teacher(cfg.teacher).check(tok, cfg.model.name, 2048)
    finally:
        await shifted.close()


def test_probe_text_holds_special_tokens_and_mismatch_names_position():
    tok = byte_tokenizer()
    text = probe_text(tok)
    assert tok.eos_token in text and "<|im_start|>" in text
    check_same_tokens([1, 2, 3], [1, 2, 3], "s", "t")
    with pytest.raises(TeacherMismatch, match=r"3 tokens for the student 's'.*2 for the teacher 't'.*token 1"):
        check_same_tokens([1, 2, 3], [1, 5], "s", "t")


def test_packing_carries_teacher_logprobs_and_metric():
    a = rollout([1, 2, 3, 4], [False, True, True, False], 0)
    b = rollout([1, 2, 5], [False, False, True], 1)
    a.samples[0].teacher_logprobs = [0.0, -1.0, -0.25, 0.0]
    b.samples[0].teacher_logprobs = [0.0, 0.0, -2.0]
    a.advantage, b.advantage = 0.0, 0.0  # zero advantages still train the teacher term
    (batch,) = pack_step(pack_items([a, b]), step=1, seq_len=4, num_ranks=1)
    mbs = batch.micro_batches
    assert [mb.teacher_logprobs.tolist() for mb in mbs] == [[0.0, -1.0, -0.25, 0.0], [0.0, 0.0, -2.0]]
    two = pack_step(pack_items([a]), step=1, seq_len=4, num_ranks=2)  # rank 1 gets a padding micro-batch
    assert two[1].micro_batches[0].teacher_logprobs.tolist() == [0.0]
    # teacher/kl: inference logprob -0.5 on each loss token; (-0.5+1) + (-0.5+0.25) + (-0.5+2) over 3 tokens
    m = teacher_metrics([a, b])
    assert m["teacher/kl"] == pytest.approx((0.5 - 0.25 + 1.5) / 3) and m["teacher/tokens"] == 3
    b.samples[0].teacher_logprobs = None
    with pytest.raises(ValueError, match="teacher logprobs and others not"):
        pack_step(pack_items([a, b]), step=1, seq_len=8, num_ranks=1)
    assert teacher_metrics([rollout([1, 2], [False, True], 0)]) == {}


def test_vllm_minus_9999_is_minus_inf_and_masks_the_rollout():
    """vLLM sends -9999 for a token of probability 0; taken as a number it would be a ~9999-nat KL term."""
    ids = [5, 6, 7]
    answer = vllm_answer(ids)
    answer["choices"][0]["prompt_logprobs"][2][str(7)]["logprob"] = -9999.0
    lps = parse_prompt_logprobs(ids, answer, "u")
    assert lps[1] == pytest.approx(teacher_lp(6, 1)) and lps[2] == float("-inf")
