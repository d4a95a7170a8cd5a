"""The "did you mean" hint of an unknown key: a misspelt section suggests the full flag, the reference
prime-rl's `[orchestrator.sampling]` names `[orchestrator.train.sampling]`, a key inside a list item keeps the item's
index in the suggested flag, and a known name in the wrong place (`teacher.name`) names where it lives."""

from pathlib import Path

import pytest

from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.config.rl import RLConfig

RL_TOML = str(Path(__file__).resolve().parents[1] / "examples/gridsim/rl.toml")


def _error(args: list[str]) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(RLConfig, args)
    return str(e.value)


def test_misspelt_section_suggests_the_full_flag():
    msg = _error(["--orchestrater.batch-size", "4"])
    assert "did you mean `orchestrator.batch_size` (flag `--orchestrator.batch-size`)?" in msg
    assert "flag `--orchestrator`)" not in msg


def test_misspelt_section_in_a_file_suggests_the_full_key(tmp_path):
    f = tmp_path / "typo.toml"
    f.write_text("[orchestrater]\nbatch_size = 4\n")
    assert "did you mean `orchestrator.batch_size` (flag `--orchestrator.batch-size`)?" in _error(["@", str(f)])


def test_reference_sampling_section_names_ours():
    msg = _error(["--orchestrator.sampling.temperature", "0.5"])
    assert "orchestrator.sampling: unknown key (from --orchestrator.sampling.temperature)" in msg
    assert "the reference prime-rl's `orchestrator.sampling` is `orchestrator.train.sampling` here" in msg
    assert "(flag `--orchestrator.train.sampling.temperature`)" in msg


@pytest.mark.parametrize("cls,flag,want", [
    ("rl", "--trainer.optim.learning-rate", "did you mean `trainer.optim.lr` (flag `--trainer.optim.lr`)?"),
    ("sft", "--optim.learning-rate", "did you mean `optim.lr` (flag `--optim.lr`)?"),
])
def test_other_frameworks_learning_rate_names_lr(cls, flag, want):
    from prime_rl.config.trainer import SFTConfig

    with pytest.raises(ConfigError) as e:
        parse_config({"rl": RLConfig, "sft": SFTConfig}[cls], [flag, "1e-5"])
    assert "other frameworks' `optim.learning_rate` is `optim.lr` here: " + want in str(e.value)


def test_a_misspelt_key_inside_a_list_item_keeps_the_index():
    msg = _error(["@", RL_TOML, "--orchestrator.train.source.0.lenght-penalty.max-tokens", "64"])
    assert ("did you mean `orchestrator.train.source[0].length_penalty.max_tokens` "
            "(flag `--orchestrator.train.source.0.length-penalty.max-tokens`)?") in msg  # fmt: skip
    msg = _error(["@", RL_TOML, "--orchestrator.train.source.0.env.agent.max-trns", "3"])
    suggested = msg.split("(flag `")[1].split("`")[0]
    assert suggested == "--orchestrator.train.source.0.env.agent.max-turns"
    cfg = parse_config(RLConfig, ["@", RL_TOML, suggested, "3"])  # the suggested flag is accepted
    assert cfg.orchestrator.train.source[0].env.agent.max_turns == 3


@pytest.mark.parametrize("args,want", [
    (["--teacher.name", "x"], "teacher.name: unknown key (got 'x') (from --teacher.name); did you mean "
     "`teacher.model.name` (flag `--teacher.model.name`)?"),
    (["@", RL_TOML, "--orchestrator.train.source.0.max-turns", "3"],
     "did you mean `orchestrator.train.source[0].env.agent.max_turns` "
     "(flag `--orchestrator.train.source.0.env.agent.max-turns`)?"),
    (["--orchestrator.temperature", "0.5"], "did you mean `orchestrator.train.sampling.temperature` (flag "
     "`--orchestrator.train.sampling.temperature`) or `orchestrator.eval.sampling.temperature` (flag "
     "`--orchestrator.eval.sampling.temperature`)?"),
    (["--orchestrator.max-turns", "3"], "did you mean `orchestrator.train.source[N].env.agent.max_turns` (flag "
     "`--orchestrator.train.source.N.env.agent.max-turns`) or `orchestrator.eval.source[N].env.agent.max_turns`"),
])  # fmt: skip
def test_a_known_name_in_the_wrong_place_names_where_it_lives(args, want):
    assert want in _error(args)


