"""The "did you mean" hint of an unknown config key, and the spelling of a key as a dotted path and as a flag.

A misspelt section (`--orchestrater.batch-size`) gets the closest full flag under the right section
(`--orchestrator.batch-size`), not the section alone. A key that the reference prime-rl spells another way
(`REFERENCE_SPELLINGS`), or that other training frameworks use (`FRAMEWORK_SPELLINGS`: `optim.learning_rate`), names
the spelling used here. A known name in the wrong place (`--teacher.name` for `teacher.model.name`, a source's
`max_turns` for its `env.agent.max_turns`) names where that name lives. A key inside a list keeps its item's index
(`--orchestrator.train.source.0.length-penalty`), so the suggested flag is one the loader accepts.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

_POOL_NOTE = (" (no average-reward thresholds here: with `orchestrator.curriculum.sampler = \"difficulty_pool\"` a "
              "task whose last `window` rollouts all reach `pass_threshold` is easy, all below it hard; both are drawn "
              "less often, with `easy_weight` / `hard_weight`)")

REFERENCE_SPELLINGS: dict[tuple[str, ...], tuple[str, tuple[str, ...] | None, str]] = {
    ("orchestrator", "sampling"): ("orchestrator.sampling", ("orchestrator", "train", "sampling"), ""),
    ("orchestrator", "group_size"): ("orchestrator.group_size", ("orchestrator", "train", "group_size"),
                                     " (per source: `orchestrator.train.source[N].group_size`)"),
    ("algo", "teacher"): ("orchestrator.algo.teacher", ("teacher",), " (`name`, `base_url`; under `rl`, "
                          "`[teacher] model.name` also starts the teacher server)"),
    ("algo",): ("orchestrator.algo", None, " (`type` grpo, opd, ...) is two settings here: the advantage estimator "
                "`orchestrator.advantage.type` (grpo, rloo, maxrl; per source `orchestrator.train.source[N].advantage`)"
                " and the trainer's loss `trainer.loss.type` (opd: on-policy distillation, scored by "
                "`[orchestrator.teacher]`)"),
    ("curriculum", "gates"): ("orchestrator.train.source[N].curriculum.gates", ("gate",),
                              " (one gate for the run: `reject_uniform`, `advantage_range = [low, high]`)"),
    ("gates",): ("orchestrator.train.source[N].curriculum.gates", ("gate",),
                 " (one gate for the run: `reject_uniform`, `advantage_range = [low, high]`)"),
    ("source", "curriculum"): ("orchestrator.train.source[N].curriculum", ("curriculum",),
                               ' (one for the run: `sampler = "difficulty_pool"`)'),
    ("train", "filter_zero_advantages"): ("orchestrator.train.filter_zero_advantages", ("advantage", "filter_zero"),
                                          ""),
    ("resume", "step"): ("resume.step", ("ckpt", "resume_step"), " (-1 = the newest complete checkpoint; `rl` also takes `resume = true` for it)"),
    ("resume", "dir"): ("resume.dir", ("ckpt", "resume_dir"), ""),
    ("resume",): ("resume", ("ckpt", "resume_step"), " (-1 = the newest complete checkpoint; `rl` also takes `resume = true` for it)"),
    ("monitors", "wandb"): ("monitors.wandb", ("wandb",), ""),
    ("weight_broadcast",): ("weight_broadcast", ("weight_transport",), ' (`type = "filesystem"`, or "collective" '
                            "for an NCCL broadcast)"),
    ("data", "seq_len"): ("data.seq_len", ("seq_len",), ""),
    ("train", "env"): ("orchestrator.train.env", ("train", "source"), " (an entry's `id`, `args`, `taskset` and "
                       "`harness` are `env.id`, `env.args`, `env.taskset` and `env.agent.harness` there)"),
    ("data", "source", "dataset"): ("data.source[N].dataset", None, " is `name` of the `[[data.source]]` entry "
                                    "here (a hub id or a saved dataset folder; a local file is `path`)"),
    ("data", "subsets"): ("data.subsets", ("data", "source"), " (one `[[data.source]]` per dataset: `name` or "
                          "`path`, `subset`, `split`, `weight`)"),
    ("data", "splits"): ("data.splits", ("data", "source"), " (one `[[data.source]]` per dataset: `name` or "
                         "`path`, `subset`, `split`, `weight`)"),
    ("data", "probabilities"): ("data.probabilities", ("data", "source"), " (one `[[data.source]]` per dataset, "
                                "its share of the samples in `weight`)"),
    ("select", "limit"): ("eval.select.limit", ("num_examples",), ""),
    ("eval", "env"): ("orchestrator.eval.env", ("eval", "source"), " (an entry's `id`, `args`, `taskset` and "
                      "`harness` are `env.id`, `env.args`, `env.taskset` and `env.agent.harness` there)"),
    ("deployment", "num_train_gpus"): ("deployment.num_train_gpus", ("num_gpus",), " in `sft` (ranks per node)"),
    ("deployment", "num_train_nodes"): ("deployment.num_train_nodes", ("num_nodes",), " in `sft`"),
    ("deployment", "num_infer_gpus"): ("deployment.num_infer_gpus", None, " (`num_eval_gpus`) has no field in `sft` "
                                       "here: the inference server `sft` starts for `[eval]` takes the settings of "
                                       "`[inference]`; remove it"),
    ("deployment", "num_eval_gpus"): ("deployment.num_eval_gpus", None, " (`num_infer_gpus`) has no field in `sft` "
                                      "here: the inference server `sft` starts for `[eval]` takes the settings of "
                                      "`[inference]`; remove it"),
    ("deployment", "num_infer_nodes"): ("deployment.num_infer_nodes", None, " (`num_eval_nodes`) has no field in "
                                        "`sft` here: its online eval runs on one node (several nodes: score the "
                                        "checkpoints with `evals`); remove it"),
    ("deployment", "num_eval_nodes"): ("deployment.num_eval_nodes", None, " (`num_infer_nodes`) has no field in "
                                       "`sft` here: its online eval runs on one node (several nodes: score the "
                                       "checkpoints with `evals`); remove it"),
    ("deployment", "gpus_per_node"): ("deployment.gpus_per_node", None, " (the GPUs of every node) is per role here: "
                                      "`deployment.num_train_gpus` (per trainer node) and `deployment.num_infer_gpus` "
                                      "(per inference node) in `rl`, `deployment.num_gpus` in `sft`; "
                                      "`slurm.gpus_per_node` is what the Slurm job requests"),
    ("deployment", "num_infer_replicas"): ("deployment.num_infer_replicas", None, " (replicas of `num_infer_nodes` "
                                           "nodes each) has no field here: one inference replica spans one node at "
                                           "most, so R replicas are `deployment.num_infer_nodes = R`, or "
                                           "`deployment.infer_replicas_per_node` servers on each inference node"),
    ("deployment", "nodes_per_fsdp_group"): ("deployment.nodes_per_fsdp_group", None, " has no field here: the "
                                             "trainer shards over all its ranks (one FSDP group); remove it"),
    ("deployment", "orchestrator_on_inference"): ("deployment.orchestrator_on_inference", ("orchestrator_node",),
                                                  " (the node's index; default: the first inference node)"),
    ("orchestrator", "rollouts_per_example"): ("orchestrator.rollouts_per_example", ("orchestrator", "train",
                                               "group_size"), " (the train group size; per source: "
                                               "`orchestrator.train.source[N].group_size`; the eval's is "
                                               "`orchestrator.eval.rollouts_per_example`)"),
    ("max_inflight_rollouts",): ("orchestrator.max_inflight_rollouts", ("concurrency", "max_inflight"), ""),
    ("max_inflight_episodes",): ("orchestrator.max_inflight_episodes", ("concurrency", "max_inflight"), ""),
    ("oversampling_factor",): ("orchestrator.oversampling_factor", ("concurrency", "max_inflight"), " (rollouts in "
                               "flight = batch_size x oversampling_factor there: set max_inflight to that product)"),
    ("buffer",): ("orchestrator.buffer", None, " (difficulty filtering and env mixing) is split here: "
                  "`orchestrator.gate` rejects groups without a learning signal (`reject_uniform`), "
                  "`orchestrator.curriculum` draws easy and hard tasks less often (`sampler = \"difficulty_pool\"`), "
                  "and each source's `ratio` mixes the envs (`orchestrator.train.source[N].ratio`)"),
    ("buffer", "online_difficulty_filtering"): ("orchestrator.buffer.online_difficulty_filtering", ("gate",
                                                "reject_uniform"), " (a group whose rollouts all got the same reward, "
                                                "as average 0 or 1, is rejected and resampled)"),
    ("buffer", "easy_threshold"): ("orchestrator.buffer.easy_threshold", ("curriculum", "sampler"), _POOL_NOTE),
    ("buffer", "hard_threshold"): ("orchestrator.buffer.hard_threshold", ("curriculum", "sampler"), _POOL_NOTE),
    ("curriculum", "easy_threshold"): ("orchestrator.buffer.easy_threshold", ("curriculum", "pass_threshold"),
                                       _POOL_NOTE),
    ("curriculum", "hard_threshold"): ("orchestrator.buffer.hard_threshold", ("curriculum", "pass_threshold"),
                                       _POOL_NOTE),
    ("buffer", "env_ratios"): ("orchestrator.buffer.env_ratios", None, " (one number per env) is each source's "
                               "`ratio` here: `orchestrator.train.source[N].ratio` (relative; need not sum to 1)"),
    ("source", "weight"): ("orchestrator.train.source[N].weight", ("source", "ratio"), " (relative; need not sum to "
                           "1)"),
}  # fmt: skip
"""The reference prime-rl's names that differ here (its v0.8 configs): the end of a key's path as written, list
indices left out -> (the reference's name, the path here from where that end starts, or None where the setting is
split, and a note). Where the path here does not exist from there (a per-source setting that is one for the run
here), the config's own path ending with it is named."""

