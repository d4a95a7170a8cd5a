"""The rollout transports (prime_rl.transport.rollouts): the filesystem and tcp (real ZMQ sockets on loopback, in
one process: the orchestrator's sender on the event loop, each trainer rank's receiver in a worker thread)
deliver each step's batch bytes unchanged and in order; tcp bounds how far the orchestrator runs ahead by
`max_async_level` and, after a trainer restart from a checkpoint, delivers every step from the checkpoint's
next step on exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import numpy as np
import pytest

from prime_rl.config.rl import RLConfig
from prime_rl.config.rollout_transport import RolloutTransportConfig
from prime_rl.ports import free_port
from prime_rl.transport.batch import MicroBatch, StepBatch, encode_batch
from prime_rl.transport.rollouts import RolloutTransportError, build_receiver, build_sender


def _batch(step: int, rank: int, world: int) -> StepBatch:
    """A batch whose tokens encode (step, rank), so a batch delivered for the wrong step or rank shows."""
    n = 5 + step + rank
    ids = np.arange(n) + 1000 * step + 100 * rank
    mb = MicroBatch(ids, np.arange(n), np.arange(n) % 2 == 0, np.full(n, 0.5 * step), np.full(n, -0.25), np.ones(n))
    return StepBatch(step=step, rank=rank, world_size=world, total_loss_tokens=int(mb.num_loss_tokens) * world,
                     micro_batches=[mb], metrics={"step": step})  # fmt: skip


def _step(step: int, world: int) -> list[StepBatch]:
    return [_batch(step, r, world) for r in range(world)]


def _cfg(kind: str) -> RolloutTransportConfig:
    return RolloutTransportConfig(type=kind, port=free_port())


@contextlib.asynccontextmanager
async def _sender(cfg, tmp_path, *, ranks=1, ahead=1, start=1, timeout_s=30.0):
    sender = build_sender(cfg, tmp_path, num_ranks=ranks, max_async_level=ahead, start_step=start, timeout_s=timeout_s)
    server = asyncio.create_task(sender.serve())
    try:
        yield sender
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server
        await sender.aclose()


def _rx(cfg, tmp_path, rank=0, world=1, timeout_s=30.0):
    return build_receiver(cfg, tmp_path, rank=rank, world_size=world, timeout_s=timeout_s)


@pytest.mark.parametrize("kind", ["filesystem", "tcp"])
async def test_every_rank_gets_its_bytes_in_order(kind, tmp_path):
    """Two ranks, three steps: each rank receives exactly the batch sent for it, bytes unchanged, step by step."""
    cfg = _cfg(kind)
    async with _sender(cfg, tmp_path, ranks=2, ahead=2) as sender:
        rxs = [_rx(cfg, tmp_path, rank=r, world=2) for r in range(2)]
        try:
            got: dict[int, list[StepBatch]] = {0: [], 1: []}

            async def trainer(r):
                for step in (1, 2, 3):
                    got[r].append(await asyncio.to_thread(rxs[r].receive, step, step))
                await asyncio.to_thread(rxs[r].finish, 3)

            ranks = [asyncio.create_task(trainer(r)) for r in range(2)]
            for step in (1, 2, 3):
                await sender.send(step, _step(step, 2))
            await sender.drain(3, timeout_s=30)
            await asyncio.gather(*ranks)
        finally:
            for rx in rxs:
                rx.close()
    for r in range(2):
        assert [b.step for b in got[r]] == [1, 2, 3]
        assert [encode_batch(b) for b in got[r]] == [encode_batch(_batch(s, r, 2)) for s in (1, 2, 3)]


async def test_tcp_orchestrator_runs_at_most_max_async_level_plus_one_steps_ahead(tmp_path):
    """max_async_level = 1: steps 1 and 2 are held with no ask; step 3 waits until the trainer asked for step 2
    (so took step 1), and times out naming the step when the trainer never comes."""
    cfg = _cfg("tcp")
    async with _sender(cfg, tmp_path, ahead=1) as sender:
        await sender.send(1, _step(1, 1))
        await sender.send(2, _step(2, 1))
        third = asyncio.create_task(sender.send(3, _step(3, 1)))
        rx = _rx(cfg, tmp_path)
        try:
            assert (await asyncio.to_thread(rx.receive, 1, 1)).step == 1
            for _ in range(20):  # the ask for step 1 confirms nothing: step 3 still waits
                await asyncio.sleep(0)
            assert not third.done() and sorted(sender.batches) == [1, 2]
            assert (await asyncio.to_thread(rx.receive, 2, 2)).step == 2  # confirms step 1
            await asyncio.wait_for(third, 30)
            assert sorted(sender.batches) == [2, 3]  # step 1 released: keep_from 2
        finally:
            rx.close()
    async with _sender(_cfg("tcp"), tmp_path, ahead=0, timeout_s=0.3) as sender:
        await sender.send(1, _step(1, 1))
        with pytest.raises(TimeoutError, match="step 2 waited for the trainer to take step 1"):
            await sender.send(2, _step(2, 1))


async def test_tcp_trainer_restart_from_checkpoint_gets_each_step_exactly_once(tmp_path):
    """A trainer checkpointing every 2 steps takes steps 1-3, asks for step 4 and dies. Its restart from the
    checkpoint at step 2 asks for step 3 and then gets 3, 4, 5 once each, bytes equal to what was sent; a step
    before the checkpoint is refused, not served again."""
    cfg = _cfg("tcp")
    async with _sender(cfg, tmp_path, ahead=2) as sender:
        first = _rx(cfg, tmp_path)
        try:
            for step in (1, 2, 3, 4):
                await sender.send(step, _step(step, 1))
                if step < 4:
                    keep = 1 if step <= 2 else 3  # the newest checkpoint + 1 (checkpoint written after step 2)
                    assert (await asyncio.to_thread(first.receive, step, keep)).step == step
        finally:
            first.close()  # dies holding nothing of step 4 (never asked)
        assert sorted(sender.batches) == [3, 4]  # steps the restart may need; 1 and 2 released
        restarted = _rx(cfg, tmp_path)
        try:
            got = [await asyncio.to_thread(restarted.receive, 3, 3)]
            got.append(await asyncio.to_thread(restarted.receive, 4, 3))
            fifth = asyncio.create_task(asyncio.to_thread(restarted.receive, 5, 3))
            await sender.send(5, _step(5, 1))
            got.append(await fifth)
            await asyncio.to_thread(restarted.finish, 5)
            await sender.drain(5, timeout_s=30)
            with pytest.raises(RolloutTransportError, match="step 2 is no longer held"):
                await asyncio.to_thread(restarted.receive, 2, 2)
        finally:
            restarted.close()
    assert [b.step for b in got] == [3, 4, 5]
    assert [encode_batch(b) for b in got] == [encode_batch(_batch(s, 0, 1)) for s in (3, 4, 5)]


async def test_tcp_refuses_a_world_size_other_than_num_train_ranks(tmp_path):
    cfg = _cfg("tcp")
    async with _sender(cfg, tmp_path, ranks=2) as sender:
        await sender.send(1, _step(1, 2))
        rx = _rx(cfg, tmp_path, world=1)
        try:
            with pytest.raises(RolloutTransportError, match="orchestrator.num_train_ranks = 2"):
                await asyncio.to_thread(rx.receive, 1, 1)
        finally:
            rx.close()


def test_tcp_receiver_times_out_naming_the_orchestrator(tmp_path):
    cfg = _cfg("tcp")  # nothing listens there
    rx = _rx(cfg, tmp_path, timeout_s=0.3)
    try:
        with pytest.raises(TimeoutError, match=f"orchestrator at tcp://127.0.0.1:{cfg.port}"):
            rx.receive(1, 1)
    finally:
        rx.close()


async def test_tcp_taken_port_names_the_field(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        cfg = RolloutTransportConfig(type="tcp", port=s.getsockname()[1])
        with pytest.raises(RolloutTransportError, match="rollout_transport.port"):
            build_sender(cfg, tmp_path, num_ranks=1, max_async_level=1, start_step=1, timeout_s=1)


def test_config_shared_by_rl_and_zmq_read_as_tcp():
    cfg = RLConfig(rollout_transport={"type": "zmq", "port": 31111})
    for section in (cfg.trainer, cfg.orchestrator):
        assert section.rollout_transport.type == "tcp" and section.rollout_transport.port == 31111
    assert cfg.trainer.rollout_transport.endpoint == "tcp://127.0.0.1:31111"
    assert RLConfig().trainer.rollout_transport.type == "filesystem"


def test_rl_refuses_trainer_and_orchestrator_on_different_transports():
    with pytest.raises(ValueError, match=r"trainer.rollout_transport \(type 'filesystem'.*set \[rollout_transport\] once"):
        RLConfig(orchestrator={"rollout_transport": {"type": "tcp"}})
    with pytest.raises(ValueError, match="port 29650"):
        RLConfig(orchestrator={"rollout_transport": {"type": "tcp", "port": 1234}}, trainer={"rollout_transport": {"type": "tcp"}})
    cfg = RLConfig(orchestrator={"rollout_transport": {"type": "tcp", "host": "0.0.0.0"}}, trainer={"rollout_transport": {"type": "tcp"}})
    assert cfg.orchestrator.rollout_transport.host != cfg.trainer.rollout_transport.host  # hosts may differ


async def test_tcp_malformed_request_is_answered_and_the_server_keeps_serving(tmp_path):
    """A request whose rank is not an integer (a stray client on the port) gets an error reply; `serve` goes on and
    the real trainer rank still gets its step."""
    import msgpack
    import zmq

    cfg = _cfg("tcp")
    async with _sender(cfg, tmp_path) as sender:
        await sender.send(1, _step(1, 1))
        ctx = zmq.Context()
        sock = ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(cfg.endpoint)
        try:
            sock.send(msgpack.packb({"op": "get", "step": 1, "rank": "zero"}))
            assert await asyncio.to_thread(sock.poll, 10_000), "no reply to a malformed request"
            reply = msgpack.unpackb(sock.recv_multipart()[0], raw=False)
            assert reply["status"] == "error" and "must be integers" in reply["message"]
        finally:
            sock.close(0)
            ctx.term()
        rx = _rx(cfg, tmp_path)
        try:
            got = await asyncio.to_thread(rx.receive, 1, 1)
            assert got.step == 1
        finally:
            rx.close()


def _raw_ask(endpoint: str, req: dict) -> dict:
    """One request from a bare ZMQ REQ socket (a client that is not a prime-rl trainer); the reply's header."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        sock.send(msgpack.packb(req))
        assert sock.poll(10_000), "no reply"
        frames = sock.recv_multipart()
        assert len(frames) == 1, "a batch was sent with the reply"
        return msgpack.unpackb(frames[0], raw=False)
    finally:
        sock.close(0)
        ctx.term()