def test_a_close_spelling_beside_the_key_and_the_name_elsewhere_are_both_named():
    msg = _error(["--trainer.batch-size", "4"])
    assert ("did you mean `trainer.micro_batch_size` (flag `--trainer.micro-batch-size`) or "
            "`orchestrator.batch_size` (flag `--orchestrator.batch-size`)?") in msg  # fmt: skip


@pytest.mark.parametrize("args,want", [
    (["--orchestrator.algo", "grpo"], "orchestrator.algo: unknown key (got 'grpo') (from --orchestrator.algo); the "
     "reference prime-rl's `orchestrator.algo` (`type` grpo, opd, ...) is two settings here: the advantage estimator "
     "`orchestrator.advantage.type` (grpo, rloo, maxrl; per source `orchestrator.train.source[N].advantage`) and the "
     "trainer's loss `trainer.loss.type` (opd: on-policy distillation, scored by `[orchestrator.teacher]`)"),
    (["--orchestrator.algo.teacher.name", "m"], "the reference prime-rl's `orchestrator.algo.teacher` is "
     "`orchestrator.teacher` here (`name`, `base_url`; under `rl`, `[teacher] model.name` also starts the teacher "
     "server): did you mean `orchestrator.teacher.name` (flag `--orchestrator.teacher.name`)?"),
    (["--resume.step", "3"], "resume: Input should be a valid boolean (from --resume.step); the reference "
     "prime-rl's `resume.step` is `ckpt.resume_step` here (-1 = the newest complete checkpoint; `rl` also takes "
     "`resume = true` for it): did you mean `ckpt.resume_step` (flag `--ckpt.resume-step`)?"),
    (["--resume.dir", "x/step_5"], "the reference prime-rl's `resume.dir` is `ckpt.resume_dir` here: did you mean "
     "`ckpt.resume_dir` (flag `--ckpt.resume-dir`)?"),
    (["--gates", "{}"], "gates: unknown key (got '{}') (from --gates); the reference prime-rl's "
     "`orchestrator.train.source[N].curriculum.gates` is `orchestrator.gate` here (one gate for the run: "
     "`reject_uniform`, `advantage_range = [low, high]`): did you mean `orchestrator.gate` (flag `--orchestrator.gate`)?"),
    (["--orchestrator.group-size", "8"], "the reference prime-rl's `orchestrator.group_size` is "
     "`orchestrator.train.group_size` here"),
    (["--orchestrator.train.filter-zero-advantages", "false"], "the reference prime-rl's "
     "`orchestrator.train.filter_zero_advantages` is `orchestrator.advantage.filter_zero` here"),
    (["--monitors.wandb.project", "p"], "monitors: unknown key (from --monitors.wandb.project); the reference "
     "prime-rl's `monitors.wandb` is `wandb` here: did you mean `wandb.project` (flag `--wandb.project`)?"),
    (["--weight-broadcast.type", "filesystem"], "the reference prime-rl's `weight_broadcast` is `weight_transport` "
     "here (`type = \"filesystem\"`, or \"collective\" for an NCCL broadcast): did you mean `weight_transport.type`"),
])  # fmt: skip
def test_a_reference_name_says_which_field_does_it_here(args, want):
    assert want in _error(args)


