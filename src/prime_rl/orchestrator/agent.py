"""The agent loop of the `null` harness: a plain chat loop with native (hermes) tool calls, token in / token out.

Per turn: the prompt ids go to the inference engine, the sampled completion ids and their logprobs are appended
to the current sample with loss mask 1, the completion is parsed for `<tool_call>` blocks, every call runs in the
environment, and the tool results are appended by the renderer's `bridge_to_next_turn` (which extends the tokens
actually sampled, never re-tokenizes them; docs/design.md invariant 1) with loss mask 0. Where the next prompt does not
extend the previous prompt + completion, the rollout continues in a new sample (`prefix_breaks` counts it).

A reply that calls no tool goes to the episode's `user_turn`: environments with user turns (text games) answer
with the next user message, which is bridged into the prompt the same way; the others answer None.

The loop ends when a reply calls no tool and the episode has no user turn for it, at `max_turns` (its tool calls still run), when a turn hits its token
budget (`truncated`), or when the sample would exceed `seq_len` (`truncated`). Then the episode is verified.
Environment or inference failures mask the rollout (`error_kind` and `error_message`; the scheduler logs them per
step); so do a reward that fails the one reward check (`envs.base.reward_problem`: missing, not a number, not finite
or outside `reward_range`), a non-finite sampled-token logprob, and a first prompt that leaves no room to sample
within `seq_len` (a rollout that was never sampled is never scored). The episode is always
closed, also on cancellation. A tool call whose arguments are not a JSON object (a list, a string, null) is a
malformed call: answered to the model with an error text and counted, never sent to the environment.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from prime_rl.config.orchestrator import SamplingConfig
from prime_rl.envs.base import DEFAULT_REWARD_RANGE, Task, VerifyResult, finite_metrics, reward_problem
from prime_rl.inference.backend import InferenceBackend
from prime_rl.monitor.logger import get_logger
from prime_rl.orchestrator.sources import AsyncEpisode, EnvError, TaskSource
from prime_rl.orchestrator.types import Rollout, Sample

log = get_logger("orchestrator.agent")

TOOL_FORMAT_HINT = '<tool_call>\n{"name": "<function-name>", "arguments": {<args-json-object>}}\n</tool_call>'


@dataclass
class AgentLimits:
    """Per-rollout limits: `seq_len` tokens per sample, `max_completion_tokens` per turn, and the rewards accepted
    (`reward_range`, inclusive; `orchestrator.reward_range`). (The turn cap is the source's: `TaskSource.max_turns`,
    its `env.agent.max_turns`.)"""

    seq_len: int
    max_completion_tokens: int
    reward_range: tuple[float, float] = DEFAULT_REWARD_RANGE


class RolloutInvalid(Exception):
    """A rollout that cannot be trained on (masked): `kind` is its error class in the step metrics (`errors/<kind>`)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def call_arguments(arguments: Any) -> dict[str, Any] | None:
    """A parsed tool call's arguments as a JSON object, or None when they are not one.

    A dict is returned as is; a string is decoded as JSON (the OpenAI form, `"{\"a\": 1}"`) and must hold an
    object; anything else (a list, a number, null, a string that is not a JSON object) is None: a malformed call.
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    return arguments if isinstance(arguments, dict) else None


def _json_kind(value: Any) -> str:
    """The JSON name of a value's type (for error texts the model reads)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string that is not a JSON object"
    kinds = {bool: "a boolean", list: "an array", int: "a number", float: "a number"}
    return kinds.get(type(value), type(value).__name__)


def malformed_call_message(status: str, raw: str) -> str:
    """Text returned to the model for a tool call it wrote badly (never a crash)."""
    snippet = raw if len(raw) <= 300 else raw[:300] + "..."
    return f"Error: could not parse your tool call ({status}): {snippet!r}. Write each call as {TOOL_FORMAT_HINT}"


_PROMPT_CACHE: OrderedDict[tuple, tuple[Any, list, list, list[int]]] = OrderedDict()
_PROMPT_CACHE_MAX = 4096