async def test_tcp_token_is_required_from_every_request(tmp_path, monkeypatch):
    """With rollout_transport.token set on the orchestrator, a request without it or with another one gets an
    error reply and no batch (and does not count as the rank's ask); a trainer rank with the token (from its
    config, or PRIME_RL_ROLLOUT_TOKEN) gets its step, and the server keeps serving throughout."""
    monkeypatch.delenv("PRIME_RL_ROLLOUT_TOKEN", raising=False)
    port = free_port()
    cfg = RolloutTransportConfig(type="tcp", port=port, token="s3cret")
    async with _sender(cfg, tmp_path) as sender:
        await sender.send(1, _step(1, 1))
        for extra in ({}, {"token": "wrong"}, {"token": 7}):
            reply = await asyncio.to_thread(_raw_ask, cfg.endpoint, {"op": "get", "step": 1, "rank": 0, "world_size": 1,
                                                                     "keep_from": 1, **extra})  # fmt: skip
            assert reply["status"] == "error" and "missing or wrong rollout_transport.token" in reply["message"]
        reply = await asyncio.to_thread(_raw_ask, cfg.endpoint, {"op": "done", "step": 5, "rank": 0})
        assert reply["status"] == "error" and sender.done == {} and sender.asked == {}  # nothing was recorded
        for wrong in (RolloutTransportConfig(type="tcp", port=port), RolloutTransportConfig(type="tcp", port=port, token="x")):
            rx = _rx(wrong, tmp_path)
            try:
                with pytest.raises(RolloutTransportError, match="missing or wrong rollout_transport.token"):
                    await asyncio.to_thread(rx.receive, 1, 1)
            finally:
                rx.close()
        monkeypatch.setenv("PRIME_RL_ROLLOUT_TOKEN", "s3cret")
        rx = _rx(RolloutTransportConfig(type="tcp", port=port), tmp_path)  # the token from the environment
        try:
            got = await asyncio.to_thread(rx.receive, 1, 1)
            assert got.step == 1 and got.micro_batches[0].input_ids[0] == 1000
            await asyncio.to_thread(rx.finish, 1)
            await sender.drain(1, timeout_s=30)
        finally:
            rx.close()


