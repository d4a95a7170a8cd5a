"""Config checks of the training recipes that need the whole config or where its values were set: settings a later
layer switched off, a teacher that cannot score a full sample, groups of one rollout without a loss signal, and
the origins named in the recipes' refusals."""

from __future__ import annotations

import pytest

from prime_rl.config.loader import ConfigError, parse_config, where_set
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


# ---- the teacher rl starts ----
def _rl(tmp_path, text: str, *flags: str):
    from prime_rl.config.rl import RLConfig

    path = tmp_path / "rl.toml"
    path.write_text('seq_len = 512\n\n[trainer.loss]\ntype = "opd"\n\n[teacher.model]\nname = "teacher"\n\n' + text)
    return path, parse_config(RLConfig, ["@", str(path), *flags])


def test_a_teacher_context_below_seq_len_plus_one_is_refused_naming_both_fields(tmp_path):
    """The teacher scores samples of up to seq_len tokens plus one generated token: a max_model_len of its own, or
    one inherited from [inference.vllm], below seq_len + 1 is refused, naming both fields and where they were set."""
    with pytest.raises(ConfigError) as e:
        _rl(tmp_path, "[teacher.vllm]\nmax_model_len = 256\n")
    path = tmp_path / "rl.toml"
    assert (f"`teacher.vllm.max_model_len = 256` (in {path}) tokens, but it scores whole samples of up to "
            f"`seq_len = 512` (in {path}) tokens plus one generated token, so it needs 513") in str(e.value)
    assert "set teacher.vllm.max_model_len = 513 (or more), or lower seq_len" in str(e.value)
    with pytest.raises(ConfigError, match=r"holds `inference.vllm.max_model_len = 512` \(from "
                                          r"--inference.vllm.max-model-len\), which teacher.vllm.max_model_len "
                                          r"inherits \(unset under \[teacher.vllm\]\)"):
        _rl(tmp_path, "", "--inference.vllm.max-model-len", "512")
    _, cfg = _rl(tmp_path, "[teacher.vllm]\nmax_model_len = 513\n", "--inference.vllm.max-model-len", "512")
    assert cfg.teacher.vllm.max_model_len == 513
    _, cfg = _rl(tmp_path, "", "--inference.vllm.max-model-len", "1024")
    assert cfg.teacher.vllm.max_model_len == 1024


@pytest.mark.parametrize("name", ["tensor_parallel_size", "data_parallel_size"])
def test_a_teacher_split_over_several_devices_is_refused(tmp_path, name):
    """rl starts the teacher as one engine on one device beside replica 0: a parallel size above 1 is refused."""
    with pytest.raises(ConfigError, match=rf"`teacher.vllm.{name} = 2` \(in .*rl.toml\): rl starts the teacher server "
                                          rf"as one engine.*set teacher.vllm.{name} = 1, or start a teacher split"):
        _rl(tmp_path, f"[teacher.vllm]\n{name} = 2\n")


# ---- groups of one rollout ----
def test_groups_of_one_without_a_teacher_or_kl_term_are_refused(tmp_path):
    """GRPO, RLOO and MaxRL give a group of one advantage 0: without a teacher or a reference-KL term such a source
    never trains; refused naming the field, the source, where it was set and the fix (per source too)."""
    from prime_rl.config.rl import RLConfig

    orch = tmp_path / "orch.toml"
    orch.write_text("batch_size = 4\n\n[train]\ngroup_size = 1\n")
    with pytest.raises(ConfigError, match=rf"`train.group_size = 1` \(in {orch}\) \(source 'default'\): a group of "
                                          r"one rollout has advantage 0 under the 'grpo' estimator.*set "
                                          r"train.group_size >= 2, or train on a signal beyond the advantage"):
        parse_config(OrchestratorConfig, ["@", str(orch)])
    ok = parse_config(OrchestratorConfig, ["@", str(orch), "--gate.keep-for-kl"])  # the trainer has a KL term
    assert ok.train.group_sizes == [1]
    assert parse_config(OrchestratorConfig, ["@", str(orch), "--teacher.name", "t"]).teacher.name == "t"
    custom = OrchestratorConfig(batch_size=4, train={"group_size": 1},
                                advantage={"type": "custom", "import_path": "m:f"})  # its own baseline  # fmt: skip
    assert custom.train.group_size == 1
    two = [{"name": "a", "env": {"id": "digit-bandit"}},
           {"name": "b", "env": {"id": "digit-bandit"}, "group_size": 1, "advantage": {"type": "rloo"}}]  # fmt: skip
    with pytest.raises(ValueError, match=r"`train.source.1.group_size = 1` \(source 'b'\).*under the 'rloo' "
                                         r"estimator.*set train.source.1.group_size >= 2"):
        OrchestratorConfig(batch_size=4, train={"group_size": 2, "source": two})
    rl = tmp_path / "rl.toml"
    rl.write_text("[orchestrator]\nbatch_size = 4\n\n[[orchestrator.train.source]]\nname = \"a\"\nenv.id = "
                  "\"digit-bandit\"\ngroup_size = 1\n")  # fmt: skip
    with pytest.raises(ConfigError, match=rf"`orchestrator.train.source.0.group_size = 1` \(in {rl}\) \(source 'a'\)"
                                          r".*a teacher \(\[teacher.model\] name = ..., with \[trainer.loss\] type = \"opd\"\) "
                                          r"or a reference-KL term \(trainer.loss.ref_kl_coef > 0\)"):
        parse_config(RLConfig, ["@", str(rl)])
    kl = parse_config(RLConfig, ["@", str(rl), "--trainer.loss.ref-kl-coef", "0.1"])
    assert kl.orchestrator.gate.keep_for_kl and kl.orchestrator.train.group_sizes == [1]
    opd = parse_config(RLConfig, ["@", str(rl), "--trainer.loss.type", "opd", "--teacher.model.name", "t"])
    assert opd.orchestrator.teacher.name == "t"