def initial_prompt_ids(renderer: Any, task: Task, source: str) -> list[int]:
    """The task's first prompt (messages + tools + generation prompt) for the source named `source`.

    Cached, since a group's rollouts share it (`benchmarks/prompt_cache.py` measures the saving). Keyed by
    renderer, source, split and task id: two sources may use the same task ids for different tasks (docs/design.md
    invariant 8). An entry answers only the renderer that rendered it (held weakly: a renderer made after it was
    freed may get its `id()`) and a task with the same messages and tools (two sources of one name, e.g. made one
    after the other in one process, may both have a `train-0`); otherwise the prompt is rendered again.
    """
    key = (id(renderer), source, task.split, task.task_id)
    entry = _PROMPT_CACHE.get(key)
    if entry is not None and entry[0]() is renderer and entry[1] == task.messages and entry[2] == task.tools:
        return list(entry[3])
    ids = list(renderer.render_ids(task.messages, tools=task.tools or None, add_generation_prompt=True))
    try:
        ref = weakref.ref(renderer)
    except TypeError:  # a renderer without weak references is not cached (a strong one would keep it alive)
        return ids
    _PROMPT_CACHE.pop(key, None)
    _PROMPT_CACHE[key] = (ref, task.messages, task.tools, ids)
    if len(_PROMPT_CACHE) > _PROMPT_CACHE_MAX:
        _PROMPT_CACHE.popitem(last=False)
    return list(ids)


def _turn_sampling(sampling: SamplingConfig, rollout_id: str | None, turn: int) -> SamplingConfig:
    """With `sampling.seed` set, a distinct reproducible seed per (rollout, turn): one shared seed would make every
    member of a group sample the same tokens (zero advantages)."""
    if sampling.seed is None:
        return sampling
    offset = int.from_bytes(hashlib.blake2b(f"{rollout_id}/{turn}".encode(), digest_size=4).digest(), "little")
    return sampling.model_copy(update={"seed": (sampling.seed + offset) % 2**31})


def _call_id(turn: int, index: int) -> str:
    return f"call_{turn}_{index}"


def _assistant_message(parsed: Any, args: list[dict[str, Any] | None], turn: int) -> dict[str, Any]:
    """The assistant message of a turn; `args[k]` is call k's arguments object, None for a malformed call."""
    msg: dict[str, Any] = {"role": "assistant", "content": parsed.content or ""}
    if parsed.reasoning_content:
        msg["reasoning_content"] = parsed.reasoning_content
    calls = [
        {"id": _call_id(turn, k), "type": "function", "function": {"name": tc.name, "arguments": a}}
        for k, (tc, a) in enumerate(zip(parsed.tool_calls, args, strict=True))
        if a is not None
    ]
    if calls:
        msg["tool_calls"] = calls
    return msg


CANCELLED_OPEN_WAIT_S = 10.0  # how long a cancelled rollout waits for its in-flight open to land, to close it


async def _open(source: TaskSource, task: Task) -> AsyncEpisode:
    """`source.open(task)`, such that a cancellation while the open is in flight does not leak the episode: the
    request may already have created a session on a remote server, so the open runs shielded, and on cancellation
    the rollout waits up to CANCELLED_OPEN_WAIT_S for it to land and closes what it opened before re-raising."""
    opening = asyncio.ensure_future(source.open(task))
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:
        try:
            episode = await asyncio.wait_for(opening, CANCELLED_OPEN_WAIT_S)
            await episode.close()
        except Exception as e:  # best effort: the open failed or timed out (the server reaps idle sessions too)
            log.debug("episode of %s opened during cancellation not closed: %s", task.task_id, e)
        raise


