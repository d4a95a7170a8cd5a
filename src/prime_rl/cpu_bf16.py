"""Whether bf16 pays on this CPU: what `dtype = "auto"` means on a CPU.

`auto` on CPU resolves to bfloat16 only when all three hold, else float32:

1. the model is wide enough: its hidden size (`hidden_size` in the model folder's `config.json`, `model_width`) is
   at least `MIN_HIDDEN` (512). In a narrow model the time goes to per-op overhead and bf16 only adds casts (a
   2-layer model of hidden size 128 decodes and trains slower in bf16 on a CPU where SmolLM2-135M, hidden size 576,
   runs faster; docs/results/2026-12-03-cpu-bf16.md). A model whose width cannot be read (a hub id, no
   `config.json`) is judged on the host alone;
2. the CPU has native bf16 matmul instructions: `avx512_bf16` or `amx_bf16` among the flags of `/proc/cpuinfo`
   (without them torch emulates bf16 matmuls through fp32 and they are slower, not faster);
3. a side-by-side timing of square matmuls (`matmul_gflops`: n = 512, fp32 and bf16 interleaved, best of 5 rounds,
   about 0.1-0.3 s on 2 busy cores) measures bf16 at least `THRESHOLD` (1.3) times fp32's GFLOP/s.

The check runs at most once per process (`cpu_check`, cached) and logs the decision and the measured ratio once.
`rl` runs it once in the launcher and writes the resulting explicit dtype into the trainer's and the inference
server's configs (`prime_rl.launcher.dtype`), so the two processes never compute in different dtypes; a trainer or
inference server started on its own with `auto` runs the check itself.

The environment variable `PRIME_RL_CPU_BF16` controls the check: unset or `auto` runs it, `0` skips it (`auto` is
float32 on CPU, whatever the host; the test suite sets it so recorded numbers do not depend on the machine). Any
other value is refused.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

NATIVE_FLAGS = ("avx512_bf16", "amx_bf16")
THRESHOLD = 1.3
MIN_HIDDEN = 512  # hidden sizes below it stay float32 under auto (between the widths measured slower and faster)
ENV = "PRIME_RL_CPU_BF16"
CPUINFO = Path("/proc/cpuinfo")

log = logging.getLogger("prime_rl.cpu_bf16")


@dataclass(frozen=True)
class Bf16Check:
    """The outcome of the check. GFLOP/s are None when the timing did not run (no native bf16, or disabled)."""

    native_flags: tuple[str, ...]  # the NATIVE_FLAGS this CPU lists (empty: none, or no /proc/cpuinfo)
    fp32_gflops: float | None = None
    bf16_gflops: float | None = None
    threshold: float = THRESHOLD
    disabled: bool = False  # PRIME_RL_CPU_BF16=0

    @property
    def native(self) -> bool:
        return bool(self.native_flags)

    @property
    def ratio(self) -> float | None:
        """bf16 GFLOP/s over fp32 GFLOP/s (None when not measured)."""
        if self.fp32_gflops is None or self.bf16_gflops is None or self.fp32_gflops <= 0:
            return None
        return self.bf16_gflops / self.fp32_gflops

    @property
    def use_bf16(self) -> bool:
        return not self.disabled and self.native and self.ratio is not None and self.ratio >= self.threshold

    @property
    def dtype(self) -> str:
        """The dtype `auto` resolves to on this CPU: "bfloat16" or "float32"."""
        return "bfloat16" if self.use_bf16 else "float32"

    def describe(self) -> str:
        """One line: the decision and why."""
        if self.disabled:
            return f"dtype auto on CPU: float32 ({ENV}=0 skips the bf16 check)"
        if not self.native:
            return f"dtype auto on CPU: float32 (no native bf16 matmul: none of {', '.join(NATIVE_FLAGS)} in the CPU flags)"
        speed = (f"bf16 matmul {self.bf16_gflops:.0f} GFLOP/s vs fp32 {self.fp32_gflops:.0f} GFLOP/s, "
                 f"ratio {self.ratio:.2f}, threshold {self.threshold:.2f}")  # fmt: skip
        verdict = "bfloat16 compute (fp32 master weights and gradient reductions)" if self.use_bf16 else "float32"
        return f"dtype auto on CPU: {verdict} ({'/'.join(self.native_flags)}; {speed})"


def cpu_flags(path: Path = CPUINFO) -> set[str]:
    """The CPU feature flags of `/proc/cpuinfo` (the union over its `flags` lines); empty when the file is missing
    (not Linux) or lists none."""
    try:
        text = path.read_text()
    except OSError:
        return set()
    flags: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            flags.update(value.split())
    return flags


def matmul_gflops(size: int = 512, rounds: int = 5) -> tuple[float, float]:
    """`(fp32, bf16)` GFLOP/s of a `size x size` by `size x size` matmul (2 size^3 flops) on this CPU with torch's
    current thread count: one warm-up each, then `rounds` rounds timing one fp32 and one bf16 matmul back to back;
    each dtype's best round counts (the least disturbed by other processes)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    a32, b32 = torch.randn(size, size, generator=gen), torch.randn(size, size, generator=gen)
    a16, b16 = a32.to(torch.bfloat16), b32.to(torch.bfloat16)
    best = {torch.float32: float("inf"), torch.bfloat16: float("inf")}
    with torch.inference_mode():
        torch.mm(a32, b32), torch.mm(a16, b16)
        for _ in range(rounds):
            for lhs, rhs in ((a32, b32), (a16, b16)):
                t0 = time.perf_counter()
                torch.mm(lhs, rhs)
                best[lhs.dtype] = min(best[lhs.dtype], time.perf_counter() - t0)
    flops = 2.0 * size**3 / 1e9
    return flops / best[torch.float32], flops / best[torch.bfloat16]


