"""Parallel sampling: one generate request with `n` samples for the rollouts that ask for the same prompt at once.

The members of a group start from the same task, so their first turns send the same prompt ids with the same
sampling settings; only the per-(rollout, turn) seed differs. With `client.parallel_sampling = true` the inference
client hands each generate call to a `ParallelSampler`, which holds it until the running event-loop iteration ends
(`loop.call_soon`: the group's rollouts, started together, all reach their first `generate` in that iteration) and
then sends every call with the same prompt and settings as ONE request with `n` = their count: vLLM's parallel
sampling (`SamplingParams.n`), which prefills the prompt once and returns `n` choices. Calls that are alone in
their iteration (later turns: each rollout's prompt differs) go out as they are, so nothing waits for a call that
may never come. A batch of more than `MAX_N` calls (identical prompts across many groups) is sent as several
requests of at most `MAX_N` samples each, below vLLM's `max_num_seqs` default (a request with n above the server's
`max_num_seqs` is refused with 400, naming both).

Which sample each rollout gets is fixed by the call alone, not by arrival order: the calls of one request are
sorted by rollout id; the request carries the first one's seed, and vLLM seeds choice `i` with `seed + i`
(`vllm.v1.engine.parallel_sampling`); choice `i` goes to the `i`-th call. A seeded run is therefore reproducible
with the same setting, but samples differently from per-rollout requests (`parallel_sampling = false`), whose
seeds are hashed per (rollout, turn).

It pays where vLLM's per-request cost dominates: short completions of a shared prompt (recorded numbers in
docs/results/).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from prime_rl.inference.backend import GenerateResult


@dataclass
class Call:
    """One `generate` call waiting to be sent: its rollout id (routing, order), its prompt list (handed back as
    `GenerateResult.prompt_ids`), its sampling params (JSON dict, per-call seed included) and its future."""

    rollout_id: str | None
    prompt: list[int]
    params: dict[str, Any]
    future: asyncio.Future = field(repr=False)


MAX_N = 64  # the most samples one request asks for

# send(calls) -> one result per call, in the order of `calls` (sorted by `order_key`); one request with n = len(calls)
Sender = Callable[[list[Call]], Awaitable[list[GenerateResult]]]


def order_key(call: Call) -> str:
    """The order of a request's calls (choice i goes to call i): by rollout id; calls without one sort first."""
    return call.rollout_id or ""


class ParallelSampler:
    """Batches `submit` calls of one event-loop iteration by (prompt ids, sampling params but the seed, stop ids)
    and sends each batch with `send` (see the module docstring). Not thread-safe: one event loop."""

    def __init__(self, send: Sender):
        self._send = send
        self._pending: dict[tuple, list[Call]] = {}
        self._tasks: set[asyncio.Task] = set()
        self.requests = 0  # requests sent
        self.samples = 0  # calls answered through them

    async def submit(self, rollout_id: str | None, prompt: list[int], params: dict[str, Any]) -> GenerateResult:
        """Queue one call and wait for its sample. Raises what the request raised (every call of the request gets
        the same error)."""
        key = (tuple(prompt), tuple(sorted((k, _hashable(v)) for k, v in params.items() if k != "seed")))
        loop = asyncio.get_running_loop()
        call = Call(rollout_id, prompt, params, loop.create_future())
        batch = self._pending.get(key)
        if batch is None:
            self._pending[key] = batch = []
            loop.call_soon(self._flush, key)
        batch.append(call)
        return await call.future

    def _flush(self, key: tuple) -> None:
        calls = sorted(self._pending.pop(key), key=order_key)
        for i in range(0, len(calls), MAX_N):
            task = asyncio.ensure_future(self._run(calls[i : i + MAX_N]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, calls: list[Call]) -> None:
        live = [c for c in calls if not c.future.done()]  # a caller cancelled before the send needs no sample
        if not live:
            return
        self.requests += 1
        self.samples += len(live)
        try:
            results = await self._send(live)
        except asyncio.CancelledError:  # the client is closing: its callers are cancelled too
            for call in live:
                call.future.cancel()
            raise
        except Exception as e:  # noqa: BLE001 - handed to every waiting caller
            for call in live:
                if not call.future.done():
                    call.future.set_exception(e)
            return
        for call, result in zip(live, results, strict=True):
            if not call.future.done():
                call.future.set_result(result)


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