async def run_rollout(
    task: Task,
    source: TaskSource,
    client: InferenceBackend,
    renderer: Any,
    sampling: SamplingConfig,
    limits: AgentLimits,
    *,
    rollout_id: str | None = None,
    group_id: int = 0,
) -> Rollout:
    """Play one episode of `task` (see the module docstring), at most `source.max_turns` model turns (its
    `env.agent.max_turns`). Never raises for environment, model or inference failures (those mask the rollout);
    re-raises cancellation after closing the episode."""
    t0 = time.monotonic()
    rollout = Rollout(task=task, source=source.name, group_id=group_id, temperature=sampling.temperature,
                rollout_id=rollout_id)  # fmt: skip
    rollout.messages = [dict(m) for m in task.messages]
    tools = task.tools or None
    episode: AsyncEpisode | None = None
    try:
        episode = await _open(source, task)
        await _loop(rollout, episode, client, renderer, sampling, limits, source.max_turns, tools, rollout_id)
    except EnvError as e:
        rollout.mask(f"env/{e.kind}", e.message)
    except RolloutInvalid as e:
        rollout.mask(e.kind, str(e))
    except asyncio.CancelledError:
        rollout.mask("cancelled", "the rollout was cancelled")
        raise
    except Exception as e:  # inference client gave up, or a bug: mask, keep the run going
        rollout.mask(type(e).__name__, str(e))
    finally:
        if episode is not None:
            try:
                await asyncio.shield(episode.close())
            except Exception as e:  # closing is best effort; the server reaps idle sessions too
                log.warning("closing the episode of %s failed: %s", task.task_id, e)
        rollout.duration_s = time.monotonic() - t0
    return rollout


async def _loop(
    rollout: Rollout,
    episode: AsyncEpisode,
    client: InferenceBackend,
    renderer: Any,
    sampling: SamplingConfig,
    limits: AgentLimits,
    max_turns: int,
    tools: list[dict] | None,
    rollout_id: str | None,
) -> None:
    stop_ids = list(renderer.get_stop_token_ids())
    prompt_ids = initial_prompt_ids(renderer, rollout.task, rollout.source)
    sample = Sample()
    sample.extend(prompt_ids, sampled=False)
    final_text: str | None = None
    for turn in range(max_turns):
        budget = min(limits.max_completion_tokens, limits.seq_len - len(sample))
        if budget <= 0 and turn == 0:  # never sampled: not a reward of 0
            raise RolloutInvalid(
                "prompt_too_long",
                f"the first prompt has {len(sample)} tokens, seq_len {limits.seq_len} leaves no room to sample; raise "
                "seq_len (and inference.vllm.max_model_len) or shorten the prompt",
            )
        if budget <= 0:
            rollout.truncated = True
            break
        res = await client.generate(
            prompt_ids, _turn_sampling(sampling, rollout_id, turn), rollout_id=rollout_id, stop_token_ids=stop_ids,
            max_tokens=budget,
        )
        echoed = res.prompt_ids  # the list sent, for prime-rl's clients: nothing to compare
        if echoed is not prompt_ids and len(echoed) and (echoed if type(echoed) is list else list(echoed)) != prompt_ids:
            raise RuntimeError("inference echoed different prompt ids than were sent (token-in/token-out broken)")
        if res.finish_reason == "abort":
            raise RuntimeError("inference aborted the request (finish_reason=abort)")
        completion = list(res.completion_ids)
        if len(res.logprobs) != len(completion):
            raise RuntimeError(f"inference returned {len(res.logprobs)} logprobs for {len(completion)} tokens")
        logprobs = [float(x) for x in res.logprobs]
        if not math.isfinite(sum(logprobs)):  # NaN or +-inf anywhere (a C-level sum, no per-token Python check)
            bad = next(i for i, x in enumerate(logprobs) if not math.isfinite(x))
            raise RolloutInvalid(
                "inference/non_finite_logprob",
                f"turn {turn}: inference returned logprob {logprobs[bad]} for sampled token {bad} of {len(logprobs)}",
            )
        sample.extend(completion, sampled=True, logprobs=logprobs)
        rollout.policy_versions.append(int(res.policy_version))
        rollout.num_turns = turn + 1
        parsed = renderer.parse_response(completion, prompt_ids=prompt_ids)
        args = [call_arguments(tc.arguments) if str(tc.status) == "ok" else None for tc in parsed.tool_calls]
        rollout.messages.append(_assistant_message(parsed, args, turn))
        final_text = parsed.content
        if res.finish_reason == "length":
            rollout.truncated = True
        if rollout.truncated:
            break
        if parsed.tool_calls:
            new_msgs = await _run_tool_calls(rollout, episode, parsed, args, turn)
        else:  # the final answer, unless the environment answers with a user turn
            reply = await episode.user_turn(parsed.content or "")
            if reply is None:
                break
            new_msgs = [{"role": "user", "content": reply}]
        rollout.messages.extend(new_msgs)
        if turn + 1 >= max_turns:
            rollout.turn_capped = True
            break
        next_prompt = _next_prompt(renderer, prompt_ids, completion, new_msgs, rollout.messages, tools)
        extended = _extend(rollout, sample, prompt_ids, completion, next_prompt, limits)
        if extended is None:
            break
        sample, prompt_ids = extended, next_prompt
    if any(sample.loss_mask):  # has a sampled token (`num_loss_tokens`, without summing the prompt's mask)
        rollout.samples.append(sample)
    result = await episode.verify(final_text, rollout.messages[len(rollout.task.messages) :])
    if not isinstance(result, VerifyResult):
        raise RolloutInvalid("env/invalid_reward", f"verify returned {type(result).__name__}, not a VerifyResult")
    rollout.env_metrics = finite_metrics(result.metrics)
    if result.masked:
        rollout.mask("env/masked", str(result.reason))
        return
    bad = reward_problem(result.reward, limits.reward_range)
    if bad is not None:
        raise RolloutInvalid("env/invalid_reward", f"verify returned {bad} (expected a finite number within "
                             "orchestrator.reward_range)")
    rollout.reward = float(result.reward)