def test_reference_sections_in_a_file_name_the_fields_here_once_each(tmp_path):
    f = tmp_path / "ref.toml"
    f.write_text('[orchestrator.algo]\ntype = "opd"\n\n[orchestrator.algo.teacher]\nname = "t"\nbase_url = "u"\n\n'
                 '[[orchestrator.train.source]]\nname = "g"\nenv.id = "gridsim"\n\n'
                 '[orchestrator.train.source.curriculum.gates.signal]\ntype = "advantage_range"\n')
    msg = _error(["@", str(f)])
    assert msg.count("the reference prime-rl's `orchestrator.algo` (`type` grpo, opd, ...) is two settings") == 1
    assert msg.count("the reference prime-rl's `orchestrator.algo.teacher` is `orchestrator.teacher` here") == 1
    assert f"orchestrator.train.source[0].curriculum: unknown key (in {f}); the reference prime-rl's " \
           "`orchestrator.train.source[N].curriculum.gates` is `orchestrator.gate` here" in msg


def test_a_reference_name_in_another_command_names_that_commands_field(tmp_path):
    from prime_rl.config.orchestrator import OrchestratorConfig
    from prime_rl.config.trainer import SFTConfig

    f = tmp_path / "resume.toml"
    f.write_text("[resume]\nstep = 15\n\n[data]\nseq_len = 1024\n")
    with pytest.raises(ConfigError) as e:
        parse_config(SFTConfig, ["@", str(f)])
    assert f"resume: unknown key (in {f}); the reference prime-rl's `resume.step` is `ckpt.resume_step` here" in str(
        e.value)  # fmt: skip
    assert "the reference prime-rl's `data.seq_len` is `seq_len` here: did you mean `seq_len`" in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse_config(OrchestratorConfig, ["--algo.teacher.name", "t"])
    assert "`orchestrator.algo.teacher` is `teacher` here" in str(e.value)
    assert "did you mean `teacher.name` (flag `--teacher.name`)?" in str(e.value)


def test_the_references_newer_run_and_sft_spellings_name_the_fields_here(tmp_path):
    from prime_rl.config.trainer import SFTConfig

    f = tmp_path / "rl.toml"
    f.write_text('[[orchestrator.train.env]]\nname = "r"\ntaskset = { id = "reverse-text" }\n')
    msg = _error(["@", str(f)])
    assert f"orchestrator.train.env: unknown key (in {f}); the reference prime-rl's `orchestrator.train.env` is " \
           "`orchestrator.train.source` here (an entry's `id`, `args`, `taskset` and `harness` are `env.id`, " \
           "`env.args`, `env.taskset` and `env.agent.harness` there)" in msg
    f = tmp_path / "sft.toml"
    f.write_text('[[data.source]]\ndataset = "org/ds"\n\n[eval.select]\nlimit = 32\n')
    with pytest.raises(ConfigError) as e:
        parse_config(SFTConfig, ["@", str(f)])
    assert "data.source[0].dataset: unknown key (got 'org/ds') (in " in str(e.value)
    assert "the reference prime-rl's `data.source[N].dataset` is `name` of the `[[data.source]]` entry here" in str(
        e.value)  # fmt: skip
    assert "the reference prime-rl's `eval.select.limit` is `eval.num_examples` here: did you mean " \
           "`eval.num_examples` (flag `--eval.num-examples`)?" in str(e.value)
    for name in ("probabilities", "subsets", "splits"):
        with pytest.raises(ConfigError) as e:
            parse_config(SFTConfig, [f"--data.{name}", '["a"]'])
        assert f"the reference prime-rl's `data.{name}` is `data.source` here (one `[[data.source]]` per dataset" in \
            str(e.value)


@pytest.mark.parametrize("args,where", [
    (["--orchestrator.eval.num-examples", "-1"], "orchestrator.eval.num_examples"),
    (["--orchestrator.eval.source", '[{"name": "d", "env": {"id": "digit-bandit"}, "num_examples": -1}]'],
     "orchestrator.eval.source[0].num_examples"),
])  # fmt: skip
def test_the_references_all_examples_minus_one_says_leave_it_unset(args, where):
    msg = _error(["@", RL_TOML, *args])
    assert f"{where}: num_examples = -1 is the reference prime-rl's 'every eval task'; here leave num_examples unset " \
           "(None) to evaluate the whole eval split" in msg


