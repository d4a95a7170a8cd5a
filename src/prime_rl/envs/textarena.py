"""TextArena single-player games as multi-turn environments (`env.id = "textarena"`).

Each task is one game (`game`, e.g. `GuessTheNumber-v0`) started from its own seed: the first user message is the
game's opening observation, each model reply is one game step (`env.step(reply)`: TextArena's default wrappers
read the bracketed action, e.g. `[7]`), the game's new observation text is the next user turn, and when the game
ends its reward for player 0 is the rollout's reward (`env.close()`). A game that has not ended when the rollout
stops (the turn cap `env.agent.max_turns`, the token budget) scores `unfinished_reward`.

Splits: `train` seeds are `seed .. seed + num_train - 1`, `eval` seeds start at `seed + EVAL_SEED_OFFSET`, so no
game is in both splits.

Some TextArena games download NLTK corpora at first use (Wordle-v0 needs `words`, ...). Where the corpus is missing
and cannot be downloaded, building the tasks raises `TextArenaCorpusMissing` naming the game, the corpus and how to
install it; games such as GuessTheNumber-v0, Mastermind-v0, TowerOfHanoi-v0, FrozenLake-v0 and LightsOut-v0 run
offline.

Requires the `textarena` extra (`pip install 'prime-rl[textarena]'`).
"""

from __future__ import annotations

import math
import re
from functools import cached_property
from typing import Any

from prime_rl.envs.base import EnvArgsError, Environment, Episode, Task, VerifyResult
from prime_rl.extras import require

SPLITS = ("train", "eval")
EVAL_SEED_OFFSET = 1_000_000
SYSTEM_PROMPT = ("You are playing a text game. Read the game's messages and reply with your next move in the format "
                 "the game asks for (for example [5]). Each reply is one move.")  # fmt: skip


class TextArenaCorpusMissing(EnvArgsError):
    """A TextArena game needs an NLTK corpus that is not installed and could not be downloaded."""


def _ta() -> Any:
    return require("textarena", "textarena", "the textarena environment")


def _corpus_of(error: LookupError) -> str:
    """The NLTK resource named in a LookupError's message (`Resource 'words' not found`), or '?'."""
    found = re.search(r"Resource\s+'?([\w./-]+)'?\s+not found", str(error))
    return found.group(1) if found else "?"


def start_game(game: str, seed: int) -> tuple[Any, str]:
    """A TextArena game reset for one player with `seed`, and its opening observation text.

    Raises:
        EnvArgsError: `game` is not a registered TextArena game, or not a single-player one.
        TextArenaCorpusMissing: the game needs an NLTK corpus that is not installed here.
    """
    ta = _ta()
    from textarena.envs.registration import ENV_REGISTRY

    if game not in ENV_REGISTRY:
        near = sorted(n for n in ENV_REGISTRY if n.split("-")[0].lower() == game.split("-")[0].lower())
        raise EnvArgsError(f"env.args.game = {game!r}: not a TextArena game" + (f"; did you mean {near}?" if near else ""))
    try:
        env = ta.make(game)
        env.reset(num_players=1, seed=seed)
    except LookupError as e:
        corpus = _corpus_of(e)
        raise TextArenaCorpusMissing(
            f"TextArena game {game!r} needs the NLTK corpus {corpus!r}, which is not installed and could not be "
            f"downloaded: run `python -m nltk.downloader {corpus}` where the network reaches NLTK's data (or copy "
            "nltk_data from such a machine, NLTK_DATA names its folder), or choose a game that runs offline"
        ) from None
    except (AssertionError, ValueError, TypeError) as e:
        raise EnvArgsError(f"env.args.game = {game!r}: cannot start it for one player ({type(e).__name__}: {e})") from e
    _, observation = env.get_observation()
    return env, str(observation)


