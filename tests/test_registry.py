"""The one registry helper: registered names, lazy import paths, `module:attr` values and its one error format."""

from __future__ import annotations

import sys
import types

import pytest

from prime_rl.registry import Registry, RegistryError, import_path


@pytest.fixture
def plugin_module():
    """A module `house_plugin` importable by path, with a function, a class method and a non-callable."""
    mod = types.ModuleType("house_plugin")
    mod.double = lambda x: 2 * x
    mod.Box = type("Box", (), {"make": staticmethod(lambda: "made")})
    mod.CONSTANT = 3
    sys.modules["house_plugin"] = mod
    yield mod
    del sys.modules["house_plugin"]


def test_registered_object_decorator_and_lazy_path(plugin_module):
    reg: Registry = Registry("doubler", "section.type", {"lazy": "house_plugin:double"})
    reg.register("direct", len)

    @reg.register("deco")
    def triple(x):
        return 3 * x

    assert reg.names() == ["deco", "direct", "lazy"] and "lazy" in reg and "other" not in reg
    assert reg.get("direct") is len and reg.get("deco") is triple and triple(2) == 6
    assert reg.get("lazy")(21) == 42
    assert reg.get("house_plugin:double") is plugin_module.double  # an unregistered value with `:` is a path
    assert reg.get("house_plugin:Box.make")() == "made"  # dotted attribute
    reg.register("direct", "house_plugin:double")  # a later registration replaces the earlier one
    assert reg.get("direct")(5) == 10
    reg.unregister("direct")
    reg.unregister("never-there")
    assert reg.names() == ["deco", "lazy"]


def test_one_error_format_names_field_value_and_choices(plugin_module):
    reg: Registry = Registry("loss", "trainer.loss.type", {"a": len, "b": len})
    with pytest.raises(RegistryError) as e:
        reg.get("c")
    assert str(e.value) == ("trainer.loss.type = 'c': unknown loss; choose one of: a, b "
                            "(or an import path `package.module:attr`)")
    with pytest.raises(RegistryError, match=r"^env\.id = 'c': unknown loss"):
        reg.get("c", field="env.id")
    with pytest.raises(RegistryError, match=r"^trainer\.loss\.type = 'no_such_mod:f': cannot import module 'no_such_mod' "
                                            r"\(ModuleNotFoundError"):
        reg.get("no_such_mod:f")
    with pytest.raises(RegistryError, match=r"cannot import 'missing' from 'house_plugin' \(no such attribute\)"):
        reg.get("house_plugin:missing")
    with pytest.raises(RegistryError, match=r"= 'house_plugin:CONSTANT': int object is not callable"):
        reg.get("house_plugin:CONSTANT")
    assert isinstance(RegistryError("x"), ValueError)  # callers that catch config ValueErrors catch it too


def test_import_path_needs_module_and_attr():
    assert import_path("math:sqrt")(9) == 3
    for bad in ("math", "math:", ":sqrt"):
        with pytest.raises(RegistryError, match="not an import path"):
            import_path(bad, "entry point")


def test_the_projects_registries_use_it():
    """Environments, advantages and losses resolve through the helper (same error format)."""
    from prime_rl.envs.base import ENVS, load_env
    from prime_rl.orchestrator.advantages import ADVANTAGES

    assert {"gridsim", "reverse-text"} <= set(ENVS.names()) and {"grpo", "rloo"} <= set(ADVANTAGES.names())
    with pytest.raises(RegistryError, match=r"^env\.id = 'nope': unknown environment; choose one of: digit-bandit, gridsim, reasoning-gym, reverse-text, textarena, tool-bandit"):
        load_env("nope")
    assert load_env("reverse-text").tasks("eval")  # a lazy entry imports and builds