def test_a_reference_env_list_names_where_each_key_of_its_entry_goes(tmp_path):
    f = tmp_path / "rl.toml"
    f.write_text('[[orchestrator.train.env]]\nname = "reverse-text"\ntaskset = { id = "reverse-text-v1", min_turns = 2 }\n'
                 'harness = { id = "null", runtime = { type = "subprocess" }, color = "red" }\n\n'
                 '[[orchestrator.eval.env]]\nenv.taskset = { id = "reverse-text-v1" }\n')  # fmt: skip
    msg = _error(["@", str(f)])
    assert "did you mean `orchestrator.train.source` (flag `--orchestrator.train.source`)? Its entry 0 here: " \
           "`[[orchestrator.train.source]]` with `name`, `env.taskset.id`, `env.taskset.args.min_turns`, " \
           "`env.agent.harness.id`, `env.agent.runtime.type`; no field here for `harness.color`." in msg
    assert f"orchestrator.eval.env: unknown key (in {f}); the reference prime-rl's `orchestrator.eval.env` is " \
           "`orchestrator.eval.source` here (an entry's `id`, `args`, `taskset` and `harness` are `env.id`, " \
           "`env.args`, `env.taskset` and `env.agent.harness` there): did you mean `orchestrator.eval.source` (flag `--orchestrator.eval.source`)? " \
           "Its entry 0 here: `[[orchestrator.eval.source]]` with `env.taskset.id`." in msg


def test_a_reference_env_entrys_id_and_args_are_mapped_to_env_id_and_env_args(tmp_path):
    from prime_rl.config.trainer import SFTConfig

    f = tmp_path / "rl.toml"
    f.write_text('[[orchestrator.train.env]]\nid = "reverse-text"\nargs = { seed = 1 }\n\n'
                 '[[orchestrator.eval.env]]\nid = "reverse-text"\nargs = { seed = 2 }\n')
    msg = _error(["@", str(f)])
    assert "Its entry 0 here: `[[orchestrator.train.source]]` with `env.id`, `env.args.seed`." in msg
    assert "Its entry 0 here: `[[orchestrator.eval.source]]` with `env.id`, `env.args.seed`." in msg
    assert "no field here" not in msg
    f.write_text('[[eval.env]]\nid = "reverse-text"\nargs = { seed = 1 }\nnum_examples = 3\n')
    with pytest.raises(ConfigError) as e:
        parse_config(SFTConfig, ["@", str(f)])
    assert "Its entry 0 here: `[[eval.source]]` with `env.id`, `env.args.seed`, `num_examples`." in str(e.value)


