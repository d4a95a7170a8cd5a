"""SFT data: chat rows -> token ids + assistant-only loss mask (with the orchestrator's renderer) -> packed
micro-batches (or shared-prefix micro-batches, `data.shared_prefix`).

Rows come from `data.path` (a JSONL file, or parquet/arrow/csv/json/a dataset folder through Hugging Face
`datasets`) or `data.name` (`datasets.load_dataset(name, subset, split=split)`), with `data.columns` renaming
columns (`prime_rl.hf_data`). A row is `{"messages": [...], "tools": [...] (optional)}` in OpenAI chat format
(assistant `tool_calls` allowed, `tool` role for results), or TRL's prompt-completion form `{"prompt": ...,
"completion": ...}` (each a string or a list of messages), which becomes the messages prompt + completion. A sample is rendered with the same `renderers` renderer the
orchestrator samples with (so SFT trains on exactly the token sequences RL later samples), and its loss mask
selects (by default, `data.loss_mask`) the tokens the model itself would emit in each assistant turn: the
assistant's content, reasoning and tool calls, and its closing `<|im_end|>`. Excluded: system/user/tool messages
(tool results included; each role can be switched on in `data.loss_mask`), the assistant's role headers, and whatever the generation prompt pre-fills (e.g. the empty `<think>\\n\\n</think>\\n\\n` block with
`enable_thinking = false`). The pre-filled part is found by rendering the conversation up to each assistant
turn with `add_generation_prompt=True` and diffing token ids against the full rendering.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from prime_rl.trainer.shared_prefix import SharedPrefixMicroBatch, make_shared_prefix_batch
from prime_rl.transport.batch import MicroBatch


class SFTDataError(ValueError):
    """A dataset line is unusable (names file, line and the problem)."""


@dataclass
class SFTSample:
    """One rendered conversation: `input_ids` [L] int, `loss_mask` [L] bool."""

    input_ids: np.ndarray
    loss_mask: np.ndarray

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    """Chat rows of a JSONL file (`load_chat_rows` with `path`). Raises SFTDataError naming the line;
    FileNotFoundError naming `data.path`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data.path = {str(path)!r} does not exist (JSONL of {{'messages': [...]}} rows)")
    return load_chat_rows(path=path)


def _as_messages(value: Any, role: str, where: str, col: str) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, list) and all(isinstance(m, dict) and "role" in m for m in value):
        return list(value)
    raise SFTDataError(f"{where}: '{col}' must be a string or a list of messages, got {type(value).__name__}")


def to_chat_row(row: dict[str, Any], where: str) -> dict[str, Any]:
    """`{"messages": [...], "tools": [...]?}` from a chat row or a prompt-completion row; `tools` given as a JSON
    string is parsed.

    Raises:
        SFTDataError: neither form, empty messages, or no assistant message (names `where`, the row).
    """
    if "messages" in row:
        msgs = row["messages"]
        if isinstance(msgs, str):
            try:
                msgs = json.loads(msgs)
            except json.JSONDecodeError:
                raise SFTDataError(f"{where}: 'messages' is a string that is not JSON") from None
    elif "prompt" in row and "completion" in row:
        msgs = _as_messages(row["prompt"], "user", where, "prompt") + _as_messages(
            row["completion"], "assistant", where, "completion"
        )
    else:
        raise SFTDataError(
            f"{where}: needs a 'messages' column, or 'prompt' and 'completion' (it has {sorted(row)}); map yours "
            f"with data.columns, e.g. {{messages = \"conversations\"}}"
        )
    if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
        raise SFTDataError(f"{where}: needs a non-empty 'messages' list")
    if not any(m.get("role") == "assistant" for m in msgs):
        raise SFTDataError(f"{where}: no assistant message, so nothing to train on")
    out: dict[str, Any] = {"messages": msgs}
    tools = row.get("tools")
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError:
            raise SFTDataError(f"{where}: 'tools' is a string that is not JSON") from None
    if tools:
        out["tools"] = tools
    return out