REFERENCE_ENTRY_KEYS: dict[tuple[str, ...], dict[tuple[str, ...], tuple[str, ...]]] = {
    ("train", "env"): {("taskset",): ("env", "taskset"), ("harness", "runtime"): ("env", "agent", "runtime"),
                       ("harness",): ("env", "agent", "harness"), ("id",): ("env", "id"),
                      ("args",): ("env", "args")},
    ("eval", "env"): {("taskset",): ("env", "taskset"), ("harness", "runtime"): ("env", "agent", "runtime"),
                      ("harness",): ("env", "agent", "harness"), ("id",): ("env", "id"),
                      ("args",): ("env", "args")},
}  # fmt: skip
"""Keys inside an entry of a list the reference prime-rl names another way (`REFERENCE_SPELLINGS`) that sit
elsewhere in the entry here: the start of a key's path in the reference's entry -> its start here (the longest
start matches; keys not listed keep their path)."""

FRAMEWORK_SPELLINGS: dict[tuple[str, ...], tuple[str, tuple[str, ...] | None, str]] = {
    ("optim", "learning_rate"): ("optim.learning_rate", ("optim", "lr"), ""),
}
"""Paths (the end of a key's path) that other training frameworks use (Hugging Face `TrainingArguments`, ...) -> the
same setting here, as `REFERENCE_SPELLINGS`. Names close in spelling (`max_grad_norm` for `max_norm`) get the plain
"did you mean"."""

