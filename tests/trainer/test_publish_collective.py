"""The trainer's side of `weight_transport.type = "collective"`: `Engine.publish` marks `weights/step_N/` (a
`transport.json` and `STABLE`, no model file) and broadcasts the very tensors the file path would write (HF names, the
tied head left out) to a receiving process that plays the inference worker."""

from __future__ import annotations

import json
import multiprocessing as mp

import torch
from safetensors.torch import load_file

from prime_rl.ports import free_port
from prime_rl.transport.weight_collective import GroupSpec, WeightGroup


def _worker(spec: GroupSpec, out: str, queue) -> None:
    from safetensors.torch import save_file

    group = WeightGroup.open(spec, 1)
    got = group.receive(1)
    save_file({name: t.contiguous() for name, t in got}, out)  # tensors leave the process as a file
    queue.put([name for name, _ in got])
    group.close()


def test_publish_sends_what_the_file_path_writes(tmp_path):
    from tests.trainer.helpers import trainer_config

    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.trainer.engine import Engine, EngineConfig

    base = cached_tiny_model(hidden=64, layers=2, seed=0, tie_embeddings=True)
    port = free_port()
    cfg = trainer_config(base, tmp_path, weight_transport={"type": "collective", "port": port, "inference_workers": 1,
                                                           "timeout_s": 60})  # fmt: skip
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    worker = ctx.Process(target=_worker, args=(GroupSpec(f"tcp://127.0.0.1:{port}", 2, 60), str(tmp_path / "got.safetensors"), queue), daemon=True)
    worker.start()
    eng = Engine(EngineConfig.from_config(cfg))
    try:
        out = eng.publish(1)
    finally:
        eng.close()
    names = queue.get(timeout=60)
    got = load_file(str(tmp_path / "got.safetensors"))
    assert sorted(names) == sorted(got)
    worker.join(timeout=30)
    assert out == tmp_path / "weights" / "step_1"
    assert sorted(p.name for p in out.iterdir()) == ["STABLE", "transport.json"]
    meta = json.loads((out / "transport.json").read_text())
    assert meta["transport"] == "collective" and meta["version"] == 1 and meta["num_tensors"] == len(got)
    want = load_file(str(base / "model.safetensors"))  # the untrained policy: the base folder's tensors
    assert set(got) == set(want) and "lm_head.weight" not in got
    for name, t in want.items():
        assert torch.equal(got[name], t), name
