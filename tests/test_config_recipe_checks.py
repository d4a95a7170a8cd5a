"""Config checks of the training recipes that need the whole config or where its values were set: settings a later
layer switched off, a teacher that cannot score a full sample, groups of one rollout without a loss signal, and
the origins named in the recipes' refusals."""

from __future__ import annotations

from prime_rl.config.loader import parse_config, where_set
from prime_rl.config.orchestrator import OrchestratorConfig
from prime_rl.config.recipes import inert_recipe_settings
from prime_rl.config.resolved import config_to_toml


# ---- settings switched off by a later layer ----
def _inert(args: list[str]) -> list[list[str]]:
    cfg = parse_config(OrchestratorConfig, args)
    return [fields for fields, _ in inert_recipe_settings(cfg, where_set)]


def test_a_layer_switching_a_recipe_off_warns_about_values_set_before_even_at_their_default(tmp_path):
    """A base turns the gate and the difficulty pool on with default-valued settings; a flag or a second file turns
    them off: those settings can never act and are reported (where they were set decides, not their value)."""
    base = tmp_path / "base.toml"
    base.write_text("[gate]\nreject_uniform = true\nmax_resample_factor = 2.0\n\n"
                    "[curriculum]\nsampler = \"difficulty_pool\"\nwindow = 16\neasy_weight = 0.2\n")  # fmt: skip
    expected = [["gate.max_resample_factor"], ["curriculum.window", "curriculum.easy_weight"]]
    assert _inert(["@", str(base), "--gate.reject-uniform", "false", "--curriculum.sampler", "uniform"]) == expected
    off = tmp_path / "off.toml"
    off.write_text("[gate]\nreject_uniform = false\n\n[curriculum]\nsampler = \"uniform\"\n")
    assert _inert(["@", str(base), "@", str(off)]) == expected
    # the same file sets the switch off and a default value: nothing is lost; a value off its default still is
    one = tmp_path / "one.toml"
    one.write_text("[gate]\nreject_uniform = false\nmax_resample_factor = 2.0\n\n"
                   "[curriculum]\nsampler = \"uniform\"\nwindow = 16\neasy_weight = 0.2\n")  # fmt: skip
    assert _inert(["@", str(one)]) == [["curriculum.easy_weight"]]


def test_a_resolved_config_reports_only_values_off_their_default(tmp_path):
    """A resolved config (configs/orchestrator.toml of a run) holds every field in one file: its default values
    are not reported, a value off its default is."""
    cfg = OrchestratorConfig(gate={"reject_uniform": False}, curriculum={"sampler": "uniform"})
    resolved = tmp_path / "orchestrator.toml"
    resolved.write_text(config_to_toml(cfg))
    assert _inert(["@", str(resolved)]) == []
    changed = OrchestratorConfig(gate={"reject_uniform": False, "max_resample_factor": 3.0})
    resolved.write_text(config_to_toml(changed))
    assert _inert(["@", str(resolved)]) == [["gate.max_resample_factor"]]
