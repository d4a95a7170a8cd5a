"""deploy/k8s/*.yaml: every object validates against the Kubernetes schemas (kubernetes-validate, offline, strict:
no unknown field), and the manifests agree with what prime-rl relies on: the embedded configs parse with our
config classes, the orchestrator has one URL per inference replica (pod DNS name and port of the StatefulSet and
its headless Service), one trainer rank per batch file (pods x torchrun processes), the env server's address and
bearer token, torchrun's static rendezvous on trainer pod 0 with the pod's index as node rank (trainer rank 0 on
pod 0), one shared run directory mounted at the same path in every pod, and entry points that exist. The
Dockerfiles install the way the README does. Neither is run in CI (no cluster, no Docker daemon there)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from prime_rl.config.inference import InferenceConfig
from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.config.trainer import TrainerConfig
from prime_rl.ports import url_host_port

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
K8S_VERSION = "1.32"


def objects() -> list[dict]:
    out = []
    for f in sorted(K8S.glob("*.yaml")):
        out += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return out


def by_kind(kind: str, name: str) -> dict:
    return next(o for o in objects() if o["kind"] == kind and o["metadata"]["name"] == name)


def pod_spec(o: dict) -> dict:
    return o["spec"]["template"]["spec"]


def config_files() -> dict[str, str]:
    files = dict(by_kind("ConfigMap", "prime-rl-config")["data"])
    files.update(by_kind("Secret", "prime-rl-secrets")["stringData"])
    return files


def test_every_object_validates_against_the_kubernetes_schemas():
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate (a dev extra)")
    objs = objects()
    assert {o["kind"] for o in objs} >= {"PersistentVolumeClaim", "ConfigMap", "Secret", "Service", "StatefulSet", "Deployment", "Job"}
    for o in objs:
        kv.validate(o, K8S_VERSION, strict=True)  # raises ValidationError naming the field
    bad = {**by_kind("Service", "prime-rl-inference"), "spec": {"clusterIP": "None", "portz": []}}
    with pytest.raises(kv.ValidationError):  # the check can fail
        kv.validate(bad, K8S_VERSION, strict=True)


def test_configs_parse_and_agree_with_the_objects():
    files = config_files()
    inf = InferenceConfig.model_validate(tomllib.loads(files["inference.toml"]))
    trainer = TrainerConfig.model_validate(tomllib.loads(files["trainer.toml"]))
    orch = OrchestratorConfig.model_validate(tomllib.loads(files["orchestrator.toml"]))
    sts, svc = by_kind("StatefulSet", "prime-rl-inference"), by_kind("Service", "prime-rl-inference")
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"] and svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    port = pod_spec(sts)["containers"][0]["ports"][0]["containerPort"]
    assert port == inf.server.port == svc["spec"]["ports"][0]["port"] and inf.server.host == "0.0.0.0"
    want = [f"http://{sts['metadata']['name']}-{i}.{svc['metadata']['name']}:{port}" for i in range(sts["spec"]["replicas"])]
    assert orch.client.base_url == want  # one URL per replica
    inf_env = next(e for e in pod_spec(sts)["containers"][0]["env"] if e["name"] == "PRIME_RL_INFERENCE_TOKEN")
    ref = inf_env["valueFrom"]["secretKeyRef"]  # the admin token of servers bound to 0.0.0.0, sent by the client
    assert orch.client.api_key == by_kind("Secret", ref["name"])["stringData"][ref["key"]]

    job = by_kind("Job", "prime-rl-trainer")
    argv = pod_spec(job)["containers"][0]["command"]
    opt = dict(zip(argv[::2], argv[1::2], strict=False)) | dict(zip(argv[1::2], argv[2::2], strict=False))
    assert orch.num_train_ranks == job["spec"]["completions"] * int(opt["--nproc-per-node"])
    assert opt["--nnodes"] == str(job["spec"]["completions"]) and job["spec"]["completionMode"] == "Indexed"
    tsvc = by_kind("Service", "prime-rl-trainer")
    # static rendezvous: node rank = completion index, so pod i runs ranks i x procs.. and rank 0 is on pod 0 (c10d
    # would order the pods by address and put rank 0 on any of them)
    assert opt["--rdzv-backend"] == "static" and "--rdzv-endpoint" not in opt
    assert opt["--master-addr"] == f"{job['metadata']['name']}-0.{pod_spec(job)['subdomain']}"
    assert opt["--master-port"] == str(tsvc["spec"]["ports"][0]["port"])
    assert pod_spec(job)["subdomain"] == tsvc["metadata"]["name"] and opt["--node-rank"] == "$(JOB_COMPLETION_INDEX)"

    env_svc, env_dep = by_kind("Service", "prime-rl-env-server"), by_kind("Deployment", "prime-rl-env-server")
    task = orch.train.source[0].env.taskset.task
    assert url_host_port(task.resources_url) == (env_svc["metadata"]["name"], env_svc["spec"]["ports"][0]["port"])
    c = pod_spec(env_dep)["containers"][0]
    assert c["command"][c["command"].index("--port") + 1] == str(env_svc["spec"]["ports"][0]["targetPort"])
    assert c["command"][c["command"].index("--token") + 1] == "$(ENV_TOKEN)"
    token_env = next(e for e in c["env"] if e["name"] == "ENV_TOKEN")["valueFrom"]["secretKeyRef"]
    assert task.token == by_kind("Secret", token_env["name"])["stringData"][token_env["key"]]

    # one run directory, on the shared volume, mounted at the same path everywhere
    assert inf.output_dir == trainer.output_dir == orch.output_dir
    for o in objects():
        if o["kind"] in ("StatefulSet", "Deployment", "Job"):
            spec = pod_spec(o)
            claim = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in spec["volumes"]}
            for ctr in spec["containers"]:
                mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
                assert claim[mounts["/data"]] == "prime-rl-shared", o["metadata"]["name"]
                assert str(orch.output_dir).startswith("/data/")


def test_commands_name_real_entry_points():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    for o in objects():
        if o["kind"] not in ("StatefulSet", "Deployment", "Job"):
            continue
        for ctr in pod_spec(o)["containers"] + pod_spec(o).get("initContainers", []):
            argv = ctr["command"]
            if argv[0] == "python":
                for i, a in enumerate(argv):
                    if a == "-m":
                        assert importlib.util.find_spec(argv[i + 1]) is not None, argv[i + 1]
            elif argv[0] != "bash":
                assert argv[0] in scripts, argv[0]


@pytest.mark.parametrize("name, extra", [("Dockerfile.cpu", "EXTRA=cpu"), ("Dockerfile.gpu", "EXTRA=gpu")])
def test_dockerfiles_install_as_the_readme(name, extra):
    text = (REPO / "deploy/docker" / name).read_text()
    assert f"{extra} bash scripts/install.sh" in text
    for path in ("pyproject.toml", "scripts/", "src/"):
        assert path in text and (REPO / path).exists()
    assert ("nvidia/cuda:" in text) == (extra == "EXTRA=gpu")


@pytest.mark.slow
def test_cpu_image_builds():
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker daemon here (the images are built by hand: see docs/scaling.md)")
    r = subprocess.run(["docker", "build", "-f", "deploy/docker/Dockerfile.cpu", "-t", "prime-rl:cpu-test", "."],
                       cwd=REPO, capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stderr[-4000:]