OTHER_NAMES: dict[tuple[str, ...], tuple[str, tuple[str, ...] | None, str]] = {
    ("loss_mask", "tool_response"): ("loss_mask.tool_response", ("loss_mask", "tool"), " (tool-result messages "
                                     "carry loss)"),
    ("loss_mask", "tool_responses"): ("loss_mask.tool_responses", ("loss_mask", "tool"), " (tool-result messages "
                                      "carry loss)"),
}  # fmt: skip
"""Names for a setting that are neither the reference's nor close in spelling to the name here (`loss_mask`'s
`tool_response` for its role `tool`) -> the same setting here, as `FRAMEWORK_SPELLINGS`."""


ARGS_OWNERS: dict[str, str] = {"taskset": "the taskset's", "env": "the environment's"}
"""Sections whose `args` table holds the own settings of what they name (a verifiers taskset's config fields, a
built-in environment's keyword arguments) -> whose they are: a key written beside `id` in one names where it goes
(`args_hint`)."""


class Item(str):
    """An index placeholder in a path that names no item (`N` of a list, `KEY` of a dict): `source[N].name`, flag
    `--source.N.name`."""


def flag(loc: tuple) -> str:
    """The command-line flag of a config path, list indices kept (`config.list_flags`): ("orchestrator",
    "batch_size") -> `--orchestrator.batch-size`, ("eval", "source", 0, "num_examples") ->
    `--eval.source.0.num-examples`."""
    return "--" + ".".join(str(s).replace("_", "-") for s in loc)


