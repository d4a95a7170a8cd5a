"""The control store of a multi-node run without a shared filesystem (`launcher/jobstore.py`): two nodes meet,
share the plan and node 0's configs (rebased into each node's own run directory), see each other's finished and
failed markers; a node that loses node 0's store stops naming it."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import pytest

from prime_rl.launcher.cluster import SlurmNode
from prime_rl.launcher.errors import LaunchError
from prime_rl.launcher.jobstore import StoreJobDir, rebase_toml
from prime_rl.ports import free_port


def eventually(fn, want, timeout_s: float = 5.0):
    """`fn()` once it equals `want` (a store's set from one connection reaches another's reads a moment later)."""
    deadline = time.monotonic() + timeout_s
    while (got := fn()) != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return got


def _nodes(n: int = 2) -> list[SlurmNode]:
    names = [f"node{i + 1}" for i in range(n)]
    return [SlurmNode(index=i, name=names[i], names=names, addrs=["127.0.0.1"] * n, job_id="9") for i in range(n)]


def test_two_nodes_meet_share_plan_configs_and_markers(tmp_path):
    head, other = _nodes()
    port = free_port()
    store0 = StoreJobDir(head, port, timeout_s=10)
    store1 = StoreJobDir(other, port, timeout_s=10)
    store0.arrive(head)
    assert eventually(lambda: store1.arrived(2), [0]) == [0]
    with pytest.raises(LaunchError, match=r"node\(s\) 1 \(node2\) did not reach the control store at 127.0.0.1"):
        store0.wait_all_arrived(head, 0.3, tmp_path)
    store1.arrive(other)
    store0.wait_all_arrived(head, 5, tmp_path)
    configs = tmp_path / "node_0/configs"
    configs.mkdir(parents=True)
    (configs / "trainer.toml").write_text(f'output_dir = "{tmp_path}/node_0"\n[x]\nlog = "{tmp_path}/node_0/logs/a.log"\n')
    store0.put_configs(configs)
    store0.write_plan({"run_dir": str(tmp_path / "node_0")})
    assert store1.wait_plan(5) == {"run_dir": str(tmp_path / "node_0")}
    got = store1.get_configs()
    assert list(got) == ["trainer"]
    moved = tomllib.loads(rebase_toml(got["trainer"], tmp_path / "node_0", tmp_path / "node_1"))
    assert moved == {"output_dir": f"{tmp_path}/node_1", "x": {"log": f"{tmp_path}/node_1/logs/a.log"}}
    assert store0.finished() == [] and store0.failures() == []
    store1.mark_finished(other, ["trainer"])
    store1.mark_failed(other, "trainer", "died (exit code 1)", "/l")
    assert eventually(store0.finished, [1]) == [1]
    failed = {"index": 1, "name": "node2", "process": "trainer", "what": "died (exit code 1)", "log": "/l"}
    assert eventually(store0.failures, [failed]) == [failed]
    store1.leave(other)
    store0.leave(head)
    store0.close(timeout_s=5)  # every node left: returns at once
    with pytest.raises(LaunchError, match="node 1 \\(node2\\) lost the control store of node 0 at 127.0.0.1"):
        for _ in range(50):  # the client notices the closed listener on its next requests
            store1.finished()
    store1.close(timeout_s=0)


def test_a_node_that_cannot_reach_node_0_says_so():
    _, other = _nodes()
    with pytest.raises(LaunchError, match=r"node 1 \(node2\) cannot reach the control store of node 0 .*port_base"):
        StoreJobDir(other, free_port(), timeout_s=0.5)


def test_rebase_moves_only_paths_under_the_old_root():
    text = 'a = "/r/node_0"\nb = "/r/node_0/logs/x"\nc = "/r/node_01/y"\nd = "x /r/node_0"\ne = 3\nf = ["/r/node_0/z"]\n'
    out = tomllib.loads(rebase_toml(text, Path("/r/node_0"), Path("/r/node_2")))
    assert out == {"a": "/r/node_2", "b": "/r/node_2/logs/x", "c": "/r/node_01/y", "d": "x /r/node_0", "e": 3,
                   "f": ["/r/node_2/z"]}  # fmt: skip
