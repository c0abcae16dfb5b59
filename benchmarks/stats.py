"""Figures as plain JSON: a distribution (min / median / p99 / max) or one value.

Every figure a scenario reports goes through `distribution` or `scalar`, so the
JSON file and the table have one shape to read: ``{"kind": "distribution",
"unit", "n", "min", "median", "p99", "max", "mean"}`` or ``{"kind": "scalar",
"unit", "value"}``. A distribution with no samples has ``n = 0`` and null
statistics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

Figure = dict[str, Any]


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """The ``fraction`` quantile of sorted samples, linearly interpolated (numpy's default)."""
    if not ordered:
        raise ValueError("no samples")
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def distribution(samples: Sequence[float], unit: str) -> Figure:
    """min / median / p99 / max / mean of ``samples`` (rounded to 4 significant places)."""
    ordered = sorted(samples)
    if not ordered:
        return {"kind": "distribution", "unit": unit, "n": 0} | dict.fromkeys(
            ("min", "median", "p99", "max", "mean")
        )
    return {
        "kind": "distribution",
        "unit": unit,
        "n": len(ordered),
        "min": tidy(ordered[0]),
        "median": tidy(percentile(ordered, 0.5)),
        "p99": tidy(percentile(ordered, 0.99)),
        "max": tidy(ordered[-1]),
        "mean": tidy(sum(ordered) / len(ordered)),
    }


def scalar(value: float | None, unit: str) -> Figure:
    return {"kind": "scalar", "unit": unit, "value": None if value is None else tidy(value)}


def tidy(value: float) -> float:
    """``value`` rounded to 4 significant digits, so the JSON stays readable."""
    if value == 0 or not math.isfinite(value):
        return float(value)
    digits = 4 - math.floor(math.log10(abs(value))) - 1
    return round(float(value), max(digits, 0))


def median_of(figure: Figure) -> float | None:
    """The median of a distribution figure, or the value of a scalar one."""
    return figure.get("median") if figure["kind"] == "distribution" else figure.get("value")
