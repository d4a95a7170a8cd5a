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
    """`count` values, their mean and the standard error of that mean."""

    count: int
    mean: float
    se: float  # standard error of the mean; 0 for count < 2

    def fmt(self) -> str:
        return f"{self.mean:.4f} ± {self.se:.4f}"


def mean_se(values: list[float]) -> Stat:
    """Mean and standard error `s / sqrt(n)` with the sample std `s` (ddof = 1) over the n = `count` values."""
    count = len(values)
    if count == 0:
        return Stat(0, float("nan"), float("nan"))
    mean = sum(values) / count
    if count < 2:
        return Stat(count, mean, 0.0)
    var = sum((v - mean) ** 2 for v in values) / (count - 1)
    return Stat(count, mean, math.sqrt(var / count))


def paired(first: dict[str, float], second: dict[str, float]) -> Stat:
    """Mean and standard error of `first[t] - second[t]` over the tasks both scored."""
    common = sorted(set(first) & set(second))
    return mean_se([first[t] - second[t] for t in common])
