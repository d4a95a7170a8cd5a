"""OpenAI Responses-API objects, the form NeMo Gym's `/verify` takes the model's whole trajectory in.

A NeMo Gym verifier reads `response.output`: a list of items, each `message` (assistant text as `output_text`
parts), `function_call` (`call_id`, `name`, `arguments` as a JSON string), `function_call_output` (`call_id`,
`output`) or `reasoning`. NeMo Gym's own SimpleAgent sends every item of the episode there (its weather example
scores whether a `get_weather` call happened), so a client must send the whole trajectory, not the last message.

- `trajectory_response(messages, ...)`: chat messages (OpenAI chat format, as the agent loop keeps them) -> a
  Responses object (`NeMoGymResponse`-valid: id, created_at, model, object, output, parallel_tool_calls,
  tool_choice, tools).
- `final_text(response)`: the last assistant text of a Responses object, a chat message or a string (what a
  single-turn environment scores).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def trajectory_response(
    messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None, model: str = "prime-rl",
    response_id: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The Responses object of an episode's generated part.

    Args:
        messages: the chat messages after the prompt: assistant messages (`content`, optional `reasoning_content`,
            `tool_calls` [{`id`, `function`: {`name`, `arguments`}}]) and tool messages (`tool_call_id`,
            `content`). Tool messages without a matching call id (a malformed call answered by the agent loop) are
            left out: the model never made that function call.
        tools: the row's `responses_create_params.tools` (echoed as the response's `tools`).
    Returns:
        a dict with `output` items in order: `reasoning`, `message`, `function_call` per assistant message, and
        `function_call_output` per tool result.
    """
    rid = response_id or f"resp_{uuid.uuid4().hex}"
    output: list[dict[str, Any]] = []
    call_ids: set[str] = set()
    for turn, msg in enumerate(messages):
        role = msg.get("role")
        if role == "assistant":
            if msg.get("reasoning_content"):
                output.append({"id": f"rs_{rid}_{turn}", "type": "reasoning",
                               "summary": [{"type": "summary_text", "text": msg["reasoning_content"]}]})  # fmt: skip
            text = _text(msg.get("content"))
            if text:
                output.append({"id": f"msg_{rid}_{turn}", "type": "message", "role": "assistant", "status": "completed",
                               "content": [{"type": "output_text", "text": text, "annotations": []}]})  # fmt: skip
            for index, call in enumerate(msg.get("tool_calls") or []):
                fn = call.get("function", call)
                args = fn.get("arguments", {})
                cid = call.get("id") or f"call_{turn}_{index}"
                call_ids.add(cid)
                output.append({"id": f"fc_{rid}_{turn}_{index}", "type": "function_call", "call_id": cid,
                               "name": fn.get("name", ""), "status": "completed",
                               "arguments": args if isinstance(args, str) else json.dumps(args)})  # fmt: skip
        elif role == "tool" and msg.get("tool_call_id") in call_ids:
            output.append({"type": "function_call_output", "call_id": msg["tool_call_id"],
                           "output": _text(msg.get("content"))})  # fmt: skip
    return {
        "id": rid, "created_at": float(int(time.time())), "model": model, "object": "response", "output": output,
        "parallel_tool_calls": True, "tool_choice": "auto", "tools": list(tools or []), "status": "completed",
    }  # fmt: skip


def final_text(response: Any) -> str | None:
    """The model's final assistant text: the last `message` item's `output_text` parts of a Responses object (or
    its `output_text`), a chat message's `content`, or a plain string; None when there is none.

    Raises:
        ValueError: `response` is not one of those shapes (names the field).
    """
    if response is None or isinstance(response, str):
        return response
    if not isinstance(response, dict):
        raise ValueError("response must be a Responses API object, a message object or a string")
    if isinstance(response.get("output_text"), str):
        return response["output_text"]
    output = response.get("output")
    if output is not None:
        if not isinstance(output, list):
            raise ValueError("response.output must be a list of output items")
        text = None
        for item in output:
            if isinstance(item, dict) and item.get("type", "message") == "message":
                text = _text(item.get("content"))
        return text
    if isinstance(response.get("content"), str | list):
        return _text(response["content"])
    return None
