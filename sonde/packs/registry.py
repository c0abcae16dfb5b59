"""The packs installed in this Python environment, found by entry point."""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from sonde.packs.base import Pack, ProbeSpec

if TYPE_CHECKING:
    from sonde.protocol.messages import ProbeDescriptor

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "sonde.packs"


@dataclass(frozen=True)
class PackRegistry:
    """An immutable set of packs, looked up by pack or probe name."""

    packs: dict[str, Pack]

    @classmethod
    def of(cls, packs: Iterable[Pack]) -> PackRegistry:
        return cls({pack.name: pack for pack in packs})

    def probe(self, name: str) -> ProbeSpec[Any, Any] | None:
        pack = self.packs.get(name.split(".", 1)[0])
        return pack.probes.get(name) if pack else None

    def probes(self) -> Iterator[ProbeSpec[Any, Any]]:
        for pack in self.packs.values():
            yield from pack.probes.values()

    def probe_names(self) -> list[str]:
        return sorted(spec.name for spec in self.probes())

    def matching(self, pattern: str) -> list[str]:
        return sorted(name for name in self.described() if fnmatch.fnmatchcase(name, pattern))

    def described(self) -> dict[str, ProbeDescriptor]:
        """Every probe by name as its pack describes it: from the pack's saved description while
        its probe modules are not imported (`Pack.descriptor`), so listing imports none of them."""
        return {probe.name: probe for pack in self.packs.values() for probe in pack.descriptor().probes}

    def detected(self) -> PackRegistry:
        """Only the packs that apply to this machine."""
        return PackRegistry({n: p for n, p in self.packs.items() if p.detection().detected})

    def only(self, names: Iterable[str]) -> PackRegistry:
        wanted = set(names)
        return PackRegistry({n: p for n, p in self.packs.items() if n in wanted})


def load_packs() -> PackRegistry:
    """Every pack registered under the ``sonde.packs`` entry-point group.

    A pack that fails to import is logged and left out, never fatal.
    """
    found: list[Pack] = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            pack = point.load()
        except Exception:  # a third-party pack must not take the agent down
            log.exception("pack %r failed to load", point.name)
            continue
        if not isinstance(pack, Pack):
            log.error("entry point %r is not a sonde Pack", point.name)
            continue
        found.append(pack)
    return PackRegistry.of(sorted(found, key=lambda p: p.name))
