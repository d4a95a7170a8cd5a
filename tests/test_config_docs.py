"""Config documentation: every field described, docs/config.md generated from the models and current, and the
fast `--help` (config/fast_help.py) printing exactly what the library's own docstring reader would."""

from __future__ import annotations

import importlib
import io
import typing
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from prime_rl.cli import config_docs as reference
from prime_rl.config import fast_help
from prime_rl.config.base import BaseConfig

REPO = Path(__file__).resolve().parents[1]


def _all_models() -> list[type[BaseModel]]:
    seen: list[type[BaseModel]] = []

    def walk(cls: type[BaseModel]) -> None:
        if cls in seen:
            return
        seen.append(cls)
        for f in cls.model_fields.values():
            for m in reference._models_in(f.annotation):
                walk(m)

    for _, cls, _ in reference.commands():
        walk(cls)
    return seen


def test_every_field_of_every_command_has_a_description():
    models = _all_models()
    assert len(models) > 30
    missing = [f"{m.__name__}.{n}" for m in models for n, f in m.model_fields.items() if not (f.description or "").strip()]
    assert not missing, f"fields without Field(description=...): {missing}"
    undocumented = [m.__name__ for m in models if not (m.__doc__ or "").strip() or m.__doc__.startswith(m.__name__ + "(")]
    assert not undocumented, f"config classes without a docstring: {undocumented}"


def test_docs_config_md_is_generated_and_current():
    page = (REPO / "docs" / "config.md").read_text()
    assert page == reference.render(), (
        "docs/config.md is stale: run `python -m prime_rl.cli.config_docs --write docs/config.md`"
    )
    for field in ("`optim.lr`", "`scheduler.type`", "`train.sampling.temperature`", "`renderer.enable_thinking`",
                  "`env_server.synthetic`", "`wandb.offline`"):  # fmt: skip
        assert field in page, field


def test_reference_type_and_default_text():
    assert reference.type_text(int | None) == "int | None"
    assert reference.type_text(typing.Literal["a", "b"]) == '"a" | "b"'
    assert reference.type_text(list[str]) == "list[str]"

    class C(BaseConfig):
        """C."""

        a: int = Field(3, description="x")
        b: Path = Field(Path("out"), description="y")
        c: list[int] = Field(default_factory=lambda: [1, 2], description="z")
        d: bool = Field(False, description="w")
        e: int = Field(description="required one")

    f = C.model_fields
    assert [reference.default_text(f[k]) for k in "abcde"] == ["3", '"out"', "[1, 2]", "false", "(required)"]


def _render_help(cls: type[BaseModel], reader) -> str:
    lib = importlib.import_module("pydantic_config.cli")
    saved = lib._extract_field_docstrings
    lib._extract_field_docstrings = reader
    try:
        buf = io.StringIO()
        with redirect_stdout(buf), pytest.raises(SystemExit):
            lib.cli(cls, args=["--help"], prog="x", plain=True)
        return buf.getvalue()
    finally:
        lib._extract_field_docstrings = saved


class _Inner(BaseConfig):
    """Inner section."""

    depth: int = 2
    """How deep (a PEP 224 docstring, no description)."""


class _Outer(BaseConfig):
    """Outer."""

    inner: _Inner = _Inner()
    """The inner section (docstring)."""
    rate: float = Field(0.5, description="A described field.")


def test_fast_help_prints_what_the_library_prints():
    """Same text as the library's uncached reader: on a real command (all fields described, so no source is read)
    and on classes whose fields carry only PEP 224 docstrings (each class's source read once)."""
    from prime_rl.config.trainer import SFTConfig

    original = fast_help.library_reader()
    assert original is not None and original is not fast_help.field_docstrings
    for cls in (SFTConfig, _Outer):
        assert _render_help(cls, fast_help.field_docstrings) == _render_help(cls, original)
    text = _render_help(_Outer, fast_help.field_docstrings)
    assert "How deep (a PEP 224 docstring" in text and "The inner section (docstring)" in text
    fast_help._own_docstrings.cache_clear()
    fast_help.field_docstrings.cache_clear()
    from prime_rl.config.rl import RLConfig

    _render_help(RLConfig, fast_help.field_docstrings)
    assert fast_help._own_docstrings.cache_info().currsize == 0  # every field described: no class source read



def test_class_summaries_are_whole_sentences():
    """A class docstring's first paragraph wraps over several source lines: the page shows all of it (before: only
    its first line, e.g. `prime-rl summary`'s cut at "mean ±")."""
    from prime_rl.cli.config_docs import _first_paragraph
    from prime_rl.config.utilities import SummaryConfig

    text = _first_paragraph(SummaryConfig.__doc__)
    assert text.startswith("`prime-rl summary`") and text.endswith("and its reward plot.") and "\n" not in text
    page = (REPO / "docs" / "config.md").read_text()
    assert text in page