def env_setting(environ: Mapping[str, str] | None = None) -> str:
    """`PRIME_RL_CPU_BF16` normalised: "auto" (unset, empty or auto) or "0".

    Raises:
        ValueError: any other value (names the variable and the values it takes)."""
    raw = (os.environ if environ is None else environ).get(ENV, "").strip().lower()
    if raw in ("", "auto"):
        return "auto"
    if raw == "0":
        return "0"
    raise ValueError(f"{ENV}={raw!r}: use auto (check whether bf16 pays on this CPU) or 0 (auto stays float32)")


def check(
    flags: set[str] | None = None,
    probe: Callable[[], tuple[float, float]] = matmul_gflops,
    threshold: float = THRESHOLD,
    environ: Mapping[str, str] | None = None,
) -> Bf16Check:
    """Run the check (uncached): `flags` default to `cpu_flags()`, `probe()` returns `(fp32, bf16)` GFLOP/s and
    runs only on a CPU with native bf16.

    Raises:
        ValueError: `PRIME_RL_CPU_BF16` has an unknown value."""
    if env_setting(environ) == "0":
        return Bf16Check(native_flags=(), threshold=threshold, disabled=True)
    found = tuple(f for f in NATIVE_FLAGS if f in (cpu_flags() if flags is None else flags))
    if not found:
        return Bf16Check(native_flags=(), threshold=threshold)
    fp32, bf16 = probe()
    return Bf16Check(native_flags=found, fp32_gflops=fp32, bf16_gflops=bf16, threshold=threshold)


@functools.cache
def cpu_check() -> Bf16Check:
    """`check()` once per process; the decision and the measured ratio are logged (info) once."""
    result = check()
    log.info("%s", result.describe())
    return result


def model_width(model: str | os.PathLike | None) -> int | None:
    """The hidden size of the model in folder `model` (`hidden_size`, `n_embd` or `d_model` of its `config.json`,
    or of its `text_config`); None when `model` is not a local folder with a readable `config.json`."""
    import json

    if not model:
        return None
    try:
        cfg = json.loads((Path(model) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    for section in (cfg, cfg.get("text_config") or {}):
        for key in ("hidden_size", "n_embd", "d_model"):
            if isinstance(section.get(key), int):
                return section[key]
    return None


@functools.cache
def _narrow(width: int) -> str:
    line = f"dtype auto on CPU: float32 (model hidden size {width} < {MIN_HIDDEN}: bf16 casts outweigh its matmul gain)"
    log.info("%s", line)
    return line


def auto_cpu_dtype(model: str | os.PathLike | None = None) -> str:
    """What `dtype = "auto"` is on this CPU for `model` (a model folder, or None when unknown): "float32" for a model
    narrower than `MIN_HIDDEN`, else the host's `cpu_check`: "bfloat16" or "float32"."""
    width = model_width(model)
    if width is not None and width < MIN_HIDDEN:
        _narrow(width)
        return "float32"
    return cpu_check().dtype
