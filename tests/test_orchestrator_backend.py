"""The orchestrator's `backend` is a tagged union (server, custom): `[orchestrator.client]` (the reference's
spelling) holds the server backend's settings and a setting there beside a custom backend is refused when the config
is read (naming the field and the fix); the short forms (`backend = "NAME"`, `--backend NAME`) still parse, and the
resolved config reads back equal."""

from __future__ import annotations

import pytest

from prime_rl.config.client import ClientConfig
from prime_rl.config.eval_backend import CustomBackendConfig
from prime_rl.config.loader import ConfigError, parse_config, write_config
from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.config.orchestrator_backend import ServerClientBackendConfig
from prime_rl.config.rl import RLConfig


def parse(tmp_path, toml: str = "", *flags: str) -> OrchestratorConfig:
    path = tmp_path / "orch.toml"
    path.write_text(toml)
    return parse_config(OrchestratorConfig, ["@", str(path), *flags])


def test_the_reference_client_section_is_the_server_backends_settings(tmp_path):
    cfg = parse(tmp_path, '[client]\nbase_url = ["http://h:9", "http://h:10"]\nrequest_timeout_s = 5\n')
    assert cfg.backend == ServerClientBackendConfig()
    assert cfg.client == ClientConfig(base_url=["http://h:9", "http://h:10"], request_timeout_s=5)
    cfg = parse(tmp_path, 'backend = "server"\n[client]\napi_key = "k"\n')
    assert cfg.backend.type == "server" and cfg.client.api_key == "k"
    rl_toml = tmp_path / "rl.toml"
    rl_toml.write_text('[orchestrator.client]\nbase_url = ["http://h:9"]\n')
    rl = parse_config(RLConfig, ["@", str(rl_toml), "--model.name", "m"])
    assert rl.orchestrator.backend.type == "server" and rl.orchestrator.client.base_url == ["http://h:9"]


def test_a_custom_backend_by_name_table_or_flag(tmp_path):
    want = CustomBackendConfig(import_path="my_backend:Oracle")
    assert parse(tmp_path, 'backend = "my_backend:Oracle"\n').backend == want
    assert parse(tmp_path, '[backend]\ntype = "my_backend:Oracle"\n').backend == want
    assert parse(tmp_path, "", "--backend", "my_backend:Oracle").backend == want
    cfg = parse(tmp_path, '[backend]\ntype = "custom"\nimport_path = "reverse-oracle"\nkwargs = {k = 1}\n')
    assert cfg.backend == CustomBackendConfig(import_path="reverse-oracle", kwargs={"k": 1})


@pytest.mark.parametrize("toml,flags,field,where", [
    ('backend = "my_backend:Oracle"\n[client]\nbase_url = ["http://h:9"]\n', [], r"client.base_url = \['http://h:9'\]",
     r"in .*orch.toml"),
    ('[client]\nparallel_sampling = true\n', ["--backend", "my_backend:Oracle"], "client.parallel_sampling = True",
     r"in .*orch.toml"),
    ('backend = "my_backend:Oracle"\n', ["--client.max-retries", "1"], "client.max_retries = 1",
     "from --client.max-retries"),
])  # fmt: skip
def test_a_client_setting_beside_a_custom_backend_is_refused(tmp_path, toml, flags, field, where):
    """The client's settings reach the server backend only; a custom backend would ignore them. The message names
    the section as the orchestrator's own config spells it ([client]) and where the setting was made."""
    with pytest.raises(ConfigError, match=rf"^  `{field}` \({where}\): a setting of backend.type = 'server' \(the "
                                          r"inference-server client\), but backend.type is 'custom' "
                                          r"\(my_backend:Oracle\); drop the \[client\] settings \(a custom backend "
                                          r"reads its own settings from backend.kwargs\) or set backend.type = 'server'"):
        parse(tmp_path, toml, *flags)
    with pytest.raises(ValueError, match=r"`client.api_key = <redacted>`: a setting of backend.type = 'server'"):
        OrchestratorConfig(backend="my_backend:Oracle", client={"api_key": "k"})


def test_rl_names_the_orchestrators_client_section_as_its_own(tmp_path):
    """Under `rl` the same refusal names [orchestrator.client] and where the setting was made, once."""
    rl_toml = tmp_path / "rl.toml"
    rl_toml.write_text('[orchestrator]\nbackend = "my_backend:Oracle"\n[orchestrator.client]\nmax_retries = 2\n')
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["@", str(rl_toml), "--model.name", "m"])
    msg = str(e.value)
    assert f"`client.max_retries = 2` (in {rl_toml})" in msg and "drop the [orchestrator.client] settings" in msg
    assert msg.count(str(rl_toml)) == 1


def test_a_client_setting_in_the_backend_table_is_refused(tmp_path):
    """The server backend's settings have one place, [orchestrator.client]; written in [orchestrator.backend] they
    are refused, naming the section they belong in."""
    with pytest.raises(ConfigError, match=r"backend: base_url is a setting of the server backend's client, which the "
                                          r"orchestrator reads from \[client\]; move it there "
                                          r"\(client.base_url\) \(in .*orch.toml\)"):
        parse(tmp_path, '[backend]\nbase_url = ["http://h:9"]\n')
    with pytest.raises(ConfigError, match=r"orchestrator.backend: api_key is a setting of the server backend's "
                                          r"client, which the orchestrator reads from \[orchestrator.client\]"):
        parse_config(RLConfig, ["--model.name", "m", "--orchestrator.backend.api-key", "k"])