class TextArenaEpisode(Episode):
    """One game: replies are moves (`user_turn`), the game's reward at its end is the episode's."""

    def __init__(self, task: Task, unfinished_reward: float):
        self.task = task
        self.unfinished_reward = unfinished_reward
        self.env, self.observation = start_game(task.info["game"], task.info["seed"])
        self.moves = 0
        self.done = False
        self.result: tuple[Any, Any] | None = None

    def call_tool(self, name: str, arguments: dict[str, Any] | str) -> str:
        return f"error: this game has no tools (got {name!r}); reply with your move as text, e.g. [5]"

    def user_turn(self, reply: str) -> str | None:
        """Play `reply` as the next move; the game's new messages, or None when the game is over."""
        if self.done:
            return None
        self.moves += 1
        done, _ = self.env.step(reply)
        if done:
            self.done = True
            self.result = self.env.close()
            return None
        _, observation = self.env.get_observation()
        observation = str(observation)
        new = observation[len(self.observation):] if observation.startswith(self.observation) else observation
        self.observation = observation
        return new.strip() or "(no new message from the game)"

    def verify(self, final_response: str | None = None) -> VerifyResult:
        metrics = {"finished": float(self.done), "moves": float(self.moves)}
        if not self.done:
            return VerifyResult(self.unfinished_reward, {**metrics, "won": 0.0})
        rewards, info = self.result or (None, None)
        reward = (rewards or {}).get(0)
        if not isinstance(reward, int | float) or isinstance(reward, bool) or not math.isfinite(reward):
            return VerifyResult(0.0, metrics, masked=True, reason=f"the game ended without a reward for player 0 "
                                                                  f"({rewards!r})")  # fmt: skip
        player = (info or {}).get(0, {}) if isinstance(info, dict) else {}
        metrics["invalid_move"] = float(bool(player.get("invalid_move")))
        return VerifyResult(float(reward), {**metrics, "won": float(reward > 0)})

    def close(self) -> None:
        self.done = True


class TextArenaEnv(Environment):
    """TextArena single-player games (see the module docstring).

    Args:
        game: a registered TextArena game id, e.g. `GuessTheNumber-v0`.
        seed: first train seed (eval seeds start at `seed + EVAL_SEED_OFFSET`).
        num_train, num_eval: games per split.
        unfinished_reward: reward of a game that has not ended when the rollout stops.
        system_prompt: replaces the default system prompt.

    Raises:
        EnvArgsError: unknown or multi-player game, sizes below 1.
        TextArenaCorpusMissing: the game needs an NLTK corpus that is missing (when the tasks are first built).
        MissingExtraError: textarena is not installed.
    """

    name = "textarena"
    has_user_turns = True

    def __init__(self, game: str = "GuessTheNumber-v0", seed: int = 0, num_train: int = 1000, num_eval: int = 100,
                 unfinished_reward: float = 0.0, system_prompt: str | None = None):  # fmt: skip
        if num_train < 1 or num_eval < 1:
            raise EnvArgsError(f"env.args.num_train = {num_train}, num_eval = {num_eval}: each must be >= 1")
        if not math.isfinite(unfinished_reward):
            raise EnvArgsError(f"env.args.unfinished_reward = {unfinished_reward}: must be a finite number")
        self.game, self.seed, self.num_train, self.num_eval = game, seed, num_train, num_eval
        self.unfinished_reward = float(unfinished_reward)
        self.system_prompt = system_prompt or SYSTEM_PROMPT

    def seeds(self, split: str) -> range:
        """The game seeds of `split`. Raises KeyError for an unknown split."""
        if split == "train":
            return range(self.seed, self.seed + self.num_train)
        if split == "eval":
            start = self.seed + EVAL_SEED_OFFSET
            return range(start, start + self.num_eval)
        raise KeyError(f"unknown split {split!r}; textarena has {', '.join(SPLITS)}")

    @cached_property
    def _tasks(self) -> dict[str, list[Task]]:
        out = {}
        for split in SPLITS:
            tasks = []
            for i, game_seed in enumerate(self.seeds(split)):
                env, observation = start_game(self.game, game_seed)
                env.close()
                tasks.append(Task(
                    task_id=f"textarena-{self.game}-{split}-{i}", split=split, index=i,
                    messages=[{"role": "system", "content": self.system_prompt},
                              {"role": "user", "content": observation.strip()}],
                    info={"env": self.name, "game": self.game, "seed": game_seed},
                ))  # fmt: skip
            out[split] = tasks
        return out

    def tasks(self, split: str) -> list[Task]:
        self.seeds(split)  # KeyError for an unknown split
        return self._tasks[split]

    def episode(self, task: Task) -> TextArenaEpisode:
        """Raises KeyError when `task.info` lacks the game or its seed."""
        info = task.info or {}
        if not isinstance(info.get("game"), str) or not isinstance(info.get("seed"), int):
            raise KeyError(f"task {task.task_id!r}: info needs 'game' (str) and 'seed' (int)")
        return TextArenaEpisode(task, self.unfinished_reward)
