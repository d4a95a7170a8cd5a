"""Benchmark: GridSim rollouts (seed + tool + verify) per second through `env-server serve` with 64 concurrent
clients, p50/p99 rollout latency, side by side with the same episodes in-process.

    .venv/bin/python benchmarks/env_server.py [--clients 64] [--seconds 10] [--port 0]

Starts the server as a subprocess (the real CLI) on 127.0.0.1, drives it with `NemoGymClient` (the product's
client: aiohttp + tenacity) and with a raw asyncio HTTP/1.1 client (a lean reference that measures the server), stops
it; prints the ratio of the two, measured in this one run, and each side's CPU per rollout (client process and
server process). The `/ target` column divides each rate by TARGET (600 rollouts/s, the floor for a 2-core machine
shared by server and clients).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import psutil

from prime_rl.envs.gridsim.baselines import greedy
from prime_rl.envs.gridsim.env import GridSimEnv
from prime_rl.envs.gridsim.prompts import tool_arguments
from prime_rl.envs.nemo_gym.client import NemoGymClient
from prime_rl.envs.nemo_gym.rows import read_rows, row_to_task, write_server

TARGET = 600.0  # rollouts/s: the floor for 2 cores shared by server and clients


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url: str, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"env-server exited with {proc.returncode} before {url}/health answered")
        try:
            if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url}/health did not answer within {timeout_s} s")


async def drive(url: str, rows: list[dict], schedules: list[str], clients: int, seconds: float) -> list[float]:
    latencies: list[float] = []
    stop = time.monotonic() + seconds
    async with NemoGymClient(url, max_connections=clients, retry_deadline_s=30) as c:

        async def worker(w: int) -> None:
            i = w
            while time.monotonic() < stop:
                row, sched = rows[i % len(rows)], schedules[i % len(rows)]
                t0 = time.perf_counter()
                s = await c.seed(row)
                await c.call_tool(s, "submit_schedule", sched)
                await c.verify(s, row, "done")
                latencies.append(time.perf_counter() - t0)
                i += clients

        await asyncio.gather(*(worker(w) for w in range(clients)))
    return latencies


class RawConnection:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams (Content-Length bodies only): measures the server
    without httpx's per-request cost (about 1.3 ms of client CPU per request on this machine)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None

    async def post(self, path: str, body: bytes, cookie: str | None = None) -> tuple[int, dict[str, str], bytes]:
        if self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
        if cookie:
            head += f"Cookie: {cookie}\r\n"
        self.writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
        data = await self.reader.readexactly(int(headers.get("content-length", "0")))
        return status, headers, data

    def close(self) -> None:
        if self.reader is not None:
            self.writer.close()


async def drive_raw(url: str, rows: list[dict], schedules: list[str], clients: int, seconds: float) -> list[float]:
    host, port = url.split("//")[1].split(":")
    bodies = [json.dumps(r, separators=(",", ":")).encode() for r in rows]
    verify = [json.dumps({**r, "response": "done"}, separators=(",", ":")).encode() for r in rows]
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def worker(w: int) -> None:
        conn, i = RawConnection(host, int(port)), w
        try:
            while time.monotonic() < stop:
                k = i % len(rows)
                t0 = time.perf_counter()
                status, headers, _ = await conn.post("/seed_session", bodies[k])
                assert status == 200, status
                cookie = headers["set-cookie"].split(";")[0]  # name=value, whatever the server names it
                await conn.post("/submit_schedule", schedules[k].encode(), cookie)
                status, _, data = await conn.post("/verify", verify[k], cookie)
                assert status == 200 and b'"reward"' in data
                latencies.append(time.perf_counter() - t0)
                i += clients
        finally:
            conn.close()

    await asyncio.gather(*(worker(w) for w in range(clients)))
    return latencies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--port", type=int, default=0, help="0 = a free port")
    args = ap.parse_args()
    env = GridSimEnv(num_train=200, num_eval=200)
    with tempfile.TemporaryDirectory() as tmp:
        root = write_server("gridsim", tmp, env=env)
        rows = read_rows(root / "data" / "eval.jsonl")
        schedules = [tool_arguments(greedy(r["info"]["prices"], None)) for r in rows]
        # in-process reference: the same episodes without HTTP
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < 1.0:
            for row, sched in zip(rows, schedules, strict=True):
                ep = env.episode(row_to_task(row))
                ep.call_tool("submit_schedule", sched)
                ep.verify("done")
                n += 1
        inproc = n / (time.perf_counter() - t0)
        port = args.port or free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "prime_rl.cli.env_server", "serve", str(root), "--port", str(port),
               "--max-concurrent", str(max(96, args.clients * 2))]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            wait_health(url, proc)
            asyncio.run(drive(url, rows, schedules, args.clients, 1.0))  # warm-up
            results, cpu = {}, {}
            server = psutil.Process(proc.pid)
            for name, fn in (("NemoGymClient (aiohttp)", drive), ("raw asyncio client", drive_raw)):
                t0, c0, s0 = time.perf_counter(), time.process_time(), sum(server.cpu_times()[:2])
                lat = sorted(asyncio.run(fn(url, rows, schedules, args.clients, args.seconds)))
                results[name] = (lat, time.perf_counter() - t0)
                cpu[name] = ((time.process_time() - c0) / len(lat), (sum(server.cpu_times()[:2]) - s0) / len(lat))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
    print(f"rollouts (seed+tool+verify), {args.clients} concurrent clients, {args.seconds:.0f} s each, "
          f"{os.cpu_count()} CPUs shared by server and clients")  # fmt: skip
    print(f"{'':28}{'rollouts/s':>12}{'p50 ms':>10}{'p99 ms':>10}{'/ target':>10}{'client CPU':>12}{'server CPU':>12}")
    for name, (lat, wall) in results.items():
        rate = len(lat) / wall
        p50, p99 = lat[len(lat) // 2] * 1e3, lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3
        cc, sc = cpu[name]
        print(f"{'HTTP, ' + name:28}{rate:>12.0f}{p50:>10.1f}{p99:>10.1f}{rate / TARGET:>10.2f}"
              f"{cc * 1e3:>9.2f} ms{sc * 1e3:>9.2f} ms")
    print(f"{'in-process episodes':28}{inproc:>12.0f}{'':>10}{'':>10}{inproc / TARGET:>10.2f}")
    print(f"{'target':28}{TARGET:>12.0f}")
    print("(client/server CPU: CPU seconds of this process / of the env-server process per rollout)")
    (lc, wc), (lr, wr) = results["NemoGymClient (aiohttp)"], results["raw asyncio client"]
    print(f"ratio NemoGymClient / raw client: {len(lc) / wc / (len(lr) / wr):.2f}")


if __name__ == "__main__":
    main()