def test_a_misspelt_setting_of_the_server_backend_suggests_the_client_field(tmp_path):
    """The server backend's only settings are the client's: a name close to one of them, written in the backend's
    table, suggests that client field."""
    with pytest.raises(ConfigError, match=r"backend: base_ur is not a setting of the server backend; did you mean "
                                          r"client.base_url \(a setting of the server backend's client, which the "
                                          r"orchestrator reads from \[client\]\)\? \(in .*orch.toml\)"):
        parse(tmp_path, '[backend]\ntype = "server"\nbase_ur = ["http://h:9"]\n')
    with pytest.raises(ConfigError, match=r"orchestrator.backend: max_retry is not a setting of the server backend; "
                                          r"did you mean client.max_retries .*\[orchestrator.client\]\)\? \(from "
                                          r"--orchestrator.backend.max-retry\)"):
        parse_config(RLConfig, ["--model.name", "m", "--orchestrator.backend.max-retry", "1"])


@pytest.mark.parametrize("flags", [[], ["--client.base-url", "http://h:9", "--client.api-key", "k"],
                                   ["--backend", "my_backend:Oracle", "--backend.kwargs", '{"urls": ["http://h:9"]}']])
def test_the_resolved_config_reads_back_equal(tmp_path, flags):
    cfg = parse(tmp_path, "", *flags)
    out = write_config(cfg, tmp_path / "resolved.toml")  # the secret (client.api_key) by environment
    text = out.read_text()
    assert "[backend]" in text and "[client]" in text
    assert parse_config(OrchestratorConfig, ["@", str(out)]) == cfg


def _backend_module(folder, monkeypatch, loads_weights: bool) -> None:
    """An importable `my_backend:Oracle` (a stub class: rl's pre-flight imports it, nothing builds it)."""
    (folder / "my_backend.py").write_text(f"class Oracle:\n    loads_weights = {loads_weights}\n")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(__import__("sys").modules, "my_backend", raising=False)


def test_rl_refuses_a_custom_backend_before_starting_anything(tmp_path, monkeypatch):
    """rl's pre-flight imports the custom backend (the orchestrator would refuse it only after inference, trainer
    and env servers started): an import path that does not import, or a backend that cannot load policy versions."""
    from pathlib import Path

    from prime_rl.launcher.errors import PreflightError
    from prime_rl.launcher.preflight import check_extensions

    example = Path(__file__).resolve().parents[1] / "examples" / "reverse_text" / "rl.toml"
    cfg = parse_config(RLConfig, ["@", str(example), "--orchestrator.backend", "my_backnd:Oracle"])
    with pytest.raises(PreflightError, match="orchestrator.backend.import_path"):
        check_extensions(cfg)
    _backend_module(tmp_path, monkeypatch, loads_weights=False)
    cfg = parse_config(RLConfig, ["@", str(example), "--orchestrator.backend", "my_backend:Oracle"])
    with pytest.raises(PreflightError, match="cannot load new policy versions"):
        check_extensions(cfg)
    _backend_module(tmp_path, monkeypatch, loads_weights=True)
    check_extensions(cfg)


def test_rl_leaves_the_client_of_a_custom_backend_alone(tmp_path, monkeypatch):
    """`rl` points `[orchestrator.client]` at the replicas it starts for the server backend only: with a custom
    backend the orchestrator's written config keeps the client's defaults and reads back (not refused)."""

    _backend_module(tmp_path, monkeypatch, loads_weights=True)

    from prime_rl.launcher.layout import Layout
    from prime_rl.launcher.plan import resolve, write_configs
    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.ports import free_port

    example = _example_without_inference(tmp_path)
    args = ["@", str(example), "--model.name", str(cached_tiny_model()), "--output-dir", str(tmp_path / "run")]
    served = resolve(parse_config(RLConfig, args + ["--inference.server.port", str(free_port())]), Layout.single(),
                     probe=lambda url: False, gpus=[])  # fmt: skip
    assert served.configs["orchestrator"].client.base_url != ClientConfig().base_url
    args += ["--orchestrator.backend", "my_backend:Oracle", "--output-dir", str(tmp_path / "custom")]
    plan = resolve(parse_config(RLConfig, args), Layout.single(), probe=lambda url: False, gpus=[])
    path = write_configs(plan)["orchestrator"]
    orch = parse_config(OrchestratorConfig, ["@", str(path)])
    assert orch == plan.configs["orchestrator"] and orch.client == ClientConfig()
    assert orch.backend == CustomBackendConfig(import_path="my_backend:Oracle")