def test_the_references_deployment_names_name_the_fields_here(tmp_path):
    from prime_rl.config.trainer import SFTConfig

    f = tmp_path / "sft.toml"
    f.write_text("[deployment]\nnum_train_gpus = 2\nnum_infer_gpus = 1\nnum_eval_nodes = 1\nnum_train_nodes = 1\n"
                 "gpus_per_node = 8\n")  # fmt: skip
    with pytest.raises(ConfigError) as e:
        parse_config(SFTConfig, ["@", str(f)])
    msg = str(e.value)
    assert "deployment.num_train_gpus: unknown key (got 2) (in " in msg
    assert "the reference prime-rl's `deployment.num_train_gpus` is `deployment.num_gpus` here in `sft` (ranks per " \
           "node): did you mean `deployment.num_gpus` (flag `--deployment.num-gpus`)?" in msg
    assert "the reference prime-rl's `deployment.num_infer_gpus` (`num_eval_gpus`) has no field in `sft` here: the " \
           "inference server `sft` starts for `[eval]` takes the settings of `[inference]`; remove it" in msg
    assert "`deployment.num_eval_nodes` (`num_infer_nodes`) has no field in `sft` here: its online eval runs on one " \
           "node" in msg
    assert "the reference prime-rl's `deployment.num_train_nodes` is `deployment.num_nodes` here in `sft`" in msg
    assert "`deployment.gpus_per_node` (the GPUs of every node) is per role here: `deployment.num_train_gpus` (per " \
           "trainer node) and `deployment.num_infer_gpus` (per inference node) in `rl`, `deployment.num_gpus` in " \
           "`sft`" in msg
    assert "did you mean" not in msg.split("deployment.num_infer_gpus: unknown key", 1)[1].split("\n", 1)[0]
    f = tmp_path / "rl.toml"
    f.write_text('[deployment]\ntype = "multi_node"\nnum_infer_replicas = 2\nnodes_per_fsdp_group = 1\n'
                 "orchestrator_on_inference = true\n")  # fmt: skip
    msg = _error(["@", str(f)])
    assert "deployment.type: type = 'multi_node' is the reference prime-rl's spelling; here it is 'multi-node'" in msg
    assert "`deployment.num_infer_replicas` (replicas of `num_infer_nodes` nodes each) has no field here: one " \
           "inference replica spans one node at most, so R replicas are `deployment.num_infer_nodes = R`" in msg
    assert "`deployment.nodes_per_fsdp_group` has no field here" in msg
    assert "the reference prime-rl's `deployment.orchestrator_on_inference` is `deployment.orchestrator_node` here " \
           "(the node's index; default: the first inference node): did you mean `deployment.orchestrator_node`" in msg


@pytest.mark.parametrize("args,name,ours", [
    (["--orchestrator.rollouts-per-example", "8"], "orchestrator.rollouts_per_example", "orchestrator.train.group_size"),
    (["--orchestrator.max-inflight-rollouts", "64"], "orchestrator.max_inflight_rollouts",
     "orchestrator.concurrency.max_inflight"),
    (["--orchestrator.oversampling-factor", "2"], "orchestrator.oversampling_factor",
     "orchestrator.concurrency.max_inflight"),
    (["--orchestrator.curriculum.easy-threshold", "0.9"], "orchestrator.buffer.easy_threshold",
     "orchestrator.curriculum.pass_threshold"),
    (["--orchestrator.train.source.0.weight", "2"], "orchestrator.train.source[N].weight",
     "orchestrator.train.source[0].ratio"),
])  # fmt: skip
def test_the_references_rollout_counts_buffer_and_weights_name_the_fields_here(args, name, ours):
    msg = _error(["@", RL_TOML, *args])
    flag = "--" + ours.replace("[", ".").replace("]", "").replace("_", "-")
    assert f"the reference prime-rl's `{name}` is `{ours}` here" in msg
    assert f"did you mean `{ours}` (flag `{flag}`)?" in msg


def test_the_references_buffer_names_its_parts_here(tmp_path):
    f = tmp_path / "rl.toml"
    f.write_text("[orchestrator.buffer]\nonline_difficulty_filtering = true\neasy_threshold = 0.9\nenv_ratios = [1, 2]\n")
    msg = _error(["@", RL_TOML, "@", str(f)])
    assert "the reference prime-rl's `orchestrator.buffer.online_difficulty_filtering` is " \
           "`orchestrator.gate.reject_uniform` here" in msg
    assert "`orchestrator.buffer.easy_threshold` is `orchestrator.curriculum.sampler` here (no average-reward " \
           "thresholds here" in msg
    assert "`orchestrator.buffer.env_ratios` (one number per env) is each source's `ratio` here: " \
           "`orchestrator.train.source[N].ratio`" in msg
    f.write_text("[orchestrator.buffer]\nseed = 1\n")
    assert "the reference prime-rl's `orchestrator.buffer` (difficulty filtering and env mixing) is split here: " \
           "`orchestrator.gate`" in _error(["@", RL_TOML, "@", str(f)])


