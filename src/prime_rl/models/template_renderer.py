"""A chat renderer driven by the model's own chat template (`renderer.name = "template"`, what `auto` falls back to
when no named `renderers` renderer reproduces the model's template).

It renders with `tokenizer.apply_chat_template` (through `renderers`' `DefaultRenderer`), and adds what the RL loop
and SFT need from a renderer on top of an opaque Jinja template:

- `bridge_to_next_turn`: the next turn's prompt = the previous prompt + the tokens actually sampled + the template's
  text after the assistant's stop token (e.g. ChatML's `\\n`) + the new (tool) messages as the template renders
  them, tokenized on their own. The template text of the new messages is found by rendering them after a fixed
  context and cutting at the context's end; this is only right for templates that render a message the same way
  whatever precedes it, so it is checked once per renderer on a probe conversation (bridged ids == the template's
  full rendering); a template that fails the probe gets no bridge, and the agent loop re-renders the history and
  splits the rollout where the re-rendering does not extend the sampled tokens (counted as `prefix_breaks`).
- `render(...).sampled_mask`: in each assistant turn, the tokens the model emits itself (its text and the stop
  token), not the template's separators after it, so SFT trains on what RL samples.
- Hermes-style `<tool_call>{"name": ..., "arguments": ...}</tool_call>` parsing for templates that use that format.
  Where `<tool_call>` is one token (Qwen-style vocabularies) `renderers`' id-level parser runs; where it is
  several BPE pieces (SmolLM2 with `model.chat_template`), the decoded text is parsed.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_PROBE_TOOLS = [
    {"type": "function", "function": {"name": "probe", "description": "d",
                                      "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}
]  # fmt: skip
_PROBE_CALL = {"type": "function", "function": {"name": "probe", "arguments": {"x": 1}}}
_CTX = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
_SENTINEL = "\ue000"


def single_token_id(tokenizer: Any, text: str) -> int | None:
    """The id of `text` when the vocabulary has it as one token, else None."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    return ids[0] if len(ids) == 1 else None


def parse_hermes_text(text: str) -> tuple[str, list[Any]]:
    """Split `text` into (content before the first `<tool_call>`, one `ParsedToolCall` per block).

    Each block's body must be a JSON object with a `name` (status `ok`); otherwise the status says why
    (`invalid_json`, `missing_name`, `unclosed_block`), with the raw body kept for the error message.
    """
    from renderers.base import ParsedToolCall, ToolCallParseStatus

    start = text.find(TOOL_CALL_OPEN)
    if start < 0:
        return text, []
    calls = []
    pos = start
    while pos >= 0:
        body_start = pos + len(TOOL_CALL_OPEN)
        end = text.find(TOOL_CALL_CLOSE, body_start)
        raw = (text[body_start:] if end < 0 else text[body_start:end]).strip()
        if end < 0:
            calls.append(ParsedToolCall(raw=raw, status=ToolCallParseStatus.UNCLOSED_BLOCK))
            break
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError:
            calls.append(ParsedToolCall(raw=raw, status=ToolCallParseStatus.INVALID_JSON))
        else:
            name = obj.get("name") if isinstance(obj, dict) else None
            args = obj.get("arguments", {}) if isinstance(obj, dict) else {}
            status = ToolCallParseStatus.OK if isinstance(name, str) and name else ToolCallParseStatus.MISSING_NAME
            calls.append(ParsedToolCall(raw=raw, name=name or None, arguments=args, status=status))
        pos = text.find(TOOL_CALL_OPEN, end + len(TOOL_CALL_CLOSE))
    return text[:start].rstrip(), calls


