"""The agent config's per-pack settings (``packs.<pack>.<setting>``) that no installed pack reads.

Each pack names the settings it reads (`sonde.packs.base.Pack.settings`); anything else there is a
typo, said at start (`sonde start`, `sonde serve`) rather than ignored without a word.
"""

from __future__ import annotations

from collections.abc import Mapping

from sonde.packs.registry import PackRegistry


def unknown_settings(configured: Mapping[str, Mapping[str, object]], installed: PackRegistry) -> list[str]:
    """What of the agent config's ``packs`` no installed pack reads, in words: a typo there was
    ignored without a word (a mistyped port meant the default one, a mistyped password none)."""
    said = []
    for name, settings in sorted(configured.items()):
        pack = installed.packs.get(name)
        if pack is None:
            said.append(
                f"packs.{name}: no pack of that name is installed ({', '.join(sorted(installed.packs))})"
            )
            continue
        for setting in sorted(set(settings) - set(pack.settings)):
            reads = f"its settings: {', '.join(pack.settings)}" if pack.settings else "it has no settings"
            said.append(f"packs.{name}.{setting}: not a setting of the {name} pack ({reads})")
    return said
