"""Named extension points: a registered name or an import path `module:attr`, resolved one way everywhere.

Environments (`env.id`), advantage estimators (`orchestrator.advantage.type`), losses (`trainer.loss.type`),
inference backends and the command-line entry points each keep one `Registry`. An entry is the object itself or
its import path `"package.module:attr"`, imported on first use (so registering costs no import, and a registry
in a light module can name heavy code). A config value that is not a registered name but contains `:` is imported
as a path, which is how a user plugs in code that lives outside prime-rl.

Every failure is a `RegistryError` (a ValueError) whose message starts with the config field and the value, then
says what is wrong and what would work:

    orchestrator.advantage.type = 'gpro': unknown advantage estimator; choose one of: grpo, rloo (or an import
    path `package.module:attr`)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar, overload

T = TypeVar("T")

IMPORT_PATH_HINT = "an import path `package.module:attr`"


class RegistryError(ValueError):
    """An unknown name, or an import path that does not import; the message names the field and the choices."""


def import_path(path: str, field: str = "import path") -> object:
    """The object at `"package.module:attr"` (`attr` may be dotted: `module:Class.method`).

    Raises:
        RegistryError: `path` has no `:`, the module does not import (its own error is kept as the cause) or has no
            such attribute; the message starts with `field = path`.
    """
    module, sep, attr = path.partition(":")
    if not sep or not module or not attr:
        raise RegistryError(f"{field} = {path!r}: not {IMPORT_PATH_HINT}")
    try:
        obj: object = importlib.import_module(module)
    except ImportError as e:
        raise RegistryError(f"{field} = {path!r}: cannot import module {module!r} ({type(e).__name__}: {e})") from e
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as e:
            raise RegistryError(f"{field} = {path!r}: cannot import {attr!r} from {module!r} (no such attribute)") from e
    return obj


class Registry(Generic[T]):
    """Names -> objects of one kind (`kind`, e.g. "loss"), chosen by the config field `field` (e.g.
    "trainer.loss.type"). Entries are objects or lazy import paths; see the module docstring."""

    def __init__(self, kind: str, field: str, entries: dict[str, T | str] | None = None):
        self.kind = kind
        self.field = field
        self._entries: dict[str, T | str] = dict(entries or {})

    @overload
    def register(self, name: str) -> Callable[[T], T]: ...

    @overload
    def register(self, name: str, obj: T | str) -> T | str: ...

    def register(self, name: str, obj: T | str | None = None):
        """Register `obj` (an object or an import path) under `name`, replacing an earlier entry of that name.
        Without `obj`, a decorator: `@registry.register("name")`."""
        if obj is None:
            def deco(fn: T) -> T:
                self._entries[name] = fn
                return fn

            return deco
        self._entries[name] = obj
        return obj

    def unregister(self, name: str) -> None:
        """Remove `name` (no error when it is not registered): a test or a plugin undoing its registration."""
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def get(self, name: str, field: str | None = None) -> T:
        """The object registered as `name`, or the one at the import path `name` (`module:attr`); it must be
        callable (a function, a class or a factory). `field` overrides the config field named in errors (e.g.
        `orchestrator.train.source[1].env.id`).

        Raises:
            RegistryError: unknown name (lists the registered ones), a path that does not import, or an object
                that is not callable.
        """
        field = field or self.field
        entry = self._entries.get(name)
        if entry is None:
            if ":" not in name:
                raise RegistryError(
                    f"{field} = {name!r}: unknown {self.kind}; choose one of: {', '.join(self.names()) or '(none)'} "
                    f"(or {IMPORT_PATH_HINT})"
                )
            entry = name
        if isinstance(entry, str):
            obj = import_path(entry, field)
            if name in self._entries:
                self._entries[name] = obj  # resolve a lazy entry once
            entry = obj
        if not callable(entry):
            raise RegistryError(f"{field} = {name!r}: {type(entry).__name__} object is not callable")
        return entry  # type: ignore[return-value]