class TemplateRenderer:
    """The `renderers` Renderer protocol (`render`, `render_ids`, `parse_response`, `get_stop_token_ids`,
    `bridge_to_next_turn`) over `tokenizer.chat_template`. See the module docstring.

    Args:
        tokenizer: a transformers tokenizer with a chat template.
        template_kwargs: extra variables for the template (e.g. `{"enable_thinking": False}`).

    Raises:
        ValueError: the tokenizer has no chat template.
    """

    def __init__(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None):
        from renderers.configs import DefaultRendererConfig
        from renderers.default import DefaultRenderer

        template = getattr(tokenizer, "chat_template", None)
        if not template or not isinstance(template, str):
            raise ValueError(
                f"the tokenizer of {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; give one with "
                "model.chat_template = 'path/to/template.jinja'"
            )
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.tool_format = "hermes" if TOOL_CALL_OPEN in template else None
        id_level = self.tool_format is not None and single_token_id(tokenizer, TOOL_CALL_OPEN) is not None
        self._text_hermes = self.tool_format is not None and not id_level
        cfg = DefaultRendererConfig(tool_parser="qwen3" if id_level else None, **self.template_kwargs)
        self._base = DefaultRenderer(tokenizer, cfg)
        self._stop_ids = self._find_stop_ids()
        self.bridge_ok = False
        self.bridge_ok = self._probe_bridge()

    # -- rendering ----------------------------------------------------------------------------------------------
    def _text(self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False) -> str:
        kw = dict(self.template_kwargs)
        if tools:
            kw["tools"] = tools
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                                  **kw)  # fmt: skip

    def render_ids(self, messages: list[dict], *, tools: list[dict] | None = None,
                   add_generation_prompt: bool = False) -> list[int]:  # fmt: skip
        """Token ids of the template's rendering (`apply_chat_template(tokenize=True)`)."""
        return self._base.render_ids(messages, tools=tools, add_generation_prompt=add_generation_prompt)

    def render(self, messages: list[dict], *, tools: list[dict] | None = None, add_generation_prompt: bool = False):
        """`RenderedTokens` with `message_indices` (incremental rendering) and `sampled_mask`: True on each
        assistant turn's own tokens after its generation prompt, up to and including the first stop token."""
        rendered = self._base.render(messages, tools=tools, add_generation_prompt=add_generation_prompt)
        ids, idx = list(rendered.token_ids), list(rendered.message_indices)
        sampled = [False] * len(ids)
        stops = set(self._stop_ids)
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            head = self.render_ids(messages[:i], tools=tools, add_generation_prompt=True)
            start = len(head) if ids[: len(head)] == list(head) else 0
            for pos in range(start, len(ids)):
                if idx[pos] != i:
                    continue
                sampled[pos] = True
                if ids[pos] in stops:
                    break
        return dataclasses.replace(rendered, sampled_mask=sampled)

    # -- sampling -----------------------------------------------------------------------------------------------
    def _find_stop_ids(self) -> list[int]:
        """eos, plus the token that closes an assistant turn in this template (e.g. `<|im_end|>`) when it is one
        token of its own."""
        out = [] if self.tokenizer.eos_token_id is None else [int(self.tokenizer.eos_token_id)]
        try:
            closed = self._text([*_CTX, {"role": "assistant", "content": _SENTINEL}])
        except Exception:  # noqa: BLE001 - a template that cannot render the probe keeps eos only
            return out
        after = closed[closed.rfind(_SENTINEL) + len(_SENTINEL) :]
        ids = self.tokenizer.encode(after, add_special_tokens=False) if after else []
        if ids and ids[0] not in out and self.tokenizer.convert_ids_to_tokens(ids[0]) in self.tokenizer.all_special_tokens:
            out.append(int(ids[0]))
        return out

    def get_stop_token_ids(self) -> list[int]:
        return list(self._stop_ids)

    def parse_response(self, token_ids: list[int], *, tools: list[dict] | None = None,
                       prompt_ids: list[int] | None = None):  # fmt: skip
        """`ParsedResponse` of a completion: content (stop and special tokens removed) and tool calls."""
        from renderers.base import ParsedResponse

        base = self._base.parse_response(token_ids, tools=tools, prompt_ids=prompt_ids)
        if not self._text_hermes:
            return base
        content, calls = parse_hermes_text(base.content)
        return ParsedResponse(content=content, reasoning_content=base.reasoning_content, tool_calls=calls,
                              reasoning_complete=base.reasoning_complete)  # fmt: skip

    # -- next turn ----------------------------------------------------------------------------------------------
    def _tail_text(self, new_messages: list[dict], tools: list[dict] | None) -> tuple[str, str] | None:
        """(template text from the assistant's stop token to the end of its turn, text of `new_messages` plus the
        generation prompt), from a render after a fixed context; None when the template is not prefix-stable."""
        asst: dict[str, Any] = {"role": "assistant", "content": _SENTINEL}
        if any(m.get("role") == "tool" for m in new_messages):
            asst["tool_calls"] = [_PROBE_CALL]
        prev = self._text([*_CTX, asst], tools)
        nxt = self._text([*_CTX, asst, *new_messages], tools, add_generation_prompt=True)
        if not nxt.startswith(prev) or _SENTINEL not in prev:
            return None
        return prev[prev.rfind(_SENTINEL) + len(_SENTINEL) :], nxt[len(prev) :]

    def _bridge(self, prompt_ids: list[int], completion_ids: list[int], new_messages: list[dict],
                tools: list[dict] | None) -> list[int] | None:  # fmt: skip
        if not completion_ids or completion_ids[-1] not in self._stop_ids:
            return None
        tail = self._tail_text(new_messages, tools)
        if tail is None:
            return None
        closing, suffix = tail
        stop_text = self.tokenizer.decode([completion_ids[-1]], skip_special_tokens=False)
        cut = closing.rfind(stop_text) if stop_text else -1
        if cut < 0:
            return None
        rest = closing[cut + len(stop_text) :] + suffix
        return [*prompt_ids, *completion_ids, *self.tokenizer.encode(rest, add_special_tokens=False)]

    def bridge_to_next_turn(self, previous_prompt_ids: list[int], previous_completion_ids: list[int],
                            new_messages: list[dict], *, tools: list[dict] | None = None):  # fmt: skip
        """`RenderedTokens` of the next prompt extending `previous_prompt_ids + previous_completion_ids` (see the
        module docstring), or None (the caller re-renders and splits the rollout where needed): when the
        template failed the bridge probe, or the completion did not end with a stop token."""
        from renderers.base import RenderedTokens

        if not self.bridge_ok:
            return None
        ids = self._bridge(list(previous_prompt_ids), list(previous_completion_ids), new_messages, tools)
        return None if ids is None else RenderedTokens(token_ids=ids, message_indices=[-1] * len(ids))

    def _probe_bridge(self) -> bool:
        """Bridge a probe conversation (system, user, assistant [with a tool call when the template has tools],
        tool result) and compare with the template's full rendering: True when identical."""
        tools = _PROBE_TOOLS if self.tool_format else None
        asst: dict[str, Any] = {"role": "assistant", "content": "A"}
        if self.tool_format:
            asst["tool_calls"] = [_PROBE_CALL]
        new = [{"role": "tool", "name": "probe", "content": "R"}]
        try:
            prompt = self.render_ids(_CTX, tools=tools, add_generation_prompt=True)
            closed = self.render_ids([*_CTX, asst], tools=tools)
            want = self.render_ids([*_CTX, asst, *new], tools=tools, add_generation_prompt=True)
        except Exception:  # noqa: BLE001 - a template that cannot render the probe gets no bridge
            return False
        if closed[: len(prompt)] != prompt:
            return False
        turn = closed[len(prompt) :]
        stop = next((k for k, t in enumerate(turn) if t in self._stop_ids), None)
        if stop is None:
            return False
        return self._bridge(prompt, turn[: stop + 1], new, tools) == want


def template_reads(tokenizer: Any, variable: str) -> bool:
    """True when the tokenizer's chat template mentions the template variable `variable`."""
    template = getattr(tokenizer, "chat_template", None) or ""
    return isinstance(template, str) and re.search(rf"\b{re.escape(variable)}\b", template) is not None
