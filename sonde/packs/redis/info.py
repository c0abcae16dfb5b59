"""Redis INFO text -> values. Pure.

INFO is ``# Section`` headers and ``key:value`` lines (CRLF). A few values are
themselves ``k=v,k=v`` lists: ``db0:keys=1,expires=0,avg_ttl=0`` in Keyspace and
``slave0:ip=10.0.0.2,port=6379,state=online,offset=1234,lag=0`` in Replication.
"""

from __future__ import annotations

from collections.abc import Mapping

Info = dict[str, str]


def parse_info(text: str) -> Info:
    """Every ``key:value`` line of INFO; section headers and blank lines are skipped."""
    fields: Info = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields[key] = value
    return fields


def parse_pairs(value: str) -> dict[str, str]:
    """``keys=1,expires=0,avg_ttl=0`` -> ``{"keys": "1", ...}``."""
    pairs = {}
    for item in value.split(","):
        key, sep, val = item.partition("=")
        if sep:
            pairs[key] = val
    return pairs


def integer(info: Mapping[str, str], key: str) -> int | None:
    value = info.get(key)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def number(info: Mapping[str, str], key: str) -> float | None:
    value = info.get(key)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def keyspace(info: Mapping[str, str]) -> dict[int, dict[str, int]]:
    """``{0: {"keys": 12, "expires": 3, "avg_ttl": 0}}`` from the ``dbN`` lines."""
    found = {}
    for key, value in info.items():
        if key.startswith("db") and key[2:].isdigit():
            found[int(key[2:])] = {
                k: int(v) for k, v in parse_pairs(value).items() if v.lstrip("-").isdigit()
            }
    return dict(sorted(found.items()))


def replicas(info: Mapping[str, str]) -> list[dict[str, str]]:
    """The ``slaveN`` lines of a primary, in order."""
    rows = [
        (int(key[5:]), parse_pairs(value))
        for key, value in info.items()
        if key.startswith("slave") and key[5:].isdigit()
    ]
    return [pairs for _, pairs in sorted(rows)]


def hit_percent(hits: int | None, misses: int | None) -> float | None:
    total = (hits or 0) + (misses or 0)
    return round((hits or 0) * 100 / total, 2) if total else None
