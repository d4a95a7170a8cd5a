"""Summary statistics of per-task scores: mean with its standard error, and paired differences.

The standard error of the mean is s / sqrt(n) with the sample standard deviation s (ddof = 1). A paired
comparison of two policies scored on the same tasks takes the per-task differences a[t] - b[t] and reports their
mean and standard error, which removes the task-to-task spread both share (a paired t-statistic is mean / SE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Stat:
    """`n` values, their mean and the standard error of that mean."""

    n: int
    mean: float
    se: float  # standard error of the mean; 0 for n < 2

    def fmt(self) -> str:
        return f"{self.mean:.4f} ± {self.se:.4f}"


def mean_se(values: list[float]) -> Stat:
    """Mean and standard error `s / sqrt(n)` with the sample std `s` (ddof = 1)."""
    n = len(values)
    if n == 0:
        return Stat(0, float("nan"), float("nan"))
    m = sum(values) / n
    if n < 2:
        return Stat(n, m, 0.0)
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    return Stat(n, m, math.sqrt(var / n))


def paired(a: dict[str, float], b: dict[str, float]) -> Stat:
    """Mean and standard error of `a[t] - b[t]` over the tasks both scored."""
    common = sorted(set(a) & set(b))
    return mean_se([a[t] - b[t] for t in common])