def load_chat_rows(*, path: str | Path | None = None, name: str | None = None, subset: str | None = None,
                   split: str = "train", columns: dict[str, str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The SFT conversations of `data` (see the module docstring), as chat rows.

    Raises:
        SFTDataError: a source or row problem, naming `data.path`/`data.name` and the row (1-based).
    """
    from prime_rl.hf_data import DataLoadError, load_rows

    try:
        rows = load_rows(path=path, name=name, subset=subset, split=split, columns=columns, field="data")
    except DataLoadError as e:
        raise SFTDataError(str(e)) from None
    src = f"data.path = {str(path)!r}" if path is not None else f"data.name = {name!r}"
    return [to_chat_row(r, f"{src}, row {i + 1}") for i, r in enumerate(rows)]


def render_sample(
    renderer: Any, messages: list[dict], tools: list[dict] | None = None, roles: frozenset[str] = frozenset({"assistant"})
) -> SFTSample:
    """Render one conversation; the loss mask covers the messages whose role is in `roles` (`data.loss_mask`): an
    assistant message's own emitted tokens (see module docstring), every token the renderer attributes to any
    other message. Position 0 never carries loss (nothing predicts it)."""
    full = renderer.render(messages, tools=tools)
    ids = list(full.token_ids)
    idx = list(full.message_indices)
    sampled = list(full.sampled_mask) if len(full.sampled_mask) == len(ids) else None
    mask = np.zeros(len(ids), bool)
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in roles:
            continue
        start = 0
        if role == "assistant":
            prompt = renderer.render_ids(messages[:i], tools=tools, add_generation_prompt=True)
            start = len(prompt) if ids[: len(prompt)] == list(prompt) else 0
        for pos in range(start, len(ids)):
            if idx[pos] == i and (role != "assistant" or sampled is None or sampled[pos]):
                mask[pos] = True
    mask[:1] = False
    return SFTSample(np.asarray(ids, dtype=np.int64), mask)


def render_dataset(
    rows: list[dict], renderer: Any, seq_len: int, on_row: Any = None, roles: frozenset[str] = frozenset({"assistant"})
) -> tuple[list[SFTSample], int]:
    """Render every row (loss on the messages of `roles`); samples longer than `seq_len` are truncated. Returns
    (samples, number truncated). `on_row()` is called after each row (progress)."""
    out, truncated = [], 0
    for row in rows:
        sample = render_sample(renderer, row["messages"], row.get("tools"), roles)
        if len(sample) > seq_len:
            sample = SFTSample(sample.input_ids[:seq_len], sample.loss_mask[:seq_len])
            truncated += 1
        out.append(sample)
        if on_row is not None:
            on_row()
    return out, truncated


def step_indices(step: int, batch_size: int, num_samples: int, seed: int, shuffle: bool) -> list[int]:
    """Dataset indices of optimizer step `step` (1-based): positions (step-1)*batch_size ... of the stream made
    of epoch permutations (torch.randperm seeded with seed + epoch, or 0..n-1 without shuffle). A pure
    function of its arguments, so resuming at any step reproduces the data order."""
    out = []
    perms: dict[int, list[int]] = {}
    for draw in range((step - 1) * batch_size, step * batch_size):
        epoch, pos = divmod(draw, num_samples)
        if epoch not in perms:
            if shuffle:
                gen = torch.Generator().manual_seed(seed + epoch)
                perms[epoch] = torch.randperm(num_samples, generator=gen).tolist()
            else:
                perms[epoch] = list(range(num_samples))
        out.append(perms[epoch][pos])
    return out


def pack_samples(samples: list[SFTSample], seq_len: int) -> list[MicroBatch]:
    """Greedy in-order packing into micro-batches of at most `seq_len` tokens; position ids restart per sample."""
    groups: list[list[SFTSample]] = []
    cur: list[SFTSample] = []
    used = 0
    for sample in samples:
        if cur and used + len(sample) > seq_len:
            groups.append(cur)
            cur, used = [], 0
        cur.append(sample)
        used += len(sample)
    if cur:
        groups.append(cur)
    mbs = []
    for group in groups:
        ids = np.concatenate([s.input_ids for s in group])
        num_tokens = len(ids)
        mbs.append(
            MicroBatch(
                input_ids=ids,
                position_ids=np.concatenate([np.arange(len(s)) for s in group]),
                loss_mask=np.concatenate([s.loss_mask for s in group]),
                advantages=np.zeros(num_tokens, np.float32),
                inference_logprobs=np.zeros(num_tokens, np.float32),
                temperature=np.ones(num_tokens, np.float32),
            )
        )
    return mbs


def shared_prefix_micro_batches(
    samples: list[SFTSample], micro_batch_size: int, seq_len: int, pad_id: int = 0
) -> list[MicroBatch | SharedPrefixMicroBatch]:
    """Consecutive groups of `micro_batch_size` samples, each one `SharedPrefixMicroBatch` over the group's common
    prefix (see `trainer.shared_prefix`); a group with no common prefix is packed into `seq_len` micro-batches."""
    out: list[MicroBatch | SharedPrefixMicroBatch] = []
    for i in range(0, len(samples), micro_batch_size):
        group = samples[i : i + micro_batch_size]
        mb = make_shared_prefix_batch([s.input_ids for s in group], [s.loss_mask for s in group], pad_id)
        out.extend([mb] if mb is not None else pack_samples(group, seq_len))
    return out


def shard_micro_batches(mbs: list, rank: int, world_size: int, pad_id: int = 0) -> list:
    """This rank's share: micro-batches dealt longest-first to the rank with the fewest tokens, then padded with
    empty (no loss token) micro-batches so every rank holds the same count."""
    loads = [0] * world_size
    shares: list[list[MicroBatch]] = [[] for _ in range(world_size)]
    for mb in sorted(mbs, key=len, reverse=True):
        rank_idx = min(range(world_size), key=lambda j: (loads[j], len(shares[j])))
        shares[rank_idx].append(mb)
        loads[rank_idx] += len(mb)
    most = max(len(s) for s in shares)
    mine = shares[rank]
    return mine + [MicroBatch.empty_like(1, pad_id) for _ in range(most - len(mine))]
