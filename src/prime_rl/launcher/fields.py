"""How the launcher's checks name a field of the `rl` config: as the user set it.

`rl` copies the shared top-level fields (`model`, `max_steps`, `seq_len`, `output_dir`, `ckpt`, `wandb`;
`prime_rl.config.rl.SHARED_FIELDS`) into each section, so a check reads `trainer.model.name` where the user wrote
`model.name` (`--model.name`, or `[model]` in a TOML file). `as_set` gives the name to show and where its value
came from (`prime_rl.config.loader.where_set`).
"""

from __future__ import annotations

from typing import Any

from prime_rl.config.loader import where_set
from prime_rl.config.rl import SECTIONS, SHARED_FIELDS, RLConfig

_MISSING = object()


def as_set(cfg: RLConfig, path: str) -> tuple[str, str]:
    """`(name, where)` for the dotted field `path` of `cfg` (e.g. `trainer.model.name`): the top-level name
    (`model.name`) when a shared field set at the top holds the same value, else `path`; `where` is ` (from
    --flag)`, ` (in FILE)` or "" (a default)."""
    section, _, rest = path.partition(".")
    name = path
    if section in SECTIONS and rest.split(".")[0] in SHARED_FIELDS:
        top = _get(cfg, rest)
        if top is not _MISSING and top is not None and top == _get(cfg, path):
            name = rest
    return name, where_set(name)


def _get(cfg: Any, path: str) -> Any:
    node = cfg
    for key in path.split("."):
        node = getattr(node, key, _MISSING)
        if node is _MISSING or node is None:
            return node
    return node
