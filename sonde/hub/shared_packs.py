"""One copy of each pack description in the hub, however many agents describe it.

Every agent describes its packs at enrollment and at each register (every probe's name,
description and parameter schema), and the hub keeps that in the agent's record. With
the built-in packs that is about 70 KB of JSON and 300 KiB of Python objects per agent:
530 KiB of hub RSS per agent in the benchmark's scale scenario with agents describing
them, against the 100 KiB the hub is meant to hold an agent in.

Agents of one Sonde version describe a pack alike, so records share one copy of each
description (`shared_packs`): a record's ``packs`` is a list of `SharedPack` that other
records hold too. Nothing may change one in place; a record gets new packs by being
replaced (`Fleet.update`). A description no record holds any more is let go (the
copies are weakly kept), but for the last few lists of packs read, which stay so that
reading a record back from the database is one lookup, not a parse.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable
from functools import lru_cache
from typing import Any
from weakref import WeakValueDictionary

from sonde.protocol.messages import PackDescriptor

RECENT_LISTS = 16  # distinct lists of packs kept for a lookup by their stored text


class SharedPack(dict[str, Any]):
    """One pack's description, shared by every record with the same one: never change it."""

    __slots__ = ("__weakref__",)


_lock = threading.Lock()  # the store's threads read records too
_descriptions: WeakValueDictionary[bytes, SharedPack] = WeakValueDictionary()


def packs_text(packs: list[Any] | tuple[Any, ...]) -> str:
    """A record's packs as the ``packs`` column stores them."""
    return json.dumps(packs, sort_keys=True)


@lru_cache(maxsize=RECENT_LISTS)
def shared_packs(text: str) -> tuple[Any, ...]:
    """The packs stored as ``text`` (`packs_text`), each the copy other records share."""
    return tuple(_shared(pack) for pack in json.loads(text))


def described_packs(descriptors: Iterable[PackDescriptor]) -> list[Any]:
    """The packs an agent described (at register or enrollment) as its record keeps them."""
    return list(shared_packs(packs_text([p.model_dump(mode="json", by_alias=True) for p in descriptors])))


def _shared(pack: Any) -> Any:
    if not isinstance(pack, dict):
        return pack  # not a description this hub wrote: kept as it is
    key = hashlib.sha256(json.dumps(pack, sort_keys=True).encode()).digest()
    with _lock:
        found = _descriptions.get(key)
        if found is None:
            found = _descriptions[key] = SharedPack(pack)
    return found
