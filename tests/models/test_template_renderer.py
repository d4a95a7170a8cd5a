"""`renderer.name = "auto"` and the template-driven renderer on SmolLM2's real tokenizer and chat template (ChatML,
no tools) and on the packaged Hermes tool template (`model.chat_template`): family resolution, SFT masks, Hermes
parsing, and multi-turn tool rollouts whose prompts extend the sampled tokens."""

from __future__ import annotations

import pytest
from tests.orchestrator.fakes import ADD_TOOL, CounterEnv, ScriptedClient, tool_call_text

from prime_rl.config.orchestrator import RendererConfig, SamplingConfig
from prime_rl.models.renderer import family_renderer, load_tokenizer, make_renderer
from prime_rl.models.template_renderer import TemplateRenderer, parse_hermes_text
from prime_rl.orchestrator.agent import AgentLimits, run_rollout
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.trainer.sft_data import render_sample

TOOLS_TEMPLATE = "src/prime_rl/models/templates/chatml_tools.jinja"


@pytest.fixture(scope="module")
def smollm_dir():
    from prime_rl.models.smollm import cached_smollm

    return cached_smollm("tied")


@pytest.fixture(scope="module")
def tok(smollm_dir):
    return load_tokenizer(smollm_dir)


@pytest.fixture(scope="module")
def tool_tok(smollm_dir):
    from tests.conftest import REPO

    return load_tokenizer(smollm_dir, REPO / TOOLS_TEMPLATE)


def test_auto_picks_the_family_renderer_or_the_template(tok, tool_tok, tmp_path):
    from tests.orchestrator.fakes import tiny_tokenizer

    tiny = tiny_tokenizer(tmp_path)
    assert family_renderer(tiny) == "qwen3"  # the Qwen3 template: renderers' qwen3 renders it token for token
    assert type(make_renderer(tiny, RendererConfig())).__name__ == "Qwen3Renderer"
    assert RendererConfig().name == "auto"
    for t, fmt in ((tok, None), (tool_tok, "hermes")):
        assert family_renderer(t) is None
        r = make_renderer(t, RendererConfig())
        assert isinstance(r, TemplateRenderer) and r.tool_format == fmt and r.bridge_ok
        assert r.get_stop_token_ids() == [t.convert_tokens_to_ids("<|im_end|>")]


def test_render_equals_the_template_and_sft_trains_on_what_is_sampled(tok):
    r = make_renderer(tok, "auto")
    msgs = [{"role": "user", "content": "Reverse: abc"}, {"role": "assistant", "content": "cba"}]
    want = tok.apply_chat_template(msgs, tokenize=True, return_dict=False)
    assert r.render_ids(msgs) == list(want)
    s = render_sample(r, msgs)
    trained = tok.decode(s.input_ids[s.loss_mask])
    assert trained == "cba<|im_end|>"  # the model's text and stop token; not the header, not ChatML's "\n" after it
    assert tok.decode(s.input_ids).startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


def test_parse_hermes_text_statuses():
    content, calls = parse_hermes_text('Let me add.\n<tool_call>\n{"name": "add", "arguments": {"x": 2}}\n</tool_call>'
                                       '<tool_call>{oops}</tool_call><tool_call>{"arguments": {}}</tool_call>'
                                       '<tool_call>\n{"name": "add"')  # fmt: skip
    assert content == "Let me add."
    assert [(str(c.status), c.name, c.arguments) for c in calls] == [
        ("ok", "add", {"x": 2}), ("invalid_json", None, None), ("missing_name", None, {}), ("unclosed_block", None, None),
    ]  # fmt: skip
    assert calls[1].raw == "{oops}"
    assert parse_hermes_text("no calls") == ("no calls", [])


def _counter_source() -> InProcessSource:
    """The counter environment with an 8-turn cap (the source's `max_turns`)."""
    src = InProcessSource("counter", CounterEnv(8))
    src.max_turns = 8
    return src


def _script(prompt: str, k: int) -> str:
    return [tool_call_text("add", {"x": 2}), "ok " + tool_call_text("add", {"x": 3}), "The total is 5."][k]


async def test_two_turn_tool_rollout_rendered_with_the_models_template(tool_tok):
    """Hermes calls in SmolLM2 BPE (`<tool_call>` is several tokens): parsed, run, answered; every prompt extends
    the sampled tokens (one sample, no prefix break); the conversation renders as the template renders it."""
    r = make_renderer(tool_tok, "auto")
    src = _counter_source()
    client = ScriptedClient(tool_tok, _script)
    task = src.tasks("train")[5]
    out = await run_rollout(task, src, client, r, SamplingConfig(), AgentLimits(4096, 256))
    assert not out.masked, out.error
    assert out.num_turns == 3 and out.reward == 1.0 and out.malformed_tool_calls == 0
    assert out.prefix_breaks == 0 and len(out.samples) == 1
    ids = out.samples[0].token_ids
    for c in client.calls:  # each prompt + completion is a prefix of the one sample
        assert ids[: len(c["prompt_ids"]) + len(c["completion_ids"])] == c["prompt_ids"] + c["completion_ids"]
    text = tool_tok.decode(ids)
    assert "<|im_start|>user\n<tool_response>\ntotal=2\n</tool_response><|im_end|>\n" in text
    assert "# Tools" in text and '"name": "add"' in text
    # the first call was sampled exactly as the template renders it: up to the second prompt, the same tokens as a
    # full render (the second reply, "ok " + call, would re-render as "ok\n" + call: only the bridge keeps it)
    first = tool_tok.apply_chat_template(out.messages[:4], tools=[ADD_TOOL], tokenize=True, return_dict=False,
                                         add_generation_prompt=True)  # fmt: skip
    assert ids[: len(first)] == list(first)


