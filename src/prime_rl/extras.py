"""Optional dependencies: import one, or fail with the `pip install 'prime-rl[EXTRA]'` that brings it.

The feature extras (pyproject.toml): `gridsim` (python-calamine, ERCOT's xlsx files), `plots` (matplotlib),
`reverse-text` (pyjokes), `wandb` (wandb), `datasets` (datasets), `openenv` (openenv-core: `env-server openenv`),
`reasoning-gym` (reasoning-gym), `textarena` (textarena);
`all` is every one of them.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the feature, the package and the extra."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import `module` (e.g. "matplotlib.pyplot") for `feature` (e.g. "plots").

    Raises:
        MissingExtraError: the module's top package is not installed; the message says
            `FEATURE needs PACKAGE: pip install 'prime-rl[EXTRA]'`.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        if e.name is None or e.name.split(".")[0] != top:
            raise  # the module is there but one of its own imports is broken: show that, not a hint
        raise MissingExtraError(
            f"{feature} needs the `{top}` package, which is not installed: pip install 'prime-rl[{extra}]'"
        ) from None
