"""What one node of a Slurm job knows and shares: its place in the allocation (Slurm's variables) and the job
directory `output_dir/slurm/job_<id>/` on the shared filesystem through which the nodes meet.

Files in the job directory (each written atomically, JSON):
- `node_<i>.json`: node i arrived (name, address, pid). Every node waits until it sees all of them: a node that
  cannot see the others' files does not share `output_dir` with them, and the job stops saying so.
- `plan.json`: the launch plan (`plan.RunPlan` as JSON), written by node 0 once the run is prepared (resume step,
  configs written); the others wait for it and read it back.
- `finished_<i>.json`: node i's trainer / orchestrator exited 0. When every node that runs one has finished,
  every node stops its servers and exits 0.
- `failed_<i>.json`: a process on node i died (which process, how, its log). Every other node stops and exits 1,
  naming that node and process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prime_rl.launcher.errors import LaunchError
from prime_rl.transport.atomic import atomic_write_text


@dataclass(frozen=True)
class SlurmNode:
    """This task's place in the job: `index` (SLURM_PROCID, one task per node), the node `name`
    (SLURMD_NODENAME), `names`/`addrs` of every node in allocation order, and the job id."""

    index: int
    name: str
    names: list[str]
    addrs: list[str]
    job_id: str

    @property
    def num_nodes(self) -> int:
        return len(self.names)

    @property
    def addr(self) -> str:
        return self.addrs[self.index]


def expand_nodelist(nodelist: str) -> list[str]:
    """`node[1-3]` -> ["node1", "node2", "node3"] with `scontrol show hostnames` (Slurm's own expansion).

    Raises:
        LaunchError: scontrol is missing or fails.
    """
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LaunchError(f"cannot expand SLURM_JOB_NODELIST={nodelist!r} with scontrol: {e}") from e
    if out.returncode != 0:
        raise LaunchError(f"`scontrol show hostnames {nodelist}` failed: {out.stderr.strip()}")
    return out.stdout.split()


def node_addr(name: str) -> str:
    """The address other nodes reach node `name` at: Slurm's NodeAddr (`scontrol show node NAME`), else `name`."""
    try:
        out = subprocess.run(["scontrol", "show", "node", name, "-o"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return name
    for tok in out.stdout.split():
        if tok.startswith("NodeAddr="):
            return tok.split("=", 1)[1] or name
    return name


def slurm_node(env: dict[str, str] | None = None) -> SlurmNode:
    """Read this task's place from Slurm's variables. `PRIME_RL_NODE_NAMES` / `PRIME_RL_NODE_ADDRS` (set by the
    rendered sbatch script) save each node the scontrol calls.

    Raises:
        LaunchError: not inside a Slurm job step, or more than one task per node.
    """
    env = dict(os.environ) if env is None else env
    missing = [k for k in ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_JOB_NODELIST") if k not in env]
    if missing:
        raise LaunchError(
            f"not inside a Slurm job step ({', '.join(missing)} unset): multi-node runs start with `rl @ cfg.toml` "
            f"and a [slurm] section, or with `srun --ntasks-per-node=1 python -m prime_rl.cli.rl_node @ cfg.toml` "
            f"inside an allocation"
        )
    names = env.get("PRIME_RL_NODE_NAMES", "").split() or expand_nodelist(env["SLURM_JOB_NODELIST"])
    addrs = env.get("PRIME_RL_NODE_ADDRS", "").split() or [node_addr(n) for n in names]
    ntasks = int(env.get("SLURM_NTASKS", len(names)))
    if ntasks != len(names):
        raise LaunchError(
            f"the job step has {ntasks} tasks on {len(names)} nodes; start one launcher per node "
            f"(srun --ntasks-per-node=1)"
        )
    index = int(env["SLURM_PROCID"])
    name = env.get("SLURMD_NODENAME") or names[index]
    if len(addrs) != len(names):
        raise LaunchError(f"PRIME_RL_NODE_ADDRS has {len(addrs)} entries for {len(names)} nodes")
    return SlurmNode(index=index, name=name, names=names, addrs=addrs, job_id=env["SLURM_JOB_ID"])


class JobDir:
    """The job directory `output_dir/slurm/job_<id>/` and its marker files (see the module docstring)."""

    def __init__(self, output_dir: Path, job_id: str):
        self.path = Path(output_dir) / "slurm" / f"job_{job_id}"

    def _write(self, name: str, data: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path / name, json.dumps(data))

    def _read(self, name: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.path / name).read_text())
        except (OSError, ValueError):
            return None

    def arrive(self, node: SlurmNode) -> None:
        self._write(f"node_{node.index}.json", {"index": node.index, "name": node.name, "addr": node.addr,
                                                "host": socket.gethostname(), "pid": os.getpid()})

    def arrived(self, num_nodes: int) -> list[int]:
        return [i for i in range(num_nodes) if (self.path / f"node_{i}.json").is_file()]

    def wait_all_arrived(self, node: SlurmNode, timeout_s: float, output_dir: Path, poll_s: float = 0.2) -> None:
        """Block until every node's `node_<i>.json` is visible here.

        Raises:
            LaunchError: some are still missing after `timeout_s` (the run directory is not shared, or a node
                never started): names the missing nodes and the directory.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self.arrived(node.num_nodes)
            if len(seen) == node.num_nodes:
                return
            if self.failures():
                return  # the caller reports the failure
            if time.monotonic() > deadline:
                missing = [f"{i} ({node.names[i]})" for i in range(node.num_nodes) if i not in seen]
                raise LaunchError(
                    f"node {node.index} ({node.name}) does not see the files of node(s) {', '.join(missing)} in "
                    f"{self.path} after {timeout_s:.0f} s: output_dir ({output_dir}) must be on a filesystem every "
                    f"node shares (a multi-node run moves rollouts and weights through it); put it on the shared "
                    f"filesystem, or raise deployment.rendezvous_timeout_s if a node starts late"
                )
            time.sleep(poll_s)

    def write_plan(self, plan: dict[str, Any]) -> None:
        self._write("plan.json", plan)

    def wait_plan(self, timeout_s: float, poll_s: float = 0.2) -> dict[str, Any] | None:
        """The plan node 0 wrote, or None when a node failed first.

        Raises:
            LaunchError: nothing after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            plan = self._read("plan.json")
            if plan is not None:
                return plan
            if self.failures():
                return None
            if time.monotonic() > deadline:
                raise LaunchError(f"node 0 did not prepare the run within {timeout_s:.0f} s (no {self.path}/plan.json)")
            time.sleep(poll_s)

    def mark_finished(self, node: SlurmNode, processes: list[str]) -> None:
        self._write(f"finished_{node.index}.json", {"index": node.index, "name": node.name, "processes": processes})

    def finished(self) -> list[int]:
        return sorted(int(p.stem.split("_")[1]) for p in self.path.glob("finished_*.json"))

    def mark_failed(self, node: SlurmNode, process: str, what: str, log: str) -> None:
        self._write(f"failed_{node.index}.json", {"index": node.index, "name": node.name, "process": process,
                                                  "what": what, "log": log})

    def failures(self) -> list[dict[str, Any]]:
        out = []
        for file in sorted(self.path.glob("failed_*.json")):
            record = self._read(file.name)
            if record is not None:
                out.append(record)
        return out