# ---- origins in the refusals ----
@pytest.mark.parametrize("text, flags, named", [
    ('[teacher.model]\nname = "t"\n', [], "`teacher.model.name = 't'` (in {path}) sets a teacher"),
    ("", ["--orchestrator.teacher.name", "u"], "`orchestrator.teacher.name = 'u'` (from --orchestrator.teacher.name) "
                                               "sets a teacher"),
    ("", ["--trainer.loss.type", "opd"], "`trainer.loss.type = 'opd'` (from --trainer.loss.type) puts a teacher term"),
    ('[teacher.model]\nname = "t"\n', ["--trainer.loss.type", "opd", "--orchestrator.teacher.name", "u"],
     "`teacher.model.name = 't'` (in {path}) at http://127.0.0.1:8001, but [orchestrator.teacher] names "
     "`orchestrator.teacher.name = 'u'` (from --orchestrator.teacher.name)"),
])  # fmt: skip
def test_teacher_refusals_name_where_the_teacher_and_the_loss_term_were_set(tmp_path, text, flags, named):
    from prime_rl.config.rl import RLConfig

    path = tmp_path / "rl.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, ["@", str(path), *flags])
    assert named.format(path=path) in str(e.value)


def test_sft_and_length_penalty_refusals_name_where_each_field_was_set(tmp_path):
    """SFT's [val] without data or fraction names where [val] was set; eval.interval against publish_interval and
    length_penalty's cache_tokens against max_tokens name where each of the two was set."""
    from prime_rl.config.trainer import SFTConfig

    sft = tmp_path / "sft.toml"
    sft.write_text('[val]\ninterval = 10\n\n[eval]\ninterval = 10\n\n[[eval.source]]\nenv.id = "reverse-text"\n')
    with pytest.raises(ConfigError, match=rf"val: \[val\] sets neither val.data nor val.fraction: set exactly one.* "
                                          rf"\(in {sft}\)$"):
        parse_config(SFTConfig, ["@", str(sft)])
    with pytest.raises(ConfigError, match=r"val: \[val\] sets neither .* \(from --val.interval\)$"):
        parse_config(SFTConfig, ["--val.interval", "10"])
    with pytest.raises(ConfigError, match=rf"`eval.interval = 10` \(in {sft}\) must be a multiple of "
                                          r"`publish_interval = 3` \(from --publish-interval\).*set publish_interval "
                                          r"to a divisor of 10"):
        parse_config(SFTConfig, ["@", str(sft), "--val.fraction", "0.1", "--publish-interval", "3"])
    orch = tmp_path / "orch.toml"
    orch.write_text('[[train.source]]\nenv.id = "digit-bandit"\nlength_penalty = { max_tokens = 8, cache_tokens = 4 }\n')
    with pytest.raises(ConfigError, match=rf"cache_tokens \(4\) is above length_penalty.max_tokens \(2\).*lower "
                                          rf"cache_tokens to at most 2, or raise max_tokens \(train.source\[0\]."
                                          rf"length_penalty.cache_tokens in {orch}, train.source\[0\].length_penalty."
                                          r"max_tokens from --train.source.0.length-penalty.max-tokens\)"):
        parse_config(OrchestratorConfig, ["@", str(orch), "--train.source.0.length-penalty.max-tokens", "2"])


# ---- eval sources have no train-only settings ----
def test_eval_sources_have_no_length_penalty_advantage_group_size_or_ratio(tmp_path):
    """An eval source's schema holds no train-only setting (so docs, --help and "did you mean" never offer one); one
    set anyway is refused with why and where it was set."""
    from prime_rl.config.orchestrator import EvalSourceConfig, SourceConfig
    from prime_rl.config.rl import RLConfig

    train_only = {"length_penalty", "advantage", "group_size", "ratio"}
    assert train_only <= set(SourceConfig.model_fields) and not train_only & set(EvalSourceConfig.model_fields)
    path = tmp_path / "rl.toml"
    path.write_text('[[orchestrator.eval.source]]\nname = "e"\nenv.id = "digit-bandit"\n'
                    "length_penalty = { max_tokens = 8, cache_tokens = 4 }\n")  # fmt: skip
    with pytest.raises(ConfigError, match=rf"orchestrator.eval.source: `source.0.length_penalty = {{...}}` \(in "
                                          rf"{path}\) is a train-source setting: eval reports the environment's "
                                          rf"rewards unshaped; set length_penalty on the \[\[orchestrator.train."
                                          rf"source\]\] entry instead"):
        parse_config(RLConfig, ["@", str(path)])
    path.write_text('[[orchestrator.eval.source]]\nname = "e"\nenv.id = "digit-bandit"\nratio = 2.0\n')
    with pytest.raises(ConfigError, match=r"`source.0.ratio = 2.0` \(in .*\) is a train-source setting: every eval "
                                          r"source plays its own eval split"):
        parse_config(RLConfig, ["@", str(path)])
    path.write_text('[[orchestrator.eval.source]]\nname = "e"\nenv.id = "digit-bandit"\nlenght_penalty = 1\n')
    with pytest.raises(ConfigError) as e:  # a misspelling is not steered to a setting eval sources lack
        parse_config(RLConfig, ["@", str(path)])
    assert "unknown key" in str(e.value) and "length_penalty" not in str(e.value)
