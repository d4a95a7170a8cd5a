"""The weight watcher's log line says how each policy version reached the inference servers: read from
`weights/step_N/` (filesystem transport), or received over the weight group (collective), learned from the
version's STABLE marker or from trainer rank 0's announcement over the rollout channel (no directory on this node
then). The orchestrator names the weight group's address when its client joins one."""

from __future__ import annotations

import logging

from tests.orchestrator.fakes import CounterEnv

from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.inference.client import InferenceClient
from prime_rl.orchestrator.main import Orchestrator
from prime_rl.orchestrator.policy_watch import WeightWatcher
from prime_rl.orchestrator.sources import InProcessSource
from prime_rl.orchestrator.types import PolicyVersion
from prime_rl.transport.atomic import atomic_write_dir

GROUP = "tcp://10.0.0.2:29524"


async def _load_one(tmp_path, caplog, **watcher_kw) -> list[str]:
    loaded: list[tuple[str, int]] = []

    async def load(path: str, version: int) -> None:
        loaded.append((path, version))

    watcher = WeightWatcher(tmp_path / "weights", load, PolicyVersion(0), **watcher_kw)
    atomic_write_dir(tmp_path / "weights" / "step_1", lambda d: (d / "transport.json").write_text("{}"))  # + STABLE
    with caplog.at_level(logging.INFO, logger="prime_rl.orchestrator.weights"):
        assert await watcher.poll_once() == 1
    assert loaded == [(str(tmp_path / "weights/step_1"), 1)]
    return [r.getMessage() for r in caplog.records if r.name == "prime_rl.orchestrator.weights"]


async def test_filesystem_versions_are_logged_with_their_directory(tmp_path, caplog):
    (line,) = await _load_one(tmp_path, caplog)
    assert line.startswith(f"loaded policy version 1 from {tmp_path / 'weights/step_1'} in ")


async def test_collective_versions_ready_on_disk_name_the_weight_group(tmp_path, caplog):
    (line,) = await _load_one(tmp_path, caplog, via=GROUP)
    assert line.startswith(f"loaded policy version 1 over the weight group at {GROUP} "
                           f"(ready at {tmp_path / 'weights/step_1'}) in ")  # fmt: skip


async def test_announced_versions_name_the_weight_group_and_the_announcement(tmp_path, caplog):
    loaded: list[int] = []

    async def load(path: str, version: int) -> None:
        loaded.append(version)

    watcher = WeightWatcher(tmp_path / "weights", load, PolicyVersion(0), via=GROUP)
    watcher.announced = lambda: 2
    with caplog.at_level(logging.INFO, logger="prime_rl.orchestrator.weights"):
        assert await watcher.poll_once() == 2
    (line,) = [r.getMessage() for r in caplog.records if r.name == "prime_rl.orchestrator.weights"]
    assert line.startswith(f"loaded policy version 2 over the weight group at {GROUP} (announced by trainer rank 0 "
                           "over the rollout channel) in ")  # fmt: skip
    assert "step_2" not in line and loaded == [2] and not (tmp_path / "weights").exists()


def test_the_orchestrator_names_its_clients_weight_group(tmp_path):
    def orchestrator(**weights) -> Orchestrator:
        cfg = OrchestratorConfig(output_dir=tmp_path, weight_transport=weights)
        return Orchestrator(cfg, client=InferenceClient.from_config(cfg), renderer=None,
                            train_sources=[InProcessSource("counter", CounterEnv(4))])  # fmt: skip

    collective = orchestrator(type="collective", host="10.0.0.2", port=29524, inference_workers=1)
    assert collective.watcher.via == GROUP
    assert orchestrator().watcher.via is None
