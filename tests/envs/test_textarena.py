"""TextArena games through the environment and the agent loop, against the real textarena package."""

from __future__ import annotations

import re

import pytest
from tests.orchestrator.fakes import ScriptedClient, tiny_tokenizer

from prime_rl.config.orchestrator import RendererConfig, SamplingConfig
from prime_rl.envs.base import load_env
from prime_rl.models.renderer import make_renderer
from prime_rl.orchestrator.agent import AgentLimits, run_rollout
from prime_rl.orchestrator.sources import InProcessSource

ta = pytest.importorskip("textarena")

HANOI_3 = ["[A C]", "[A B]", "[C B]", "[A C]", "[B A]", "[B C]", "[A C]"]  # the optimal 7 moves for 3 disks


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    return tiny_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def renderer(tok):
    return make_renderer(tok, RendererConfig(name="qwen3", enable_thinking=False))


def _bisect(prompt: str, k: int) -> str:
    """Binary search on 1..20 from the game's 'higher'/'lower' hints in the conversation so far."""
    lo, hi = 1, 20
    for guess, hint in re.findall(r"\[(\d+)\]\s*(?:<\|im_end\|>)?\s*(?:<\|im_start\|>user\s*)?\[GAME\] The target number is "
                                  r"(higher|lower)", prompt):  # fmt: skip
        if hint == "higher":
            lo = max(lo, int(guess) + 1)
        else:
            hi = min(hi, int(guess) - 1)
    return f"[{(lo + hi) // 2}]"


def _play_directly(game: str, seed: int, moves: list[str]) -> tuple[float | None, int]:
    """The game's reward for player 0 when `moves` are played with textarena itself, and the moves it took."""
    env = ta.make(game)
    env.reset(num_players=1, seed=seed)
    for n, move in enumerate(moves, 1):
        done, _ = env.step(move)
        if done:
            rewards, _ = env.close()
            return rewards[0], n
    return None, len(moves)


async def test_guess_the_number_through_the_agent_loop(tok, renderer):
    env = load_env("textarena", game="GuessTheNumber-v0", num_train=3, num_eval=2)
    src = InProcessSource("ta", env)
    src.max_turns = 10
    for task in env.tasks("train"):
        client = ScriptedClient(tok, _bisect)
        r = await run_rollout(task, src, client, renderer, SamplingConfig(), AgentLimits(8192, 64))
        assert not r.masked, r.error
        moves = [m["content"] for m in r.messages if m["role"] == "assistant"]
        reward, n = _play_directly("GuessTheNumber-v0", task.info["seed"], moves)
        assert r.reward == reward == 1.0 and r.num_turns == n == len(client.calls)
        # each game message after a move is a user turn in the prompt tokens (loss mask 0), never re-tokenized
        assert [m["role"] for m in r.messages[2:]] == ["assistant", "user"] * (n - 1) + ["assistant"]
        assert len(r.samples) == 1 and r.prefix_breaks == 0
        sampled = [t for t, m in zip(r.samples[0].token_ids, r.samples[0].loss_mask, strict=True) if m]
        assert sampled == [t for c in client.calls for t in c["completion_ids"]]


async def test_tower_of_hanoi_solved_and_unfinished(tok, renderer):
    env = load_env("textarena", game="TowerOfHanoi-v0", num_train=1, num_eval=1, unfinished_reward=-0.5)
    src = InProcessSource("hanoi", env)
    task = env.tasks("eval")[0]
    src.max_turns = 20
    r = await run_rollout(task, src, ScriptedClient(tok, lambda p, k: HANOI_3[k]), renderer, SamplingConfig(),
                          AgentLimits(8192, 64))  # fmt: skip
    reward, n = _play_directly("TowerOfHanoi-v0", task.info["seed"], HANOI_3)
    assert r.reward == reward and reward is not None and n == 7 and r.num_turns == 7
    assert r.env_metrics["finished"] == 1.0
    src.max_turns = 3  # the game is not over after three moves: the turn cap ends it, unfinished_reward scores it
    r = await run_rollout(task, src, ScriptedClient(tok, lambda p, k: HANOI_3[k]), renderer, SamplingConfig(),
                          AgentLimits(8192, 64))  # fmt: skip
    assert r.turn_capped and r.reward == -0.5 and r.env_metrics == {"finished": 0.0, "moves": 3.0, "won": 0.0}


def test_splits_are_disjoint_seeded_games():
    env = load_env("textarena", game="GuessTheNumber-v0", seed=7, num_train=4, num_eval=3)
    train, ev = env.tasks("train"), env.tasks("eval")
    assert [t.info["seed"] for t in train] == [7, 8, 9, 10]
    assert not {t.info["seed"] for t in train} & {t.info["seed"] for t in ev}
    again = load_env("textarena", game="GuessTheNumber-v0", seed=7, num_train=4, num_eval=3).tasks("train")
    assert [t.messages for t in again] == [t.messages for t in train]
    with pytest.raises(KeyError):
        env.tasks("test")


def test_unknown_game_is_refused():
    with pytest.raises(ValueError, match="env.args.game = 'GuessTheNumbr-v0': not a TextArena game"):
        load_env("textarena", game="GuessTheNumbr-v0", num_train=1, num_eval=1).tasks("train")


def test_game_needing_a_missing_corpus_names_it():
    nltk = pytest.importorskip("nltk")
    try:
        nltk.data.find("corpora/words")
        pytest.skip("the NLTK corpus 'words' is installed here, so Wordle runs")
    except LookupError:
        pass
    from prime_rl.envs.textarena import TextArenaCorpusMissing

    with pytest.raises(TextArenaCorpusMissing, match="'Wordle-v0' needs the NLTK corpus 'words'"):
        load_env("textarena", game="Wordle-v0", num_train=1, num_eval=1).tasks("train")


def test_user_turn_games_are_not_served_over_protocols_without_user_turns(tmp_path):
    """NeMo Gym's resources-server protocol (and OpenEnv as served here) carries tool calls and a verify, no user
    turns: a TextArena game served that way would end after the first move, so env-server refuses it."""
    import subprocess
    import sys
    from pathlib import Path

    out = subprocess.run([str(Path(sys.executable).parent / "env-server"), "write", "textarena", str(tmp_path / "gym")],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert "environment 'textarena' answers replies with user turns" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "gym").exists()