def dotted(loc: tuple) -> str:
    """The dotted path of a config location: ("env", 0, "name") -> `env[0].name` (`<root>` when empty)."""
    out = ""
    for seg in loc:
        if isinstance(seg, int | Item):
            out += f"[{seg}]"
        else:
            out += ("." if out else "") + str(seg)
    return out or "<root>"


def _first_leaf(value: Any) -> tuple[str, ...]:
    """Path below a nested dict to its first non-dict value (`{"a": {"b": 1}}` -> ("a", "b")); () for a non-dict."""
    path: tuple[str, ...] = ()
    while isinstance(value, dict) and value:
        key = next(iter(value))
        path, value = path + (str(key),), value[key]
    return path


def _under(fixed: tuple, value: Any, names_at: Callable[[tuple], list[str]]) -> tuple:
    """`fixed` extended by the first key set under it (the value given for the unknown key), when that key exists
    under `fixed`; else `fixed`."""
    leaf = _first_leaf(value)
    if leaf and all(leaf[i] in names_at(fixed + leaf[:i]) for i in range(len(leaf))):
        return fixed + leaf
    return fixed


def _models_in(annotation: Any) -> tuple[list[type], str]:
    """The pydantic models a field holds (itself, union members, list items, dict values) and how an item is
    indexed: "N" (a list of sections), "KEY" (a dict of sections) or "" (a section)."""
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation], ""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, dict) and args:
        models, _ = _models_in(args[-1])
        return models, ("N" if origin is list else "KEY") if models else ""
    if origin in (typing.Union, types.UnionType, typing.Annotated):
        found = [_models_in(arg) for arg in (args[:1] if origin is typing.Annotated else args)]
        models = [m for ms, _ in found for m in ms if m]
        return list(dict.fromkeys(models)), next((index for _, index in found if index), "")
    return [], ""


@functools.lru_cache(maxsize=16)
def field_paths(cls: type) -> tuple[tuple, ...]:
    """Every field path of the config `cls` (sections and leaves, union variants walked), a list or dict of
    sections indexed by an `Item` placeholder: ("orchestrator", "train", "source", Item("N"), "env", "agent",
    "max_turns")."""
    out: list[tuple] = []

    def walk(model: type, prefix: tuple, seen: tuple[type, ...]) -> None:
        for name, finfo in model.model_fields.items():
            path = prefix + (name,)
            out.append(path)
            models, index = _models_in(finfo.annotation)
            for sub in models:
                if sub not in seen:
                    walk(sub, path + ((Item(index),) if index else ()), seen + (sub,))

    walk(cls, (), (cls,))
    return tuple(dict.fromkeys(out))


