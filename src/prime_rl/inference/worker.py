"""vLLM worker extension (`--worker-extension-cls prime_rl.inference.worker.PrimeWorkerExtension`).

vLLM mixes this class into every worker, so its methods run next to the model on each (tensor-parallel) rank and
are reachable through `engine_client.collective_rpc(method, args=...)` (our `/update_weights` route) or the dev
route `POST /collective_rpc`. Methods take and return JSON-friendly values only (no pickle over sockets).
"""

from __future__ import annotations

import hashlib
import time


class PrimeWorkerExtension:
    """Weight reload from a published policy directory, plus a fingerprint of the live weights for checks."""

    def prime_load_weights(self, path: str) -> dict:
        """Reload all model weights in place from the safetensors files in `path`.

        Uses vLLM's layer-wise in-place reload (`Worker.reload_weights` with checkpoint-format tensors), which
        re-runs each layer's post-load processing (CPU weight repacking), so results equal a fresh engine on the
        same weights. Raises WeightsDirError (bad path) or whatever vLLM raises on a name/shape mismatch. The caller
        must reset the prefix cache afterwards. Returns {"seconds": float, "num_tensors": int}.
        """
        from prime_rl.inference.weights import iter_safetensors

        t0 = time.perf_counter()
        count = 0

        def counted():
            nonlocal count
            for item in iter_safetensors(path):
                count += 1
                yield item

        self.reload_weights(weights_iterator=counted(), is_checkpoint_format=True)  # type: ignore[attr-defined]
        return {"seconds": time.perf_counter() - t0, "num_tensors": count}

    def prime_weights_fingerprint(self) -> str:
        """SHA-256 over the names, shapes and bytes of this rank's parameters (kernel format), for tests/debug."""
        import torch

        h = hashlib.sha256()
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        for name, p in sorted(model.named_parameters()):
            h.update(name.encode())
            h.update(str(tuple(p.shape)).encode())
            h.update(p.detach().to("cpu", torch.float32).contiguous().numpy().tobytes())
        return h.hexdigest()