def test_the_documented_custom_backend_block_parses(tmp_path):
    """docs/extending.md's `[orchestrator.backend]` block reads as a custom backend with its kwargs."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "extending.md").read_text()
    block = re.search(r"```toml\n(\[orchestrator\.backend\]\n.*?)```", doc, flags=re.S).group(1)
    path = tmp_path / "rl.toml"
    path.write_text(block)
    backend = parse_config(RLConfig, ["@", str(path), "--model.name", "m"]).orchestrator.backend
    assert backend == CustomBackendConfig(import_path="my_backend:MyEngine",
                                          kwargs={"urls": ["http://127.0.0.1:30000"]})  # fmt: skip


def _example_without_inference(folder):
    """examples/reverse_text/rl.toml without its `[inference.vllm]` table (settings of rl's inference server)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "examples" / "reverse_text" / "rl.toml").read_text()
    assert text.count("[inference.vllm]") == 1 and text.rstrip().endswith('tool_call_parser = "None"')
    path = folder / "rl.toml"
    path.write_text(text[: text.index("[inference.vllm]")])
    return path


def test_rl_starts_no_inference_server_for_a_custom_backend(tmp_path, monkeypatch, capsys):
    """A custom backend samples from an engine of its own: the plan (and `rl --dry-run`) holds no inference
    replica, no replica config and nothing for the orchestrator to wait for; the server backend's plan has one."""
    from prime_rl.launcher.dryrun import dry_run
    from prime_rl.launcher.layout import Layout
    from prime_rl.launcher.placement import place
    from prime_rl.launcher.plan import resolve
    from prime_rl.models.tiny import cached_tiny_model
    from prime_rl.ports import free_port

    _backend_module(tmp_path, monkeypatch, loads_weights=True)
    example = _example_without_inference(tmp_path)
    args = ["@", str(example), "--model.name", str(cached_tiny_model())]
    port = free_port()
    server = resolve(parse_config(RLConfig, args + ["--output-dir", str(tmp_path / "server"),
                                                    "--inference.server.port", str(port)]),
                     Layout.single(), probe=lambda url: False, gpus=[])  # fmt: skip
    assert [p.name for p in server.processes if p.role == "inference"] == ["inference"] and "inference" in server.configs
    custom_cfg = parse_config(RLConfig, args + ["--output-dir", str(tmp_path / "custom"),
                                                "--orchestrator.backend", "my_backend:Oracle"])  # fmt: skip
    custom = resolve(custom_cfg, Layout.single(), probe=lambda url: False, gpus=[])
    assert [p.role for p in custom.processes] == ["trainer", "orchestrator"]  # reverse-text runs in-process
    assert custom.replicas == [] and not any(name.startswith("inference") for name in custom.configs)
    # on GPUs the trainer takes its GPUs and no inference GPU is needed (one GPU is enough)
    assert place(custom_cfg, gpus=["0"]).env["inference"] == {"CUDA_VISIBLE_DEVICES": ""}
    with pytest.raises(Exception, match="deployment.num_train_gpus \\+ deployment.num_infer_gpus = 2 GPUs"):
        place(parse_config(RLConfig, args), gpus=["0"])
    assert dry_run(parse_config(RLConfig, args + ["--output-dir", str(tmp_path / "dry"),
                                                  "--orchestrator.backend", "my_backend:Oracle"])) == 0  # fmt: skip
    out = capsys.readouterr().out
    plan = out[out.index("plan:"):]
    assert "\n  trainer " in plan and "\n  orchestrator " in plan and "\n  inference " not in plan
    assert not (tmp_path / "dry" / "configs" / "inference.toml").exists()


@pytest.mark.parametrize("flags,message", [
    (["--inference.vllm.max-model-len", "1024"], r"inference.vllm.max_model_len is set, but orchestrator.backend.type "
     r"= 'custom' \(my_backend:Oracle\) samples from an engine of its own and rl starts no inference server for it, so "
     r"the setting would do nothing; remove it \(a custom backend reads its own settings from "
     r"orchestrator.backend.kwargs\), or sample from rl's inference servers with orchestrator.backend.type = 'server'"),
    (["--deployment.infer-replicas-per-node", "2"], r"^deployment.infer_replicas_per_node is set, but"),
])  # fmt: skip
def test_rl_refuses_what_would_configure_an_inference_server_beside_a_custom_backend(tmp_path, monkeypatch, flags,
                                                                                      message):
    """With no inference server started, its settings would do nothing (refused, naming the field and the fix)."""
    from prime_rl.launcher.errors import PreflightError
    from prime_rl.launcher.preflight import check_custom_backend

    _backend_module(tmp_path, monkeypatch, loads_weights=True)
    cfg = parse_config(RLConfig, ["@", str(_example_without_inference(tmp_path)), "--model.name", "m",
                                  "--orchestrator.backend", "my_backend:Oracle", *flags])  # fmt: skip
    with pytest.raises(PreflightError, match=message):
        check_custom_backend(cfg)
    with pytest.raises(PreflightError, match=r"in a multi-node run: rl starts no inference server for a custom "
                                             r"backend, so the deployment.num_infer_nodes = 1 inference node\(s\) would "
                                             r"run nothing; run it on one node"):
        check_custom_backend(cfg, multi=True)

