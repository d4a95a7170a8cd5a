"""Policy versions over the weight group (`weight_transport.type = "collective"`) into a real vLLM server: this test
process plays trainer rank 0 and broadcasts a folder's tensors to the server's worker (gloo on CPU) through
`POST /update_weights {"transport": "collective", ...}`. After each update the server's outputs must equal a fresh
server on the same weights (tests/inference/reload_check.py, the check the file path passes: greedy ids, seeded
samples, logprobs within 1e-5), for an untied and a tied output head, and the version must be recorded. A transfer
that stops mid-way must be reported (500) and leave the weights and the version as they were."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import httpx
import pytest
from safetensors.torch import load_file
from tests.inference.reload_check import check_reload_equals_fresh, outputs

from prime_rl.config.orchestrator import ClientConfig
from prime_rl.inference.client import InferenceClient
from prime_rl.ports import free_port
from prime_rl.transport.weight_collective import GroupSpec, WeightGroup

pytestmark = pytest.mark.slow


class CollectiveClient:
    """An `InferenceClient` whose `update_weights(path, version)` sends the folder's tensors over a weight group of
    two ranks (this process = rank 0, the server's one worker = rank 1) instead of asking the server to read them."""

    def __init__(self, client: InferenceClient, base_url: str):
        self.client, self.base_url = client, base_url
        self.spec = GroupSpec(f"tcp://127.0.0.1:{free_port()}", world_size=2, timeout_s=120)
        self.group: WeightGroup | None = None
        self.answers: list[dict] = []

    def __getattr__(self, name):
        return getattr(self.client, name)

    def body(self, version: int) -> dict:
        group = {"address": self.spec.address, "world_size": 2, "timeout_s": self.spec.timeout_s, "rank_offset": 1,
                 "workers_per_server": 1}  # fmt: skip
        return {"version": version, "transport": "collective", "group": group}

    async def update_weights(self, path: str, version: int) -> None:
        sd = load_file(str(Path(path) / "model.safetensors"))
        errors: list[BaseException] = []

        def send() -> None:
            try:
                if self.group is None:
                    self.group = WeightGroup.open(self.spec, 0)
                self.group.send(version, sd)
            except BaseException as e:  # noqa: BLE001 - re-raised by the test
                errors.append(e)

        sender = threading.Thread(target=send)
        sender.start()
        async with httpx.AsyncClient(timeout=300) as http:
            r = await http.post(f"{self.base_url}/update_weights", json=self.body(version))
        await asyncio.to_thread(sender.join)
        assert not errors, errors
        assert r.status_code == 200, r.text
        self.answers.append(r.json())


def prompts_of(model_dir: Path) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return [list(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False))
            for t in ("Reverse the word: hello", "Go left, then right.")]  # fmt: skip


def tiny(seed: int, tied: bool) -> Path:
    from prime_rl.models.tiny import cached_tiny_model

    return cached_tiny_model(hidden=64, layers=2, seed=seed, tie_embeddings=tied)


def folders(tied: bool, tmp_path_factory) -> tuple[Path, Path]:
    """(the server's fresh folder, another folder of the same shapes whose greedy output differs). Tied: a random
    tied model repeats its last token whatever its seed, so the other folder is one trainer step on it
    (tests/inference/test_tied_reload.py's step_1, built once per session)."""
    if not tied:
        return tiny(0, False), tiny(1, False)
    from tests.inference.test_tied_reload import build_step_1

    return build_step_1(tmp_path_factory), tiny(0, True)


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
async def test_a_collective_update_equals_a_fresh_server(shared_vllm, tmp_path_factory, tied):
    fresh, other = folders(tied, tmp_path_factory)
    assert json.loads((fresh / "config.json").read_text())["tie_word_embeddings"] is tied
    server = shared_vllm.get(fresh)
    eos = json.loads((fresh / "config.json").read_text()).get("eos_token_id")
    async with InferenceClient(ClientConfig(base_url=[server.base_url], max_retries=1)) as inner:
        client = CollectiveClient(inner, server.base_url)
        try:
            got = await check_reload_equals_fresh(client, fresh, other, prompts_of(fresh), n_tokens=16, tol=1e-5,
                                                  stop={eos} if isinstance(eos, int) else set())  # fmt: skip
            assert got["tokens"] > 0
            first, second = client.answers
            assert first["path"] == f"collective:{client.spec.address}" and first["version"] == 1
            assert second["version"] == 2 and first["num_tensors"] == second["num_tensors"] > 0
            assert second["refreshed"] == (["lm_head", "model.embed_tokens"] if tied else [])
            state = httpx.get(f"{server.base_url}/policy_version", timeout=30).json()
            assert state == {"version": 2, "path": f"collective:{client.spec.address}"}
            sample = await inner.generate(prompts_of(fresh)[0], _sampling())
            assert sample.policy_version == 2  # the version is recorded on the tokens sampled after the update
        finally:
            if client.group is not None:
                client.group.close()


def _sampling():
    from prime_rl.config.orchestrator import SamplingConfig

    return SamplingConfig(temperature=1.0, max_completion_tokens=4, seed=1)


async def test_a_transfer_that_stops_mid_way_changes_nothing(shared_vllm):
    """The trainer announces a version, sends its first bucket and leaves: the server answers 500 naming the
    failure, keeps its version, and samples exactly as before (no tensor of the half-sent version was loaded)."""
    fresh, other = tiny(0, False), tiny(1, False)
    server = shared_vllm.get(fresh)
    prompts = prompts_of(fresh)
    async with InferenceClient(ClientConfig(base_url=[server.base_url], max_retries=1)) as inner:
        before = await outputs(inner, prompts, 8)
        client = CollectiveClient(inner, server.base_url)
        sd = load_file(str(other / "model.safetensors"))

        def send_half() -> None:
            group = WeightGroup.open(client.spec, 0)
            names = list(sd)
            manifest = {"version": 5, "names": names, "dtypes": [str(sd[n].dtype).removeprefix("torch.") for n in names],
                        "shapes": [list(sd[n].shape) for n in names], "bucket_bytes": 1}  # fmt: skip
            group._store.set("manifest/5", json.dumps(manifest))
            group._bcast(sd[names[0]].reshape(-1).clone())  # one tensor of many, then gone
            group.close()

        sender = threading.Thread(target=send_half)
        sender.start()
        async with httpx.AsyncClient(timeout=300) as http:
            r = await http.post(f"{server.base_url}/update_weights", json=client.body(5))
        await asyncio.to_thread(sender.join)
        assert r.status_code == 500 and "policy version 5" in r.text, r.text
        state = httpx.get(f"{server.base_url}/policy_version", timeout=30).json()
        assert state["version"] == 0
        after = await outputs(inner, prompts, 8)
    assert after == before, "a half-sent version changed the server's outputs"
