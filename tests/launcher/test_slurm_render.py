"""Unit tests of the Slurm side without a cluster: `rl --dry-run` with `[slurm]` renders the sbatch script (node
roles, rendezvous address and ports, #SBATCH lines), node layouts and port blocks, validation errors naming the
field, Slurm variables, and the shared-filesystem check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from prime_rl.config.deployment import PORT_STRIDE
from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.config.rl import RLConfig
from prime_rl.config.trainer import SFTConfig
from prime_rl.launcher.cluster import JobDir, slurm_node
from prime_rl.launcher.errors import LaunchError
from prime_rl.launcher.multinode import all_replicas, finisher_nodes, layout, run_node

BIN = Path(sys.executable).parent


def tiny_model_at(path: Path) -> None:
    """`path` -> the cached tiny model (`--dry-run` loads the model's config and tokenizer)."""
    from prime_rl.models.tiny import cached_tiny_model

    path.symlink_to(cached_tiny_model())


def multi_args(tmp: Path, *extra: str) -> list[str]:
    return [
        "--output-dir", str(tmp / "run"), "--model.name", str(tmp / "model"),
        "--deployment.type", "multi-node", "--deployment.num-infer-nodes", "1", "--deployment.num-train-nodes", "2",
        "--deployment.port-base", "31000", "--slurm.job-name", "grid", "--slurm.partition", "gpu",
        "--slurm.account", "acct", "--slurm.time", "2:00:00", *extra,
    ]  # fmt: skip


def test_dry_run_renders_the_multi_node_script(tmp_path):
    tiny_model_at(tmp_path / "model")
    toml = tmp_path / "extra.toml"
    toml.write_text('[slurm]\nsbatch_lines = ["--exclusive", "#SBATCH --mem=0"]\nsetup = ["module load cuda", "source /opt/venv/bin/activate"]\n')
    r = subprocess.run([str(BIN / "rl"), "@", str(toml), *multi_args(tmp_path), "--dry-run"], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    script = tmp_path / "run/slurm/rl.sbatch"
    assert f"sbatch script written to {script}" in r.stdout and "submitted Slurm job" not in r.stdout
    text = script.read_text()
    for line in ("#SBATCH --job-name=grid", "#SBATCH --nodes=3", "#SBATCH --ntasks-per-node=1", "#SBATCH --partition=gpu",
                 "#SBATCH --account=acct", "#SBATCH --time=2:00:00", "#SBATCH --exclusive", "#SBATCH --mem=0",
                 f"#SBATCH --output={tmp_path}/run/slurm/job_%j.log", "module load cuda", "source /opt/venv/bin/activate"):
        assert line in text.splitlines(), line
    # roles by node index, ports from port_base (node k: 31000 + 16k), rendezvous on the first trainer node
    assert "#   node 0: inference replica 0 :31004; orchestrator; env-server :31001" in text
    assert "#   node 1: trainer (torchrun node 0 of 2, rendezvous :31016)" in text
    assert "#   node 2: trainer (torchrun node 1 of 2)" in text
    assert 'echo "torchrun rendezvous: ${ADDRS[1]}:31016"' in text
    assert "srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --kill-on-bad-exit=1" in text
    assert f"-m prime_rl.cli.rl_node @ {tmp_path}/run/configs/rl.toml" in text
    # every #SBATCH line precedes the first command, and bash parses the script
    lines = text.splitlines()
    first_cmd = next(i for i, ln in enumerate(lines) if ln and not ln.startswith("#"))
    assert all(i < first_cmd for i, ln in enumerate(lines) if ln.startswith("#SBATCH"))
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    cfg = parse_config(RLConfig, ["@", str(tmp_path / "run/configs/rl.toml")])  # what every node reads
    assert cfg.deployment.num_nodes == 3 and cfg.slurm.job_name == "grid" and not cfg.dry_run


def test_relative_output_dir_gives_a_resolved_config_that_reads_back(tmp_path):
    """`output_dir` relative to the working directory (as docs/scaling.md writes it): the script and every node read
    `configs/rl.toml`, whose top-level and per-process run directories must agree (before: the sections were made
    absolute and the top level was not, so every node failed with a shared-field conflict)."""
    tiny_model_at(tmp_path / "model")
    args = [a if a != str(tmp_path / "run") else "run" for a in multi_args(tmp_path)]
    r = subprocess.run([str(BIN / "rl"), *args, "--dry-run"], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    cfg = parse_config(RLConfig, ["@", str(tmp_path / "run/configs/rl.toml")])
    assert cfg.output_dir == cfg.trainer.output_dir == cfg.orchestrator.output_dir == tmp_path / "run"


def test_sft_dry_run_and_own_template(tmp_path):
    tpl = tmp_path / "mine.jinja"
    tpl.write_text("#!/bin/bash\n#SBATCH --nodes={{ nodes }}\n# {{ slurm.job_name }}\n{% include '_nodes.sbatch.jinja' %}\nsrun {{ python }} -m prime_rl.cli.sft_node @ {{ config }}\n")
    r = subprocess.run([str(BIN / "sft"), "--output-dir", str(tmp_path / "run"), "--deployment.num-nodes", "2",
                        "--slurm.job-name", "sftjob", "--slurm.template", str(tpl), "--dry-run"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "run/slurm/sft.sbatch").read_text()
    assert "#SBATCH --nodes=2" in text and "# sftjob" in text and "PRIME_RL_NODE_ADDRS" in text
    assert f"-m prime_rl.cli.sft_node @ {tmp_path}/run/configs/sft.toml" in text
    assert (tmp_path / "run/configs/sft.toml").is_file()
    bad = tmp_path / "bad.jinja"
    bad.write_text("{{ no_such_variable }}")
    r = subprocess.run([str(BIN / "sft"), "--output-dir", str(tmp_path / "run2"), "--slurm.template", str(bad),
                        "--dry-run"], capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 2 and "no_such_variable" in r.stderr


def test_layout_ports_never_collide():
    cfg = parse_config(RLConfig, ["--deployment.type", "multi-node", "--deployment.num-infer-nodes", "2",
                                  "--deployment.num-train-nodes", "2", "--deployment.infer-replicas-per-node", "3",
                                  "--deployment.orchestrator-node", "3", "--deployment.port-base", "40000"])  # fmt: skip
    dep = cfg.deployment
    nodes = layout(dep)
    assert [n.roles for n in nodes] == [["inference"], ["inference"], ["trainer"], ["trainer", "orchestrator", "env-server"]]
    assert [n.replicas for n in nodes[:2]] == [[0, 1, 2], [3, 4, 5]]
    assert [n.train_rank for n in nodes] == [None, None, 0, 1]
    assert finisher_nodes(dep) == [2, 3]
    # all on one host (as the local cluster): every port of every role distinct
    reps = all_replicas(dep, ["127.0.0.1"] * 4)
    ports = [r.port for r in reps] + [dep.node_ports(2)] + [dep.node_ports(3) + 1]
    assert len(ports) == len(set(ports)) and ports[:3] == [40004, 40005, 40006] and reps[3].port == 40000 + PORT_STRIDE + 4
    assert [r.name for r in reps][:2] == ["inference", "inference-1"]


@pytest.mark.parametrize(
    "args, field",
    [
        (["--deployment.num-train-nodes", "2"], "deployment.num_train_nodes = 2 needs deployment.type"),
        (["--deployment.type", "multi-node", "--deployment.orchestrator-node", "5"], "deployment.orchestrator_node = 5"),
        (["--deployment.type", "multi-node", "--slurm.nodes", "4"], "slurm.nodes = 4"),
        (["--deployment.type", "multi-node", "--orchestrator.client.base-url", '["http://h:1"]'], "orchestrator.client.base_url"),
    ],
)
def test_validation_names_the_field(args, field):
    with pytest.raises(ConfigError, match=field.replace("[", r"\[").replace(".", r"\.")):
        parse_config(RLConfig, args)


def test_sft_several_nodes_need_slurm():
    with pytest.raises(ConfigError, match="deployment.num_nodes = 2 needs a \\[slurm\\] section"):
        parse_config(SFTConfig, ["--deployment.num-nodes", "2"])


def slurm_env(procid: int, names: str = "node1 node2", addrs: str = "10.0.0.1 10.0.0.2") -> dict[str, str]:
    n = len(names.split())
    return {"SLURM_JOB_ID": "77", "SLURM_PROCID": str(procid), "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NTASKS": str(n),
            "SLURMD_NODENAME": names.split()[procid], "PRIME_RL_NODE_NAMES": names, "PRIME_RL_NODE_ADDRS": addrs}


def test_slurm_node_from_variables():
    node = slurm_node(slurm_env(1))
    assert (node.index, node.name, node.addr, node.num_nodes, node.job_id) == (1, "node2", "10.0.0.2", 2, "77")
    with pytest.raises(LaunchError, match="not inside a Slurm job step"):
        slurm_node({})
    with pytest.raises(LaunchError, match="one launcher per node"):
        slurm_node({**slurm_env(0), "SLURM_NTASKS": "4"})


def test_unshared_output_dir_fails_naming_the_missing_node(tmp_path):
    node = slurm_node(slurm_env(0))
    jd = JobDir(tmp_path, node.job_id)
    jd.arrive(node)
    with pytest.raises(LaunchError, match=r"does not see the files of node\(s\) 1 \(node2\).*shares"):
        jd.wait_all_arrived(node, 0.3, tmp_path)
    other = JobDir(tmp_path, node.job_id)  # node 2 arrives: now both are seen
    other.arrive(slurm_node(slurm_env(1)))
    jd.wait_all_arrived(node, 0.3, tmp_path)
    jd.mark_failed(node, "trainer", "died (exit code 1)", "logs/x")
    assert other.failures()[0]["process"] == "trainer"


def test_allocation_smaller_than_deployment(tmp_path, monkeypatch, capsys):
    for k, v in slurm_env(0).items():
        monkeypatch.setenv(k, v)
    cfg = parse_config(RLConfig, ["--output-dir", str(tmp_path / "run"), "--deployment.type", "multi-node",
                                  "--deployment.num-train-nodes", "2"])  # fmt: skip
    assert run_node(cfg) == 2
    err = capsys.readouterr().err
    assert "the allocation has 2 node(s) but deployment.num_infer_nodes (1) + deployment.num_train_nodes (2) = 3" in err


def test_gpu_placement_per_node_role():
    from prime_rl.launcher.errors import PreflightError
    from prime_rl.launcher.placement import place

    cfg = parse_config(RLConfig, ["--deployment.type", "multi-node", "--deployment.num-train-gpus", "8",
                                  "--deployment.num-infer-gpus", "8", "--deployment.infer-replicas-per-node", "2"])  # fmt: skip
    gpus = [str(i) for i in range(8)]
    t = place(cfg, gpus=gpus, roles={"trainer"})
    assert t.env_for("trainer")["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7" and t.trainer_procs == 8
    i = place(cfg, gpus=gpus, roles={"inference", "orchestrator"})
    assert [i.replica_env(j, 2)["CUDA_VISIBLE_DEVICES"] for j in (0, 1)] == ["0,1,2,3", "4,5,6,7"]
    assert i.updates["inference.vllm.data_parallel_size"] == 4  # each replica: data parallel over its 4 GPUs
    with pytest.raises(PreflightError, match=r"deployment.num_train_gpus \+ deployment.num_infer_gpus = 16 GPUs"):
        place(cfg, gpus=gpus)  # both roles on one 8-GPU node do not fit


@pytest.mark.parametrize(
    "cls, args, msg",
    [
        (RLConfig, ["--deployment.bind-host", "0.0.0.0"], "deployment.bind_host applies to multi-node runs only"),
        (RLConfig, ["--deployment.port-base", "31000"], "deployment.port_base applies to multi-node runs only"),
        (RLConfig, ["--deployment.type", "multi-node", "--inference.server.port", "9000"], "inference.server.port is not used"),
        (SFTConfig, ["--deployment.cpu-procs", "2"], "deployment.cpu_procs applies to \\[slurm\\] runs"),
    ],
)
def test_settings_that_would_not_take_effect_are_refused(cls, args, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_config(cls, args)


def node_local_args(tmp: Path, *extra: str) -> list[str]:
    """`multi_args` with one trainer node, no shared filesystem, collective weights and tcp rollouts."""
    args = multi_args(tmp, "--deployment.shared-fs", "false", "--rollout-transport.type", "tcp",
                      "--weight-transport.type", "collective", *extra)  # fmt: skip
    args[args.index("--deployment.num-train-nodes") + 1] = "1"
    return args


def test_no_shared_fs_script_carries_the_config_to_each_nodes_own_directory(tmp_path):
    """`deployment.shared_fs = false`: the rendered script holds the run config; run with a stand-in `srun` (one
    task, SLURM_PROCID 1) and `scontrol`, it writes the config into node 1's own directory and starts the node's
    launcher on that file, which reads back as the submitted config."""
    tiny_model_at(tmp_path / "model")
    args = node_local_args(tmp_path)
    r = subprocess.run([str(BIN / "rl"), *args, "--dry-run"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    script = tmp_path / "run/slurm/rl.sbatch"
    text = script.read_text()
    assert "PRIME_RL_RL_TOML" in text and "must be on a filesystem every node shares" not in text
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text("#!/bin/bash\n[ \"$2\" = hostnames ] && echo node1 node2 || echo NodeAddr=127.0.0.1\n")
    # srun: drop its options, run the command as task 1; python: record its argv and the file it was given
    (fake / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nSLURM_PROCID=1 exec "$@"\n')
    (fake / "python").write_text(f'#!/bin/bash\necho "$@" > {tmp_path}/argv\n')
    for f in fake.iterdir():
        f.chmod(0o755)
    # the interpreter the script names: `rl`'s own (its shebang), which is this test's unless the venv is linked
    for python in {str(Path(sys.executable)), (BIN / "rl").read_text().splitlines()[0].removeprefix("#!").strip()}:
        text = text.replace(python, str(fake / "python"))
    env = {"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_JOB_ID": "5"}
    run = subprocess.run(["bash", "-c", text], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    own = tmp_path / "run/node_1/configs/rl.toml"
    assert (tmp_path / "argv").read_text().split() == ["-m", "prime_rl.cli.rl_node", "@", str(own)]
    assert not (tmp_path / "run/node_0").exists()
    node_cfg = parse_config(RLConfig, ["@", str(own)])
    submitted = parse_config(RLConfig, ["@", str(tmp_path / "run/configs/rl.toml")])
    assert node_cfg == submitted and node_cfg.deployment.shared_fs is False


def test_no_shared_fs_refuses_a_template_that_does_not_carry_the_config(tmp_path):
    tiny_model_at(tmp_path / "model")
    tpl = tmp_path / "mine.sbatch.jinja"
    tpl.write_text("#!/bin/bash\nsrun {{ python }} -m prime_rl.cli.rl_node @ {{ config }}\n")
    args = node_local_args(tmp_path, "--slurm.template", str(tpl))
    r = subprocess.run([str(BIN / "rl"), *args, "--dry-run"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and "deployment.shared_fs = false" in r.stderr and "PRIME_RL_RL_TOML" in r.stderr, r.stderr
