"""`evals`' `[backend]` is a tagged union (server, transformers, custom): each type takes only its own settings, a
setting of another type is refused when the config is read (naming the field, where it was set and the fix), the
flat form (`backend = "NAME"` with `[client]` / `[local]`, and their flags) still parses, and each type's resolved
config reads back equal."""

from __future__ import annotations

import pytest

from prime_rl.config.eval_backend import CustomBackendConfig, ServerBackendConfig, TransformersBackendConfig
from prime_rl.config.loader import ConfigError, parse_config, write_config
from prime_rl.config.orchestrator import EvalCommandConfig


def parse(tmp_path, toml: str = "", *flags: str) -> EvalCommandConfig:
    path = tmp_path / "eval.toml"
    path.write_text(toml)
    return parse_config(EvalCommandConfig, ["@", str(path), *flags])


def test_each_type_with_its_own_settings(tmp_path):
    assert parse(tmp_path).backend == ServerBackendConfig()
    cfg = parse(tmp_path, '[backend]\ntype = "transformers"\nmax_batch = 8\nthreads = 2\n')
    assert cfg.backend == TransformersBackendConfig(max_batch=8, threads=2)
    cfg = parse(tmp_path, '[backend]\nbase_url = ["http://a:1", "http://b:2"]\n')
    assert cfg.backend.type == "server" and cfg.backend.base_url == ["http://a:1", "http://b:2"]
    cfg = parse(tmp_path, '[backend]\ntype = "custom"\nimport_path = "my_backend:Oracle"\nkwargs = {k = 1}\n')
    assert cfg.backend == CustomBackendConfig(import_path="my_backend:Oracle", kwargs={"k": 1})
    cfg = parse(tmp_path, "", "--backend", "transformers", "--backend.max-batch", "4")
    assert cfg.backend == TransformersBackendConfig(max_batch=4)
    cfg = parse(tmp_path, "", "--backend.base-url", "http://a:1", "http://b:2")
    assert cfg.backend.base_url == ["http://a:1", "http://b:2"]


def test_the_flat_form_and_the_reference_client_section_still_parse(tmp_path):
    cfg = parse(tmp_path, '[client]\nbase_url = ["http://h:9"]\nrequest_timeout_s = 5\n')
    assert cfg.backend == ServerBackendConfig(base_url=["http://h:9"], request_timeout_s=5)
    cfg = parse(tmp_path, 'backend = "transformers"\n[local]\nmax_batch = 3\n')
    assert cfg.backend == TransformersBackendConfig(max_batch=3)
    cfg = parse(tmp_path, 'backend = "my_backend:Oracle"\n')
    assert cfg.backend == CustomBackendConfig(import_path="my_backend:Oracle")
    assert parse(tmp_path, '[backend]\ntype = "reverse-oracle"\n').backend.import_path == "reverse-oracle"
    cfg = parse(tmp_path, "", "--client.base-url", "http://h:9", "--client.health-timeout-s", "2")
    assert cfg.backend == ServerBackendConfig(base_url=["http://h:9"], health_timeout_s=2)
    assert parse(tmp_path, "", "--backend", "transformers", "--local.threads", "1").backend.threads == 1
    assert EvalCommandConfig(client={"base_url": ["http://h:9"]}).backend.base_url == ["http://h:9"]


@pytest.mark.parametrize("toml,flags,message", [
    ('[backend]\nmax_batch = 8\n', [], r"backend.max_batch \(set in .*eval.toml\): not a setting of backend.type = "
     r"'server' .*max_batch is a setting of type 'transformers'; remove max_batch from \[backend\] in .*eval.toml, or "
     r"choose type 'transformers'"),
    ('[backend]\nbase_url = ["http://h:9"]\n', ["--backend", "transformers"], r"backend.base_url \(set in "
     r".*eval.toml\): not a setting of backend.type = 'transformers' \(from --backend\); base_url is a setting "
     r"of type 'server'"),
    ('[client]\nbase_url = ["http://h:9"]\n', ["--backend", "transformers"], r"client.base_url: a setting of "
     r"backend.type = 'server', but backend.type is 'transformers'; drop \[client\] or set backend.type = 'server'"),
    ('[local]\nmax_batch = 3\n', [], r"local.max_batch: a setting of backend.type = 'transformers', but "
     r"backend.type is 'server'; drop \[local\] or set backend.type = 'transformers'"),
    ('[client]\nbase_url = ["http://h:9"]\n[backend]\nbase_url = ["http://h:8"]\n', [], r"client.base_url and "
     r"backend.base_url are both set: keep backend.base_url"),
    ('backend = "my_backend:Oracle"\n[client]\nbase_url = ["http://h:9"]\n', [], r"client.base_url: a setting of "
     r"backend.type = 'server', but backend.type is 'custom'"),
])  # fmt: skip
def test_a_setting_of_another_type_is_refused_with_the_fix(tmp_path, toml, flags, message):
    with pytest.raises(ConfigError, match=message):
        parse(tmp_path, toml, *flags)


@pytest.mark.parametrize("toml,flags,message", [
    ('[backend]\nbase_ur = ["http://h:9"]\n', [], r"backend.base_ur \(set in .*eval.toml\): not a setting of "
     r"backend.type = 'server' \(the default\); remove base_ur from \[backend\] in .*eval.toml; did you mean "
     r"`backend.base_url` \(flag `--backend.base-url`\)\?"),
    ("", ["--backend", "transformers", "--backend.max-bach", "3"], r"backend.max_bach \(set from --backend.max-bach\): "
     r"not a setting of backend.type = 'transformers' \(from --backend\); drop --backend.max-bach; did you mean "
     r"`backend.max_batch` \(flag `--backend.max-batch`\)\?"),
])  # fmt: skip
def test_a_misspelt_setting_of_the_chosen_type_gets_a_suggestion(tmp_path, toml, flags, message):
    """A name close to a field of the chosen type (and no type's field) suggests that field, and the bare
    `--backend transformers` is named as typed."""
    with pytest.raises(ConfigError, match=message):
        parse(tmp_path, toml, *flags)


@pytest.mark.parametrize("flags", [[], ["--backend", "transformers", "--backend.threads", "2"],
                                   ["--backend", "my_backend:Oracle"], ["--backend.api-key", "k"]])  # fmt: skip
def test_each_type_reads_back_from_its_resolved_config(tmp_path, flags):
    cfg = parse(tmp_path, "", *flags)
    out = write_config(cfg, tmp_path / "resolved.toml")  # a secret (backend.api_key) by environment
    assert "[backend]" in out.read_text() and "[client]" not in out.read_text()
    assert parse_config(EvalCommandConfig, ["@", str(out)]) == cfg
