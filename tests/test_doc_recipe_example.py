"""The recipe example of docs/orchestrator.md ("Filtering with refill, curriculum and length shaping") is part of a
shipped config that `rl --dry-run` accepts: every key of the doc's TOML block holds the same value in
examples/ladder/digit_recipes.toml, and `rl @ examples/ladder/digit_recipes.toml --dry-run` exits 0 with every
recipe on in the resolved orchestrator config."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from prime_rl.models.tiny import cached_tiny_model
from prime_rl.ports import free_port

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = "examples/ladder/digit_recipes.toml"


def _doc_block() -> dict[str, Any]:
    text = (REPO / "docs" / "orchestrator.md").read_text()
    section = text.split("## Filtering with refill, curriculum and length shaping", 1)[1].split("\n## ", 1)[0]
    assert EXAMPLE in section  # the doc names the file its block comes from
    (block,) = re.findall(r"```toml\n(.*?)```", section, flags=re.S)
    return tomllib.loads(block)


def _missing(part: Any, whole: Any, path: str = "") -> list[str]:
    """Keys of `part` whose value differs in `whole` (tables compared key by key, lists item by item)."""
    if isinstance(part, dict):
        if not isinstance(whole, dict):
            return [path]
        return [m for k, v in part.items() for m in (_missing(v, whole[k], f"{path}.{k}") if k in whole else [f"{path}.{k}"])]
    if isinstance(part, list):
        if not isinstance(whole, list) or len(part) != len(whole):
            return [path]
        return [m for i, (a, b) in enumerate(zip(part, whole, strict=True)) for m in _missing(a, b, f"{path}[{i}]")]
    return [] if part == whole else [path]


def test_the_doc_block_is_part_of_the_shipped_config():
    block = _doc_block()
    shipped = tomllib.loads((REPO / EXAMPLE).read_text())
    assert _missing(block, shipped) == []
    assert set(block["orchestrator"]) >= {"token_batch_size", "gate", "curriculum"}  # every recipe is shown
    assert "length_penalty" in block["orchestrator"]["train"]["source"][0]
    assert _missing({"orchestrator": {"batch_size": 64}}, shipped) == []
    assert _missing({"orchestrator": {"batch_size": 32}}, shipped) == [".orchestrator.batch_size"]  # can fail


def test_rl_dry_run_accepts_the_recipe_example(tmp_path, monkeypatch, capsys):
    from prime_rl.cli.rl import main

    monkeypatch.chdir(REPO)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["@", EXAMPLE, "--model.name", str(cached_tiny_model()), "--output-dir", str(run),
              "--inference.server.port", str(free_port()), "--dry-run"])  # fmt: skip
    err = capsys.readouterr().err
    assert e.value.code == 0, err[-3000:]
    orch = tomllib.loads((run / "configs" / "orchestrator.toml").read_text())
    assert orch["gate"]["reject_uniform"] is True and orch["curriculum"]["sampler"] == "difficulty_pool"
    assert orch["token_batch_size"] == 2048
    assert orch["train"]["source"][0]["length_penalty"] == {"max_tokens": 3, "cache_tokens": 1, "coef": 0.25}


async def test_the_recipes_length_penalty_separates_a_finished_digit_from_a_longer_reply(tmp_path):
    """The shipped recipe's penalty on rollouts of its own source, sampling budget and seq_len, played through the
    agent loop: a reply's sampled tokens include the stop token that ends it (`<|im_end|>`, one token), and the
    byte-level tokenizer spells a digit in one token. So "7" is 2 sampled tokens, "77" is 3, and "777" is cut at the
    budget. The penalty must leave the one-digit answer at its reward and lower the longer ones, or it carries no
    signal (one value for every reply that starts with a digit)."""
    from tests.orchestrator.fakes import ScriptedClient, tiny_tokenizer

    from prime_rl.config.orchestrator import RendererConfig, SamplingConfig
    from prime_rl.config.recipes import LengthPenaltyConfig
    from prime_rl.envs.bandit.digit import DigitBanditEnv
    from prime_rl.models.renderer import make_renderer
    from prime_rl.orchestrator.agent import AgentLimits, run_rollout
    from prime_rl.orchestrator.gates import shape_rewards
    from prime_rl.orchestrator.sources import InProcessSource

    shipped = tomllib.loads((REPO / EXAMPLE).read_text())
    orch = shipped["orchestrator"]
    (source,) = orch["train"]["source"]
    pen = LengthPenaltyConfig(**source["length_penalty"])
    budget = orch["train"]["sampling"]["max_completion_tokens"]
    tok = tiny_tokenizer(tmp_path / "tok")
    renderer = make_renderer(tok, RendererConfig())
    src = InProcessSource(source["name"], DigitBanditEnv())
    task = src.tasks("train")[0]
    played = []
    for reply in ("7", "77", "777"):
        client = ScriptedClient(tok, lambda prompt, k, reply=reply: reply)
        played.append(await run_rollout(task, src, client, renderer, SamplingConfig(temperature=1.0),
                                        AgentLimits(shipped["seq_len"], budget)))  # fmt: skip
    assert [r.masked for r in played] == [False, False, False]
    assert [r.reward for r in played] == [1.0, 1.0, 1.0]  # the first character is the target digit
    shaped = shape_rewards(played, {source["name"]: pen})
    assert [r.env_metrics["length_penalty"] for r in shaped] == [0.0, -0.25, -0.25]
    assert [r.num_loss_tokens for r in played] == [2, 3, 3]  # "7" + stop, "77" + stop, "777" cut at 3
    assert [r.truncated for r in played] == [False, False, True]
    assert [r.reward for r in shaped] == [1.0, 0.75, 0.75]