def test_a_boolean_is_shown_as_toml_writes_it_and_tool_response_points_to_the_tool_role(tmp_path):
    from prime_rl.config.trainer import SFTConfig

    f = tmp_path / "sft.toml"
    f.write_text("[data.loss_mask]\ntool_response = true\n")
    with pytest.raises(ConfigError) as e:
        parse_config(SFTConfig, ["@", str(f)])
    assert str(e.value) == (
        f"  data.loss_mask.tool_response: unknown key (got true) (in {f}); the name `loss_mask.tool_response` is "
        "`loss_mask.tool` here (tool-result messages carry loss): did you mean `data.loss_mask.tool` (flag "
        "`--data.loss-mask.tool`)?")
    f.write_text("[orchestrator]\nreject_uniform = false\n")
    assert "orchestrator.reject_uniform: unknown key (got false) (in " in _error(["@", str(f)])


def test_a_tasksets_own_argument_beside_its_id_names_env_taskset_args(tmp_path):
    """A verifiers taskset's config fields written beside `id` (not under `args`) are refused with where they go: the
    TOML spelling in the source entry, the full path and flag, and where the key was set."""
    f = tmp_path / "vf.toml"
    f.write_text('[[orchestrator.train.source]]\nname = "arith"\nenv.taskset = {id = "vf_arith", num_examples = 10}\n\n'
                 '[[orchestrator.eval.source]]\nname = "arith"\nenv.taskset = {id = "vf_arith", eval_arg = {n = 1}}\n')
    msg = _error(["@", str(f)])
    assert f"orchestrator.train.source[0].env.taskset.num_examples (set in {f}): not a setting of " \
           "orchestrator.train.source[0].env.taskset.kind = 'verifiers'" in msg
    assert f"remove num_examples from [orchestrator.train.source[0].env.taskset] in {f}; the taskset's own " \
           "arguments go under `env.taskset.args`: write `env.taskset.args = {num_examples = 10}` in the entry " \
           "(`orchestrator.train.source[0].env.taskset.args.num_examples`, flag " \
           "`--orchestrator.train.source.0.env.taskset.args.num-examples`)" in msg
    assert "did you mean `orchestrator.eval.num_examples`" not in msg  # not the eval count of another section
    # a key close to a field of the taskset (`eval_args`) gets that field, not the args hint
    assert "eval_arg = " not in msg and "did you mean `orchestrator.eval.source[0].env.taskset.eval_args`" in msg
    # a field of the other taskset kind (nemo-gym's `split`) keeps its own message
    f.write_text('[[orchestrator.train.source]]\nname = "arith"\nenv.taskset = {id = "vf_arith", split = "test"}\n')
    msg = _error(["@", str(f)])
    assert "env.taskset.split does not apply to taskset id 'vf_arith'" in msg and "own arguments" not in msg
    # the suggested flag is accepted
    g = tmp_path / "ok.toml"
    g.write_text('[[orchestrator.train.source]]\nname = "arith"\nenv.taskset.id = "vf_arith"\n')
    cfg = parse_config(RLConfig, ["@", str(g), "--orchestrator.train.source.0.env.taskset.args.num-examples", "10"])
    assert cfg.orchestrator.train.source[0].env.taskset.args == {"num_examples": 10}
    # a built-in environment's keyword arguments beside its id go under `env.args` (flag form)
    msg = _error(["@", RL_TOML, "--orchestrator.train.source",
                  '[{"name": "b", "env": {"id": "digit-bandit", "seed": 3}}]'])  # fmt: skip
    assert "the environment's own arguments go under `env.args`: write `env.args = {seed = 3}` in the entry " \
           "(`orchestrator.train.source[0].env.args.seed`, flag `--orchestrator.train.source.0.env.args.seed`)" in msg