async def test_bridge_keeps_a_non_canonical_tokenization(tool_tok):
    """A completion whose ids are not how the tokenizer would split its text (the model may sample any split):
    the bridge keeps those ids; a full re-render would not extend them (the agent would have split the rollout)."""
    r = make_renderer(tool_tok, "auto")

    class CharByChar(ScriptedClient):
        async def generate(self, prompt_ids, sampling, **kw):
            res = await super().generate(prompt_ids, sampling, **kw)
            if len(self.calls) == 1:  # re-tokenize the first completion one character at a time
                text = self.tok.decode(res.completion_ids[:-1])
                res.completion_ids = [t for ch in text for t in self.tok.encode(ch, add_special_tokens=False)]
                res.completion_ids.append(self.stop_id)
                res.logprobs = [-0.5] * len(res.completion_ids)
                self.calls[-1]["completion_ids"] = res.completion_ids
            return res

    src = _counter_source()
    client = CharByChar(tool_tok, lambda p, k: [tool_call_text("add", {"x": 3}), "3"][k])
    task = src.tasks("train")[3]
    out = await run_rollout(task, src, client, r, SamplingConfig(), AgentLimits(4096, 256))
    assert out.reward == 1.0 and out.prefix_breaks == 0 and len(out.samples) == 1
    c0 = client.calls[0]
    assert out.samples[0].token_ids[: len(c0["prompt_ids"]) + len(c0["completion_ids"])] == c0["prompt_ids"] + c0["completion_ids"]
    full = r.render_ids(out.messages[:4], tools=task.tools, add_generation_prompt=True)
    assert full[: len(c0["prompt_ids"]) + len(c0["completion_ids"])] != c0["prompt_ids"] + c0["completion_ids"]


async def test_template_that_is_not_prefix_stable_gets_no_bridge_and_splits(tool_tok):
    """A template that renders earlier turns differently once later ones exist fails the bridge probe; the agent
    then re-renders, and the rollout is split where the new prompt does not extend the sampled tokens."""
    import copy

    t = copy.copy(tool_tok)
    t.chat_template = tool_tok.chat_template.replace(
        '{{- "<|im_start|>system\\n" + system -}}', '{{- "<|im_start|>system\\n" + system + ("!" * (messages|length)) -}}'
    )
    r = TemplateRenderer(t)
    assert not r.bridge_ok
    src = _counter_source()
    client = ScriptedClient(t, lambda p, k: [tool_call_text("add", {"x": 1}), "1"][k])
    out = await run_rollout(src.tasks("train")[1], src, client, r, SamplingConfig(), AgentLimits(4096, 256))
    assert out.reward == 1.0 and out.prefix_breaks == 1 and len(out.samples) == 2


def test_enable_thinking_reaches_the_template_or_is_refused(tok, tmp_path):
    import copy

    make_renderer(tok, RendererConfig())  # the default (not set) is fine on a template without thinking
    with pytest.raises(ValueError, match="enable_thinking"):
        make_renderer(tok, RendererConfig(enable_thinking=True))
    with pytest.raises(ValueError, match="enable_thinking"):
        make_renderer(tok, RendererConfig(name="template", enable_thinking=False))
    t = copy.copy(tok)
    t.chat_template = tok.chat_template.replace(
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}",
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% if enable_thinking %}<think>{% endif %}",
    )
    msgs = [{"role": "user", "content": "hi"}]
    on = make_renderer(t, RendererConfig(enable_thinking=True)).render_ids(msgs, add_generation_prompt=True)
    off = make_renderer(t, RendererConfig(enable_thinking=False)).render_ids(msgs, add_generation_prompt=True)
    assert t.decode(on).endswith("assistant\n<think>") and t.decode(off).endswith("assistant\n")


def test_default_enable_thinking_survives_the_written_child_config(tok):
    """`rl` writes each child's resolved config to TOML and the orchestrator reads it back: the default must stay
    "not set" there. It used to come back as an explicit `enable_thinking = false`, so every `rl` run of SmolLM2
    (renderer auto -> template, no thinking switch) was refused at the orchestrator's start."""
    import tomllib

    from prime_rl.config.loader import config_to_toml
    from prime_rl.config.orchestrator import OrchestratorConfig

    written = OrchestratorConfig.model_validate(tomllib.loads(config_to_toml(OrchestratorConfig())))
    assert written.renderer.enable_thinking is None
    assert isinstance(make_renderer(tok, written.renderer), TemplateRenderer)
    explicit = OrchestratorConfig.model_validate(tomllib.loads(config_to_toml(OrchestratorConfig(renderer=RendererConfig(enable_thinking=False)))))
    with pytest.raises(ValueError, match="enable_thinking"):  # an explicit false still is refused after the round trip
        make_renderer(tok, explicit.renderer)


def test_chat_template_file_is_read_or_named_when_missing(smollm_dir, tool_tok):
    assert "<tool_call>" in tool_tok.chat_template
    with pytest.raises(FileNotFoundError, match="model.chat_template"):
        load_tokenizer(smollm_dir, "no/such/template.jinja")