def _placed(path: tuple, loc: tuple) -> tuple:
    """`path` with the item indices of `loc` where both go through the same list (`source[N]` under
    `source[0]` -> `source[0]`)."""
    out = list(path)
    for i, (seg, given) in enumerate(zip(path, loc, strict=False)):
        if isinstance(seg, Item) and isinstance(given, int):
            out[i] = given
        elif seg != given:
            break
    return tuple(out)


def _shared(path: tuple, loc: tuple) -> int:
    """How many leading segments `path` has in common with `loc` (an `Item` matches any index)."""
    count = 0
    for seg, given in zip(path, loc, strict=False):
        if seg != given and not (isinstance(seg, Item) and isinstance(given, int)):
            break
        count += 1
    return count


def misplaced(loc: tuple, paths: Iterable[tuple]) -> list[tuple]:
    """Where the unknown key at `loc` lives under its own name: paths below its section first (`teacher.model.name`
    for `teacher.name`), else anywhere, nearest to `loc` first; at most two, shortest first, indices of `loc`
    kept."""
    name, parent = loc[-1], loc[:-1]
    same = [p for p in paths if p[-1] == name and len(p) > 1]
    below = [p for p in same if len(p) > len(loc) and _shared(p, parent) == len(parent)]
    ranked = sorted(below, key=len) if below else sorted(same, key=lambda p: (-_shared(p, parent), len(p)))
    return [_placed(p, loc) for p in ranked[:2]]


def _leaf_paths(value: Any) -> list[tuple[str, ...]]:
    """Every path below a nested dict to a non-dict value, in order; [()] for a non-dict or an empty dict."""
    if not isinstance(value, dict) or not value:
        return [()]
    return [(str(key),) + rest for key, sub in value.items() for rest in _leaf_paths(sub)]


def _resolve(ours: tuple, start: tuple, loc: tuple, names_at: Callable[[tuple], list[str]],
             paths: Iterable[tuple]) -> tuple:  # fmt: skip
    """The path here of a spelling's setting `ours`, given from `start` (the section the reference's name starts
    in): `start + ours` where that exists, else the config's path ending with the longest tail of `ours`, nearest
    to `loc`; `ours` when none does."""
    if ours[-1] in names_at(start + ours[:-1]):  # through a list: the entry of `loc` (`source[0].ratio`)
        listed = [_placed(p, loc) for p in paths if tuple(s for s in p if not isinstance(s, Item)) == start + ours]
        return next((p for p in listed if not any(isinstance(s, Item) for s in p)), start + ours)
    for tail in range(len(ours), 0, -1):
        found = [p for p in paths if p[-tail:] == ours[-tail:]]
        if found:
            return _placed(min(found, key=lambda p: (-_shared(p, loc), len(p))), loc)
    return ours


