"""The reasoning-gym environment against the real reasoning-gym package: tasks and scores equal to the package's own."""

from __future__ import annotations

import pytest

from prime_rl.envs.base import load_env

rg = pytest.importorskip("reasoning_gym")

DATASETS = {"chain_sum": 1.0, "leg_counting": 1.0, "spell_backward": 2.0, "basic_arithmetic": 1.0, "aiw": 1.0}  # aiw: the example's task


def _package_items(seed: int, size: int) -> list[dict]:
    """The items as reasoning-gym itself generates them (its public `create_dataset("composite", ...)`)."""
    from reasoning_gym.composite import DatasetSpec

    specs = [DatasetSpec(name=n, weight=w, config={}) for n, w in DATASETS.items()]
    ds = rg.create_dataset("composite", size=size, seed=seed, datasets=specs)
    return [ds[i] for i in range(size)], ds


def test_tasks_and_scores_equal_the_package():
    from prime_rl.envs.reasoning_gym import EVAL_SEED_OFFSET

    env = load_env("reasoning-gym", datasets=DATASETS, seed=3, num_train=40, num_eval=20)
    items, ds = _package_items(3 + EVAL_SEED_OFFSET, 20)
    tasks = env.tasks("eval")
    assert [t.messages[-1]["content"] for t in tasks] == [e["question"] for e in items]
    assert {t.info["dataset"] for t in tasks} <= set(DATASETS)
    for task, entry in zip(tasks, items, strict=True):
        right = env.episode(task).verify(f"some thought <answer>{entry['answer']}</answer>")
        assert right.reward == ds.score_answer(entry["answer"], entry) == 1.0
        wrong_answer = entry["answer"] + "0"
        wrong = env.episode(task).verify(f"<answer>{wrong_answer}</answer>")
        assert wrong.reward == ds.score_answer(wrong_answer, entry)
        none = env.episode(task).verify("no tags here")
        assert none.reward == ds.score_answer(None, entry) == 0.0
        assert none.metrics == {"answered": 0.0, "exact": 0.0, "score": 0.0}


def test_exact_reward_drops_the_packages_partial_credit():
    """reward = "exact": 1 only for the package's full score; a near miss the package credits in part scores 0."""
    config = {"basic_arithmetic": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}}
    score_env = load_env("reasoning-gym", datasets="basic_arithmetic", config=config, num_train=4, num_eval=30)
    exact_env = load_env("reasoning-gym", datasets="basic_arithmetic", config=config, num_train=4, num_eval=30,
                         reward="exact")  # fmt: skip
    partial = 0
    for task, entry in zip(exact_env.tasks("eval"), exact_env._splits["eval"][1], strict=True):
        near = str(-int(entry["answer"])) if entry["answer"] not in ("0", "-0") else "1"
        package = float(exact_env._splits["eval"][0].score_answer(near, entry))
        got = exact_env.episode(task).verify(f"<answer>{near}</answer>")
        assert got.reward == (1.0 if package == 1.0 else 0.0)
        assert got.metrics["score"] == package == score_env.episode(task).verify(f"<answer>{near}</answer>").reward
        assert exact_env.episode(task).verify(f"<answer>{entry['answer']}</answer>").reward == 1.0
        partial += 0.0 < package < 1.0
    assert partial > 0  # the package does give partial credit for a wrong sign here


def test_splits_do_not_share_questions():
    env = load_env("reasoning-gym", datasets=["chain_sum"], config={"chain_sum": {"min_terms": 2, "max_terms": 2,
                   "min_digits": 1, "max_digits": 1}}, num_train=300, num_eval=50)  # fmt: skip
    train = {t.messages[-1]["content"] for t in env.tasks("train")}
    ev = [t.messages[-1]["content"] for t in env.tasks("eval")]
    assert len(ev) == 50 and not train & set(ev)
    # one-digit two-term sums repeat: the train split lost the items the eval split has
    assert len(env.tasks("train")) < 300


