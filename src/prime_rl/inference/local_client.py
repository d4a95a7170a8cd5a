"""In-process sampling with transformers `generate`: the `transformers` inference backend (no server).

`eval --backend transformers` uses it to score a checkpoint folder directly (no vLLM start-up, no port). Concurrent
`generate` calls are batched: requests that wait while a batch runs are sampled together in the next
`model.generate` call (left-padded), grouped by sampling parameters and stop ids. Slower per token than vLLM, but
it needs nothing but the model folder.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from prime_rl.config.orchestrator import SamplingConfig
from prime_rl.inference.backend import GenerateResult, InferenceError, completion_budget
from prime_rl.monitor.logger import get_logger

if TYPE_CHECKING:
    from prime_rl.config.orchestrator import EvalCommandConfig, OrchestratorConfig

log = get_logger("inference.local")


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingConfig
    max_tokens: int
    stop_ids: tuple[int, ...]
    future: asyncio.Future = field(repr=False)

    @property
    def key(self) -> tuple:
        sampling = self.sampling
        return (sampling.temperature, sampling.top_p, sampling.top_k, self.stop_ids)


class TransformersClient:
    """Samples completions of token-id prompts with a local transformers model (the `InferenceBackend` contract of
    `prime_rl.inference.backend`; it cannot load new weights, so it serves evals, not training).

    Args:
        model_dir: a Hugging Face model folder (e.g. `outputs/.../weights/step_N`).
        max_batch: most requests sampled in one `model.generate` call.
        seed: seeds torch once; rows are reproducible for the same requests in the same arrival order.
        threads: torch intra-op threads (None: torch's default).

    Logprobs are `log_softmax(logits / T)` of each sampled token (T = 1 for temperature 0, greedy decoding), as
    the trainer computes them. Raises OSError/ValueError from transformers when the folder is not a model.
    """

    loads_weights = False

    def __init__(self, model_dir: str | Path, *, max_batch: int = 64, seed: int = 0, threads: int | None = None):
        from transformers import AutoModelForCausalLM

        self.model_dir = Path(model_dir)

        if threads is not None:
            torch.set_num_threads(threads)
        torch.manual_seed(seed)
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else self.model.config.eos_token_id
        self.eos_ids: list[int] = [eos] if isinstance(eos, int) else list(eos or [])
        pad = gen.pad_token_id if gen.pad_token_id is not None else self.model.config.pad_token_id
        self.pad_id: int = pad if pad is not None else (self.eos_ids[0] if self.eos_ids else 0)
        self.max_batch = max_batch
        self.batches = 0  # model.generate calls so far (tests, logs)
        self._queue: list[_Request] = []
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None

    @classmethod
    def from_config(cls, cfg: OrchestratorConfig | EvalCommandConfig) -> TransformersClient:
        """`model.name` (a local folder) loaded with `evals`' `backend` settings (type transformers: max_batch,
        threads) and `seed`.

        Raises:
            FileNotFoundError: `model.name` is not a folder (names the field).
            ValueError: `cfg` has no transformers backend settings (the orchestrator's config).
        """
        from prime_rl.config.eval_backend import TransformersBackendConfig

        if not isinstance(cfg.backend, TransformersBackendConfig):
            raise ValueError("backend = 'transformers' samples in the evals process only (its backend.type = "
                             "\"transformers\"); the orchestrator samples from the inference server")
        if not Path(cfg.model.name).is_dir():
            raise FileNotFoundError(f"model.name = {cfg.model.name!r}: no such model folder (backend = transformers "
                                    "loads a local Hugging Face folder, e.g. outputs/demo/sft/weights/step_N)")
        log.info("sampling in this process with transformers (backend = transformers): %s", cfg.model.name)
        return cls(cfg.model.name, max_batch=cfg.backend.max_batch, seed=cfg.seed, threads=cfg.backend.threads)

    async def wait_healthy(self, timeout_s: float | None = None) -> None:
        """Ready at once: the model was loaded by the constructor."""

    async def check_model(self, name: str) -> None:
        """Raise ValueError unless `name` is the folder this client loaded."""
        if Path(name).resolve() != self.model_dir.resolve():
            raise ValueError(f"model.name = {name!r}, but the transformers backend loaded {str(self.model_dir)!r}")

    async def update_weights(self, path: str, version: int) -> None:
        """Not supported (`loads_weights` is False): raises NotImplementedError."""
        raise NotImplementedError("the transformers backend cannot load new weights (eval only)")

    def check_alive(self) -> None:
        """The model lives in this process: it can always sample (never raises)."""

    async def context_length(self) -> int | None:
        """The model's `max_position_embeddings` (tokens), or None when its config has none."""
        max_len = getattr(self.model.config, "max_position_embeddings", None)
        return max_len if isinstance(max_len, int) else None

    async def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingConfig,
        *,
        rollout_id: str | None = None,
        stop_token_ids: list[int] | None = None,
        max_tokens: int | None = None,
    ) -> GenerateResult:
        """Sample one completion of `prompt_ids`; stops at the model's eos ids, `stop_token_ids` and `max_tokens`
        (default `sampling.max_completion_tokens`). Raises ValueError on an empty prompt or max_tokens < 1,
        InferenceError when transformers fails."""
        budget = completion_budget(prompt_ids, sampling, max_tokens)
        loop = asyncio.get_running_loop()
        stops = tuple(sorted(set(stop_token_ids or [])))
        req = _Request(list(prompt_ids), sampling, budget, stops, loop.create_future())
        if self._worker is None or self._worker.done():
            self._wake = asyncio.Event()
            self._worker = loop.create_task(self._run())
        self._queue.append(req)
        assert self._wake is not None
        self._wake.set()
        return await req.future

    async def aclose(self) -> None:
        """Stop the batching task; requests still waiting get InferenceError."""
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        for request in self._queue:
            if not request.future.done():
                request.future.set_exception(InferenceError("client closed"))
        self._queue.clear()

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(0)  # requests scheduled in the same loop iteration join this batch
            while self._queue:
                key = self._queue[0].key
                batch = [r for r in self._queue if r.key == key][: self.max_batch]
                for request in batch:
                    self._queue.remove(request)
                try:
                    results = await asyncio.to_thread(self._sample, batch)
                except Exception as e:  # noqa: BLE001 - every waiter gets the error
                    for request in batch:
                        if not request.future.done():
                            request.future.set_exception(InferenceError(f"transformers generate failed: {e!r}"))
                    continue
                for request, res in zip(batch, results, strict=True):
                    if not request.future.done():
                        request.future.set_result(res)

    @torch.no_grad()
    def _sample(self, batch: list[_Request]) -> list[GenerateResult]:
        """One left-padded `model.generate` call for `batch` (same sampling parameters and stop ids)."""
        sampling = batch[0].sampling
        stops = sorted(set(self.eos_ids) | set(batch[0].stop_ids))
        width = max(len(r.prompt_ids) for r in batch)
        dev = self.model.device  # CPU, or wherever the caller moved the model (scripts/gpu_check.py)
        ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long, device=dev)
        mask = torch.zeros((len(batch), width), dtype=torch.long, device=dev)
        for i, request in enumerate(batch):
            ids[i, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids, device=dev)
            mask[i, width - len(request.prompt_ids) :] = 1
        greedy = sampling.temperature == 0
        knobs = {"do_sample": False} if greedy else {
            "do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p,
            "top_k": max(sampling.top_k, 0)}
        out = self.model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=max(r.max_tokens for r in batch),
            eos_token_id=stops, pad_token_id=self.pad_id, output_logits=True, return_dict_in_generate=True, **knobs,
        )
        self.batches += 1
        new = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1).float() / (1.0 if greedy else sampling.temperature)  # [B, n, V]
        lps = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)  # [B, n]
        results = []
        stop_set = set(stops)
        for i, request in enumerate(batch):
            toks = new[i, : request.max_tokens].tolist()
            end = next((j + 1 for j, t in enumerate(toks) if t in stop_set), None)
            finish = "stop" if end is not None else "length"
            toks = toks[:end] if end is not None else toks
            results.append(GenerateResult(request.prompt_ids, toks, lps[i, : len(toks)].tolist(), finish, 0))
        return results