def spelling_hint(loc: tuple, value: Any, names_at: Callable[[tuple], list[str]], paths: Iterable[tuple] = ()) -> str:
    """`; the reference prime-rl's `X` is `Y` here: did you mean ...?` (or other frameworks') for the key at `loc`
    given `value` (its table, where it is one), or "" when no spelling of `REFERENCE_SPELLINGS`,
    `FRAMEWORK_SPELLINGS` or `OTHER_NAMES` matches. A spelling matches where its keys run, in order, through the key's path and a
    path into its value, the key itself included; the longest matching spelling of each such path is named, each
    once."""
    keys = tuple(str(s) for s in loc if not isinstance(s, int))
    at = len(keys) - 1  # the key's own position in `keys`
    hints: dict[tuple[str, ...], str] = {}  # spelling -> its hint, the first path into the value it matches
    paths = tuple(paths)
    for leaf in _leaf_paths(value):
        full = keys + leaf
        for whose, table in (("the reference prime-rl's", REFERENCE_SPELLINGS),
                             ("other frameworks'", FRAMEWORK_SPELLINGS), ("the name", OTHER_NAMES)):  # fmt: skip
            matches = [(ref, i) for ref in table for i in range(max(0, at - len(ref) + 1), at + 1)
                       if full[i : i + len(ref)] == ref]  # fmt: skip
            if not matches:
                continue
            ref, start = max(matches, key=lambda m: len(m[0]))
            name, ours, note = table[ref]
            if ours is None:
                hint = f"; {whose} `{name}`{note}"
            else:
                here = _resolve(ours, loc[: _position(loc, start)], loc, names_at, paths)
                fixed = _under(here, _nested(leaf[start + len(ref) - at - 1 :]), names_at)  # the rest of the path
                shown = dotted(here if table is REFERENCE_SPELLINGS else ours)  # as the name is given: whole, or an end
                hint = (f"; {whose} `{name}` is `{shown}` here{note}: did you mean `{dotted(fixed)}` (flag "
                        f"`{flag(fixed)}`)?")  # fmt: skip
                if ref in REFERENCE_ENTRY_KEYS and table is REFERENCE_SPELLINGS:
                    hint += _entry_hint(value, here, REFERENCE_ENTRY_KEYS[ref], names_at)
            hints.setdefault(ref, hint)
            break
    return "".join(hints.values())


def _entry_hint(value: Any, here: tuple, renames: dict[tuple[str, ...], tuple[str, ...]],
                names_at: Callable[[tuple], list[str]]) -> str:  # fmt: skip
    """` Entry 0 here: ...` naming where each key of the first entry of `value` (a list of tables under a reference
    name whose list is `here` in this config) lives in an entry here (`REFERENCE_ENTRY_KEYS`: `taskset.id` ->
    `env.taskset.id`; a key its section here does not have goes to that section's `args` where it has one, as a
    taskset's config fields do: `taskset.min_turns` -> `env.taskset.args.min_turns`), and the keys that have no
    field there; "" when `value` holds no table."""
    entries = [e for e in value if isinstance(e, dict)] if isinstance(value, list) else [value] if isinstance(
        value, dict) else []  # fmt: skip
    if not entries or not entries[0]:
        return ""
    base = here + (0,)
    moved, missing = [], []
    for leaf in _leaf_paths(entries[0]):
        start = max((k for k in renames if leaf[: len(k)] == k), key=len, default=())
        path = renames[start] + leaf[len(start) :] if start else leaf
        first_unknown = None
        for i in range(len(path)):
            if i and not names_at(base + path[:i]):  # below a field that holds a value (`env.args`'s table): its keys
                break
            if path[i] not in names_at(base + path[:i]):
                first_unknown = i
                break
        if first_unknown is not None and _takes_args(base + path[:first_unknown], names_at):  # a taskset's fields
            path = path[:first_unknown] + ("args",) + path[first_unknown:]
            first_unknown = None
        (moved if first_unknown is None else missing).append(path if first_unknown is None else leaf)
    text = f" Its entry 0 here: `[[{dotted(here)}]]` with " + ", ".join(f"`{dotted(p)}`" for p in moved) if moved else ""
    if missing:
        text += f"{';' if text else ' Its entry 0:'} no field here for " + ", ".join(f"`{dotted(p)}`" for p in missing)
    return text + ("." if text else "")


def _takes_args(section: tuple, names_at: Callable[[tuple], list[str]]) -> bool:
    """Whether the section at `section` has an `args` table (a field holding a dict of free keys, not a section)."""
    return "args" in names_at(section) and not names_at(section + ("args",))


