"""``python -m sonde.packs.describe [--check]``: write (or check) the built-in packs' saved descriptions.

A pack with ``described_by`` set keeps `Pack.describe()` (its categories and
its probes' names, descriptions, parameter schemas and timeouts) in that JSON
file, so an agent builds its register without importing the probe modules:
on a machine where five packs apply, that is ~3 MiB of resident memory the
agent does not spend until one of their probes runs. The file must say
exactly what the modules would; the test suite runs ``--check``, and after
changing a probe's name, description, parameters or timeout you run this.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path

import sonde
from sonde.packs.base import Pack
from sonde.packs.registry import load_packs

SONDE_DIR = Path(sonde.__file__).resolve().parent


def saved_text(pack: Pack) -> str:
    """What ``described_by`` must hold for ``pack`` (loads its probe modules)."""
    return json.dumps(pack.describe(), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def stale(packs: list[Pack]) -> list[Path]:
    """The description files that differ from their pack's modules (or are missing)."""
    out = []
    for pack in packs:
        assert pack.described_by is not None
        try:
            current = pack.described_by.read_text(encoding="utf-8")
        except OSError:
            current = None
        if current != saved_text(pack):
            out.append(pack.described_by)
    return out


def built_in_described(packs: Iterable[Pack]) -> list[Pack]:
    """The packs shipped with sonde that keep a saved description."""
    return [
        p for p in packs if p.described_by is not None and p.described_by.resolve().is_relative_to(SONDE_DIR)
    ]


def main(argv: list[str]) -> int:
    if argv not in ([], ["--check"]):
        print("usage: python -m sonde.packs.describe [--check]", file=sys.stderr)
        return 2
    packs = built_in_described(load_packs().packs.values())
    if argv == ["--check"]:
        outdated = stale(packs)
        for path in outdated:
            print(f"{path} is out of date: run python -m sonde.packs.describe", file=sys.stderr)
        return 1 if outdated else 0
    for pack in packs:
        assert pack.described_by is not None
        pack.described_by.write_text(saved_text(pack), encoding="utf-8")
        print(f"wrote {pack.described_by}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
