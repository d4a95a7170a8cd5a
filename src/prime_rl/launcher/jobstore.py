"""Where the nodes of a Slurm `rl` job meet without a shared filesystem (`deployment.shared_fs = false`): a
`torch.distributed.TCPStore` served by node 0's launcher at node 0's address, port `deployment.control_port()`
(`port_base + 0`, a slot node 0 never binds otherwise). `StoreJobDir` offers what `cluster.JobDir` offers through
files (arrival, the plan, finished and failed markers), as store keys holding JSON:

- `node_<i>`: node i arrived (name, address, pid); every node waits until all did;
- `plan`: the launch plan (`plan.RunPlan` as JSON), set by node 0 once the run is prepared;
- `configs`: every file of node 0's `configs/` (name -> TOML text); each node writes them into its own run
  directory with node 0's run directory replaced by its own (`rebase_toml`), since no node reads another's;
- `finished_<i>` / `failed_<i>`: as the files of `cluster.JobDir`;
- `left_<i>`: node i saw the job finish; node 0 serves the store until every node left (or `timeout_s` passed).

A node that loses the store (node 0's launcher gone) stops with an error naming node 0 and the address.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import socket
import time
import tomllib
from pathlib import Path
from typing import Any

from prime_rl.launcher.cluster import SlurmNode
from prime_rl.launcher.errors import LaunchError


class StoreJobDir:
    """The job's meeting point without a shared filesystem (see the module docstring). Node 0 hosts the store bound
    at `bind_host`; every node reaches it at `node.addrs[0]:port`.

    Raises:
        LaunchError: node 0 cannot bind the port, or another node cannot reach node 0 within `timeout_s`."""

    def __init__(self, node: SlurmNode, port: int, timeout_s: float, bind_host: str | None = None):
        import torch.distributed as dist  # the launcher imports torch only for this store

        self.node, self.num_nodes = node, node.num_nodes
        self.address = f"{node.addrs[0]}:{port}"
        master = node.index == 0
        listener = None
        try:
            if master:  # bound to the node's address only (a TCPStore alone listens on every interface)
                host = bind_host or node.addrs[0]
                listener = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
            self.store = dist.TCPStore(node.addrs[0], port, None, master, timeout=dt.timedelta(seconds=timeout_s),
                                       wait_for_workers=False, master_listen_fd=listener.fileno() if listener else None)  # fmt: skip
        except (RuntimeError, OSError) as e:
            if listener is not None:
                listener.close()
            what = "serve" if master else "reach"
            raise LaunchError(
                f"node {node.index} ({node.name}) cannot {what} the control store of node 0 at {self.address} "
                f"(deployment.shared_fs = false; port deployment.port_base + 0): {type(e).__name__}: {e}; choose a "
                "free deployment.port_base, or raise deployment.rendezvous_timeout_s if node 0 starts late"
            ) from None
        if listener is not None:
            listener.detach()  # the store owns the socket now and closes it when it stops
        self.path = f"the control store at {self.address}"  # where markers live, for messages

    # ---- store access ----
    def _call(self, what: str, fn, *args):
        try:
            return fn(*args)
        except RuntimeError as e:  # dist.DistError and the store's connection errors
            raise LaunchError(
                f"node {self.node.index} ({self.node.name}) lost the control store of node 0 at {self.address} "
                f"({what}: {type(e).__name__}: {e}); node 0's launcher stopped: see its log (node 0's "
                "output_dir/node_0/logs/)"
            ) from None

    def _set(self, key: str, data: Any) -> None:
        self._call(f"set {key}", self.store.set, key, json.dumps(data))

    def _has(self, key: str) -> bool:
        return bool(self._call(f"check {key}", self.store.check, [key]))

    def _get(self, key: str) -> Any:
        return json.loads(self._call(f"get {key}", self.store.get, key))

    # ---- the JobDir interface ----
    def arrive(self, node: SlurmNode) -> None:
        import os

        self._set(f"node_{node.index}", {"index": node.index, "name": node.name, "addr": node.addr,
                                         "host": socket.gethostname(), "pid": os.getpid()})  # fmt: skip

    def arrived(self, num_nodes: int) -> list[int]:
        return [i for i in range(num_nodes) if self._has(f"node_{i}")]

    def wait_all_arrived(self, node: SlurmNode, timeout_s: float, output_dir: Path, poll_s: float = 0.2) -> None:
        """Block until every node arrived. Raises LaunchError naming the missing nodes after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self.arrived(node.num_nodes)
            if len(seen) == node.num_nodes or self.failures():
                return
            if time.monotonic() > deadline:
                missing = [f"{i} ({node.names[i]})" for i in range(node.num_nodes) if i not in seen]
                raise LaunchError(f"node {node.index} ({node.name}): node(s) {', '.join(missing)} did not reach "
                                  f"{self.path} within {timeout_s:.0f} s; raise deployment.rendezvous_timeout_s if a "
                                  "node starts late")  # fmt: skip
            time.sleep(poll_s)

    def write_plan(self, plan: dict[str, Any]) -> None:
        self._set("plan", plan)

    def wait_plan(self, timeout_s: float, poll_s: float = 0.2) -> dict[str, Any] | None:
        """The plan node 0 set, or None when a node failed first. Raises LaunchError after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self._has("plan"):
                return self._get("plan")
            if self.failures():
                return None
            if time.monotonic() > deadline:
                raise LaunchError(f"node 0 did not prepare the run within {timeout_s:.0f} s (no plan in {self.path})")
            time.sleep(poll_s)

    def put_configs(self, configs_dir: Path) -> None:
        """Node 0: share every `configs/*.toml` of its run directory."""
        self._set("configs", {p.stem: p.read_text() for p in sorted(Path(configs_dir).glob("*.toml"))})

    def get_configs(self) -> dict[str, str]:
        """The configs node 0 shared (name -> TOML text); set before the plan, so present once the plan is."""
        return self._get("configs")

    def mark_finished(self, node: SlurmNode, processes: list[str]) -> None:
        self._set(f"finished_{node.index}", {"index": node.index, "name": node.name, "processes": processes})

    def finished(self) -> list[int]:
        return [i for i in range(self.num_nodes) if self._has(f"finished_{i}")]

    def mark_failed(self, node: SlurmNode, process: str, what: str, log: str) -> None:
        self._set(f"failed_{node.index}", {"index": node.index, "name": node.name, "process": process,
                                           "what": what, "log": log})  # fmt: skip

    def failures(self) -> list[dict[str, Any]]:
        return [self._get(f"failed_{i}") for i in range(self.num_nodes) if self._has(f"failed_{i}")]

    def leave(self, node: SlurmNode) -> None:
        """Node `node` saw the job end and needs the store no more."""
        try:
            self._set(f"left_{node.index}", {"index": node.index})
        except LaunchError:
            pass  # node 0 already gone: nothing left to tell it

    def close(self, timeout_s: float, poll_s: float = 0.2) -> None:
        """Node 0: serve the store until every node left or `timeout_s` passed, then stop serving it."""
        if self.node.index == 0:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and not all(self._has(f"left_{i}") for i in range(self.num_nodes)):
                time.sleep(poll_s)
        self.store = None  # node 0: the store stops serving (and closes its socket)


def rebase_toml(text: str, old_root: Path, new_root: Path) -> str:
    """A config's TOML `text` with every string that is `old_root` or a path under it moved to `new_root` (node 0's
    configs made this node's: each node keeps its own run directory). Other values are unchanged."""
    import tomli_w

    pattern = re.compile("^" + re.escape(str(old_root)) + r"(?=/|$)")

    def move(value: Any) -> Any:
        if isinstance(value, str):
            return pattern.sub(str(new_root), value, count=1)
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        if isinstance(value, list):
            return [move(v) for v in value]
        return value

    return tomli_w.dumps(move(tomllib.loads(text)))