async def _run_tool_calls(rollout: Rollout, episode: AsyncEpisode, parsed: Any, args: list[dict[str, Any] | None],
                          turn: int) -> list[dict[str, Any]]:  # fmt: skip
    """Run a turn's tool calls in the environment; the tool messages, in call order. A malformed call (`args[k]`
    None) is answered with an error text and counted in `rollout.malformed_tool_calls`, never sent to the
    environment."""
    tool_msgs = []
    for index, (tc, call_args) in enumerate(zip(parsed.tool_calls, args, strict=True)):
        msg = {"role": "tool", "name": tc.name or ""}
        if call_args is not None:
            text = await episode.call_tool(tc.name, call_args)
            msg["tool_call_id"] = _call_id(turn, index)
        else:
            rollout.malformed_tool_calls += 1
            status = str(tc.status)
            if status == "ok":
                status = f"`arguments` must be a JSON object, got {_json_kind(tc.arguments)}"
            text = malformed_call_message(status, tc.raw)
        tool_msgs.append({**msg, "content": text})
    return tool_msgs


def _next_prompt(renderer: Any, prompt_ids: list[int], completion: list[int], new_msgs: list[dict[str, Any]],
                 messages: list[dict[str, Any]], tools: list[dict] | None) -> list[int]:  # fmt: skip
    """The next turn's prompt: the renderer's bridge over the sampled tokens, or a re-rendering of `messages`."""
    bridged = renderer.bridge_to_next_turn(prompt_ids, completion, new_msgs, tools=tools)
    if bridged is not None:
        return list(bridged.token_ids)
    return list(renderer.render_ids(messages, tools=tools, add_generation_prompt=True))


def _extend(rollout: Rollout, sample: Sample, prompt_ids: list[int], completion: list[int], next_prompt: list[int],
            limits: AgentLimits) -> Sample | None:  # fmt: skip
    """Add the next prompt's new tokens (loss mask 0) to `sample`, or start a new sample where `next_prompt` does not
    extend `prompt_ids + completion` (`rollout.prefix_breaks`). The sample the next turn extends, or None when `seq_len`
    leaves no room (then `rollout.truncated` is set and `sample` stays the rollout's last sample)."""
    prev = prompt_ids + completion
    if next_prompt[: len(prev)] == prev:
        ext = next_prompt[len(prev) :]
        if len(sample) + len(ext) >= limits.seq_len:
            rollout.truncated = True
            return None
        sample.extend(ext, sampled=False)
        return sample
    rollout.prefix_breaks += 1
    if len(next_prompt) >= limits.seq_len:
        rollout.truncated = True
        return None
    rollout.samples.append(sample)
    fresh = Sample()
    fresh.extend(next_prompt, sampled=False)
    return fresh
