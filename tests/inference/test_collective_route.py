"""`POST /update_weights` with a collective body, on a FastAPI app with a fake engine (tests/inference/test_admin.py):
what it asks the workers, what it refuses (400 naming the field), and that a failed transfer records no version;
and the orchestrator side (`admin.update_weights` with a group): one rank offset per server, sent once."""

from __future__ import annotations

import asyncio

from tests.inference.test_admin import FakeEngine, make_app

from prime_rl.inference import admin
from prime_rl.inference.guard import AdminPolicy

GROUP = {"address": "tcp://127.0.0.1:29660", "world_size": 3, "timeout_s": 60.0, "rank_offset": 1,
         "workers_per_server": 1}  # fmt: skip


def body(version=3, **group):
    return {"version": version, "transport": "collective", "group": {**GROUP, **group}}


def test_a_collective_update_receives_then_records_the_version():
    client, engine = make_app(AdminPolicy(host="127.0.0.1"))
    r = client.post("/update_weights", json=body())
    assert r.status_code == 200, r.text
    assert r.json()["path"] == "collective:tcp://127.0.0.1:29660" and r.json()["version"] == 3
    names = [c[0] for c in engine.calls]
    assert names == ["pause", "prime_receive_weights", "version", "resume"]
    assert engine.calls[1] == ("prime_receive_weights", 3, GROUP) and engine.calls[2] == ("version", "3")
    assert client.get("/policy_version").json() == {"version": 3, "path": "collective:tcp://127.0.0.1:29660"}


def test_a_malformed_collective_body_is_refused_naming_the_field():
    client, engine = make_app(AdminPolicy(host="127.0.0.1"))
    for bad, field in ((body(version=-1), "version"), (body(rank_offset="1"), "group.rank_offset"),
                       (body(address=None), "group.address"), ({"version": 1, "transport": "collective"}, "group")):
        r = client.post("/update_weights", json=bad)
        assert r.status_code == 400 and field in r.json()["error"], (bad, r.text)
    assert engine.calls == []


def test_a_failed_transfer_records_no_version_and_resumes():
    class Failing(FakeEngine):
        async def collective_rpc(self, method, args=()):
            self.calls.append((method, *args))
            raise RuntimeError("receiving policy version 4 from the weight group failed: peer gone")

    client, engine = make_app(AdminPolicy(host="127.0.0.1"))
    before = client.get("/policy_version").json()
    client.app.state.engine_client = failing = Failing()
    r = client.post("/update_weights", json=body(version=4))
    assert r.status_code == 500 and "policy version 4" in r.json()["error"]
    assert [c[0] for c in failing.calls] == ["pause", "prime_receive_weights", "resume"]
    assert client.get("/policy_version").json() == before


class StubPool:
    def __init__(self, urls):
        self.urls = urls

    def check_alive(self):
        pass

    def up(self):
        return list(self.urls)


class StubRouter:
    """What `admin.update_weights` uses of a Router: the URLs, the pool and `post` (recorded)."""

    def __init__(self, urls):
        self.urls, self.pool, self.posts = urls, StubPool(urls), []

    async def post(self, url, route, body, retried=True):
        self.posts.append((url, route, body, retried))
        return {}


def test_the_orchestrator_gives_each_server_its_rank_offset_and_sends_once():
    urls = ["http://a:1", "http://b:2"]
    router, known = StubRouter(urls), {}
    group = {"address": "tcp://t:29660", "world_size": 5, "timeout_s": 60.0, "workers_per_server": 2}
    asyncio.run(admin.update_weights(router, "/run/weights/step_7", 7, known, group))
    sent = {u: (b, retried) for u, _, b, retried in router.posts}
    assert sent["http://a:1"][0] == {"version": 7, "transport": "collective", "group": {**group, "rank_offset": 1}}
    assert sent["http://b:2"][0]["group"]["rank_offset"] == 3
    assert not any(retried for _, retried in sent.values()) and known == {u: 7 for u in urls}
    router = StubRouter(urls)
    asyncio.run(admin.update_weights(router, "/run/weights/step_8", 8, {}))
    assert all(b == {"path": "/run/weights/step_8", "version": 8} and retried for _, _, b, retried in router.posts)