def test_rl_refuses_different_rollout_tokens():
    with pytest.raises(ValueError, match="trainer.rollout_transport.token differs") as e:
        RLConfig(orchestrator={"rollout_transport": {"type": "tcp", "token": "aaa"}},
                 trainer={"rollout_transport": {"type": "tcp", "token": "bbb"}})  # fmt: skip
    msg = e.value.errors()[0]["msg"]  # the message rl prints (pydantic's own repr also shows the input)
    assert "aaa" not in msg and "bbb" not in msg
    cfg = RLConfig(rollout_transport={"type": "tcp", "token": "ccc"})
    assert cfg.trainer.rollout_transport.token == cfg.orchestrator.rollout_transport.token == "ccc"


async def test_tcp_rank_zero_announces_policy_versions_and_the_watcher_follows_them(tmp_path):
    """With weights over a collective, trainer rank 0 announces each version over the rollout channel; the
    orchestrator's weight watcher loads the newest announced version although no `weights/step_N/STABLE` exists in
    its own directory (another node's), and only rank 0 may announce."""
    from prime_rl.orchestrator.policy_watch import WeightWatcher
    from prime_rl.orchestrator.types import PolicyVersion

    cfg = _cfg("tcp")
    async with _sender(cfg, tmp_path, ranks=2) as sender:
        loaded: list[tuple[str, int]] = []

        async def load(path: str, version: int) -> None:
            loaded.append((path, version))

        watcher = WeightWatcher(tmp_path / "weights", load, PolicyVersion(0))
        watcher.announced = lambda: sender.published
        assert await watcher.poll_once() is None  # nothing announced yet
        rank0, rank1 = _rx(cfg, tmp_path, rank=0, world=2), _rx(cfg, tmp_path, rank=1, world=2)
        try:
            await asyncio.to_thread(rank0.announce, 1)
            assert sender.published == 1
            assert await watcher.poll_once() == 1 and loaded == [(str(tmp_path / "weights/step_1"), 1)]
            assert await watcher.poll_once() is None  # loaded once
            await asyncio.to_thread(rank0.announce, 3)
            await asyncio.to_thread(rank0.announce, 2)  # an older one never goes back
            assert await watcher.poll_once() == 3 and sender.published == 3
            with pytest.raises(RolloutTransportError, match="only trainer rank 0 announces"):
                await asyncio.to_thread(rank1.announce, 4)
            assert sender.published == 3
        finally:
            rank0.close()
            rank1.close()
    assert not (tmp_path / "weights").exists()  # nothing was read from (or written to) a weights directory