def test_tool_format_scores_the_last_submission():
    env = load_env("reasoning-gym", datasets="chain_sum", num_train=5, num_eval=5, answer_format="tool")
    task = env.tasks("eval")[0]
    assert [t["function"]["name"] for t in task.tools] == ["submit_answer"]
    ep = env.episode(task)
    assert ep.verify("I think it is 3").reward == 0.0  # nothing submitted
    assert ep.call_tool("submit_answer", '{"answer": "nonsense"}') == "Answer recorded."
    assert ep.call_tool("submit_answer", {"answer": task.info["answer"]}) == "Answer recorded."
    assert ep.verify(None).reward == 1.0
    assert ep.call_tool("calculator", {}).startswith("error: unknown tool")
    assert ep.call_tool("submit_answer", "[1]").startswith("error: missing")


def test_plain_format_and_sft_examples():
    env = load_env("reasoning-gym", datasets="spell_backward", num_train=4, num_eval=4, answer_format="plain")
    task = env.tasks("train")[0]
    assert env.episode(task).verify(f"<think>hm</think>\n{task.info['answer']}\n").reward == 1.0
    examples = load_env("reasoning-gym", datasets="chain_sum", num_train=3, num_eval=2).sft_examples("train")
    for ex, t in zip(examples, load_env("reasoning-gym", datasets="chain_sum", num_train=3, num_eval=2).tasks("train"),
                     strict=True):  # fmt: skip
        assert ex["messages"][-1]["content"] == f"<answer>{t.info['answer']}</answer>"


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"datasets": ["no_such_dataset"]}, "unknown reasoning-gym dataset(s) ['no_such_dataset']"),
        ({"datasets": {"chain_sum": 0}}, "env.args.datasets.chain_sum = 0"),
        ({"datasets": "chain_sum", "config": {"leg_counting": {}}}, "env.args.config names ['leg_counting']"),
        ({"datasets": "chain_sum", "config": {"chain_sum": {"seed": 1}}}, "env.args.config.chain_sum.seed"),
        ({"answer_format": "json"}, "env.args.answer_format = 'json'"),
        ({"reward": "partial"}, "env.args.reward = 'partial'"),
    ],
)
def test_refusals_name_the_field(kwargs, needle):
    with pytest.raises(ValueError) as e:
        load_env("reasoning-gym", **kwargs).tasks("eval")
    assert needle in str(e.value)


def test_evals_refuses_an_unknown_dataset_as_a_user_error(tmp_path):
    """A mistyped dataset name in env.args is the user's to fix: exit 2 with the message, no traceback."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from prime_rl.models.tiny import cached_tiny_model

    source = [{"name": "rg", "env": {"id": "reasoning-gym", "args": {"datasets": ["chainsum"]}}}]
    r = subprocess.run([str(Path(sys.executable).parent / "evals"), "--model.name", str(cached_tiny_model()),
                        "--backend", "transformers", "--eval.source", json.dumps(source), "--output-dir",
                        str(tmp_path)], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "unknown reasoning-gym dataset(s) ['chainsum']" in r.stderr + r.stdout
    assert "Traceback" not in r.stderr + r.stdout


@pytest.mark.parametrize(
    ("datasets", "config", "names"),
    [
        # the package calls .value on each task type: a string from TOML crashes inside it
        ("aiw", {"aiw": {"task_types": ["siblings"], "task_type_weights": [1.0]}}, ["AttributeError", "task_types"]),
        ("chain_sum", {"chain_sum": {"min_digits": 0}}, ["AssertionError", "min_digits"]),  # the package's own check
    ],
)
def test_a_setting_the_package_fails_on_is_refused_naming_env_args(datasets, config, names):
    """A dataset setting the package refuses (its config assertion) or crashes on (aiw's task_types as strings) is
    an EnvArgsError naming env.args, the setting and the package's error, not the package's bare traceback."""
    from prime_rl.envs.base import EnvArgsError

    env = load_env("reasoning-gym", datasets=datasets, config=config, num_train=5, num_eval=5)
    with pytest.raises(EnvArgsError) as e:
        env.tasks("eval")
    msg = str(e.value)
    assert msg.startswith("env.args: reasoning-gym could not build or draw the items") and all(n in msg for n in names)
