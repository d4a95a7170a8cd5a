"""`inference @ config.toml [--dotted.flags]`: the inference server."""

from __future__ import annotations

from prime_rl.cli.command import Command

main = Command("inference", "prime_rl.config.inference:InferenceConfig", "prime_rl.inference.server:run",
               "the inference server (vLLM with the prime-rl worker extension)",
               user_errors=("prime_rl.models.hub:ModelNotFoundError", FileNotFoundError, "prime_rl.ports:PortInUseError"),
               common=("model.name", "server.host", "server.port", "vllm.max_model_len", "vllm.gpu_memory_utilization",
                       "vllm.tensor_parallel_size", "vllm.enforce_eager"))  # fmt: skip

if __name__ == "__main__":
    main()
