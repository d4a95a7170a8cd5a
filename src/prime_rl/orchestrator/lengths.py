"""Pre-flight length checks: do the sources' first prompts leave room to sample within `seq_len`?

A rollout whose first prompt (messages + tools + generation prompt, as the renderer tokenizes it) has `seq_len`
tokens or more can never be sampled; the agent loop masks it (`prompt_too_long`, never a reward of 0). Before a run
starts, `check_prompt_lengths` renders an evenly spaced sample of each source's tasks: when none of a source's sampled
prompts fits, the run is refused (`PromptTooLong`, naming the source, the lengths and the fix); when some do not, a
warning says how many. Called by the orchestrator at start and by `rl`'s pre-flight (before anything is started).
"""

from __future__ import annotations

from typing import Any

from prime_rl.monitor.logger import get_logger
from prime_rl.orchestrator.agent import initial_prompt_ids
from prime_rl.orchestrator.sources import TaskSource

log = get_logger("orchestrator.lengths")


class PromptTooLong(ValueError):
    """No sampled first prompt of a source fits in `seq_len` (the message names the source and the lengths)."""


def sample_evenly(size: int, num_picks: int) -> list[int]:
    """`min(size, num_picks)` indices spread evenly over `range(size)` (first and last included when
    `num_picks` >= 2)."""
    if size <= num_picks:
        return list(range(size))
    if num_picks == 1:
        return [0]
    return sorted({round(i * (size - 1) / (num_picks - 1)) for i in range(num_picks)})


def prompt_lengths(source: TaskSource, split: str, renderer: Any, sample: int) -> dict[str, int]:
    """`{task_id: first-prompt tokens}` of an evenly spaced sample of `sample` tasks of `source`'s `split`."""
    tasks = source.tasks(split)
    return {tasks[i].task_id: len(initial_prompt_ids(renderer, tasks[i], source.name))
            for i in sample_evenly(len(tasks), sample)}  # fmt: skip


def check_prompt_lengths(
    sources: list[tuple[TaskSource, str]], renderer: Any, seq_len: int, *, sample: int = 16, field: str = "seq_len"
) -> dict[str, int]:
    """Check `(source, split)` pairs; returns the longest sampled prompt per source name.

    Raises:
        PromptTooLong: every sampled prompt of a source has >= `seq_len` tokens (nothing could be sampled).
    """
    longest = {}
    for src, split in sources:
        lens = prompt_lengths(src, split, renderer, sample)
        if not lens:
            continue
        longest[src.name] = max(lens.values())
        over = {t: n for t, n in lens.items() if n >= seq_len}
        if len(over) == len(lens):
            raise PromptTooLong(
                f"source {src.name!r} ({split} split): all {len(lens)} sampled first prompts have at least {field} = "
                f"{seq_len} tokens ({min(lens.values())}-{max(lens.values())}), so no rollout could sample a token; "
                f"raise {field} (and inference.vllm.max_model_len) above {max(lens.values())} plus the completion "
                "budget, or shorten the prompts"
            )
        if over:
            first = next(iter(over))
            log.warning(
                "source %r (%s split): %d of %d sampled first prompts have >= %s = %d tokens (e.g. task %r, %d tokens); "
                "their rollouts will be masked as prompt_too_long", src.name, split, len(over), len(lens), field,
                seq_len, first, over[first],
            )
    return longest