def _toml(value: Any) -> str:
    """`value` as TOML writes it inline (`10`, `"a"`, `true`, `[1, 2]`, `{n = 1}`), for a suggested line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml(v)}" for k, v in value.items()) + "}"
    return str(value)


def _toml_key(key: Any) -> str:
    """A TOML key: bare where TOML allows it (`num_tasks`), else quoted."""
    return str(key) if re.fullmatch(r"[A-Za-z0-9_-]+", str(key)) else json.dumps(str(key))


def args_hint(loc: tuple, value: Any, names_at: Callable[[tuple], list[str]]) -> str:
    """`; the taskset's own arguments go under `env.taskset.args`: write `env.taskset.args = {num_tasks = 10}` in
    the entry (`...env.taskset.args.num_tasks`, flag `--...env.taskset.args.num-tasks`)` for the unknown key at `loc`
    (given `value`) in a section of `ARGS_OWNERS` that has an `args` table; "" elsewhere. The short spelling is
    relative to the list entry the section is in (a `[[orchestrator.train.source]]`), the full path keeps its
    index."""
    section = loc[:-1]
    owner = ARGS_OWNERS.get(str(section[-1])) if section else None
    if owner is None or not _takes_args(section, names_at):
        return ""
    entry = max((i + 1 for i, seg in enumerate(section) if isinstance(seg, int)), default=0)
    short = dotted(section[entry:] + ("args",))
    full = section + ("args", loc[-1])
    return (f"; {owner} own arguments go under `{short}`: write `{short} = {{{_toml_key(loc[-1])} = {_toml(value)}}}`"
            f"{' in the entry' if entry else ''} (`{dotted(full)}`, flag `{flag(full)}`)")


def _position(loc: tuple, nth: int) -> int:
    """The index in `loc` (list indices counted) of its `nth` key (list indices not counted)."""
    seen = -1
    for pos, seg in enumerate(loc):
        if not isinstance(seg, int):
            seen += 1
            if seen == nth:
                return pos
    return len(loc)


def _nested(path: tuple[str, ...]) -> Any:
    """A nested dict holding one value at `path` (the rest of a path into a key's value, for `_under`)."""
    value: Any = ""
    for key in reversed(path):
        value = {key: value}
    return value


def unknown_key_hint(loc: tuple, value: Any, names_at: Callable[[tuple], list[str]],
                     paths: Iterable[tuple] = ()) -> str:  # fmt: skip
    """`; did you mean ...?` for the unknown key at `loc` (given `value`), or "" when nothing is close.

    `names_at(loc)` gives the field names of the section at a path; `paths`: every field path of the config
    (`field_paths`), to find the key's name elsewhere. The hint names the full path and flag of the first setting
    given under the key, so a misspelt section suggests a flag, not a section. Order: a spelling the reference
    prime-rl or other frameworks use (`spelling_hint`); the key's name below its section; a close spelling beside
    it and the name elsewhere in the config.
    """
    paths = tuple(paths)
    spelt = spelling_hint(loc, value, names_at, paths)
    if spelt:
        return spelt
    found = misplaced(loc, paths)
    close = difflib.get_close_matches(str(loc[-1]), names_at(loc[:-1]), n=1, cutoff=0.5)
    own = "" if close else args_hint(loc, value, names_at)
    if own:  # a taskset's or environment's own argument; or the name elsewhere in the same environment's entry
        near = [path for path in found if _shared(path, loc[:-2]) >= len(loc) - 2]
        return own + ("; or did you mean " + _named(near, value, names_at) + "?" if near else "")
    if not found or len(found[0]) <= len(loc) or _shared(found[0], loc[:-1]) < len(loc) - 1:  # not below: also near
        found = [loc[:-1] + (close[0],), *found[:1]] if close else found
    if not found:
        return ""
    return "; did you mean " + _named(found, value, names_at) + "?"


def _named(found: list[tuple], value: Any, names_at: Callable[[tuple], list[str]]) -> str:
    """`a.b` (flag `--a.b`) or ...: each path of `found`, extended by the first key set under it in `value`."""
    fixed = [_under(path, value, names_at) for path in found]
    return " or ".join(f"`{dotted(path)}` (flag `{flag(path)}`)" for path in fixed)
