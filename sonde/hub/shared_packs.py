"""One copy of each pack description in the hub, however many agents describe it.

Every agent describes its packs at enrollment and at each register (every probe's name,
description and parameter schema), and the hub keeps that in the agent's record. With
the built-in packs that is about 70 KB of JSON and 300 KiB of Python objects per agent:
530 KiB of hub RSS per agent in the benchmark's scale scenario with agents describing
them, against the 100 KiB the hub is meant to hold an agent in.

Agents of one Sonde version describe a pack alike, so records share one copy of each
description: a record's ``packs`` is a list of `SharedPack` that other records hold too.
Nothing may change one in place; a record gets new packs by being replaced
(`Fleet.update`). A description no record holds any more is let go (the copies are
weakly kept), but for those of the last few sets of packs read, which stay so that
reading a record back from the database is one lookup (`packs_of_set`), not a parse.

A set of packs is known by the hash of its stored text (`pack_set_id`): the database
keeps each set once too (`sonde.hub.pack_sets`).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from functools import cache, partial
from typing import TYPE_CHECKING, Any, Generic, TypeVar
from weakref import WeakValueDictionary

from pydantic import TypeAdapter

if TYPE_CHECKING:  # not imported: the database's migration uses this module, CLI commands too
    from sonde.protocol.messages import PackDescriptor

RECENT_SETS = 16  # sets of packs kept for a lookup by their id (or the hash of what an agent sent)
K = TypeVar("K")
V = TypeVar("V")


class SharedPack(dict[str, Any]):
    """One pack's description, shared by every record with the same one: never change it."""

    __slots__ = ("__weakref__",)


_lock = threading.Lock()  # the store's threads read records too
_descriptions: WeakValueDictionary[bytes, SharedPack] = WeakValueDictionary()


class _Recent(Generic[K, V]):
    """The last `RECENT_SETS` entries put or found, the others let go (under ``_lock``)."""

    def __init__(self) -> None:
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        with _lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: K, value: V) -> None:
        with _lock:
            self._entries[key] = value
            while len(self._entries) > RECENT_SETS:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with _lock:
            self._entries.clear()


_recent_sets: _Recent[str, tuple[Any, ...]] = _Recent()
# the ids of the last few sets of shared descriptions stored, by their members' identities;
# each entry holds its members, so no identity in a key is another object's while it is kept
_stored_ids: _Recent[tuple[int, ...], tuple[tuple[SharedPack, ...], str]] = _Recent()


def packs_text(packs: Iterable[Any]) -> str:
    """A set of packs as the database stores it."""
    return json.dumps(list(packs), sort_keys=True)


def pack_set_id(text: str) -> str:
    """The id of the set of packs stored as ``text`` (`packs_text`)."""
    return hashlib.sha256(text.encode()).hexdigest()


def stored_set_id(packs: Sequence[Any]) -> tuple[str, str | None]:
    """The id of the set ``packs`` as the database stores it, and its text (`packs_text`),
    None when the set was worked out before: the last few sets of shared descriptions are
    remembered by their members, so a fleet enrolling, or reconnecting after an upgrade,
    with one new set encodes it once, not once per agent (0.4 ms each for the
    built-in packs)."""
    shared = all(type(pack) is SharedPack for pack in packs)
    key = tuple(map(id, packs))
    found = _stored_ids.get(key) if shared else None
    if found is not None:
        return found[1], None
    text = packs_text(packs)
    set_id = pack_set_id(text)
    if shared:
        _stored_ids.put(key, (tuple(packs), set_id))
    return set_id, text


def packs_of_set(set_id: str, read_text: Callable[[str], str]) -> tuple[Any, ...]:
    """The packs of set ``set_id`` (a stored set's id, or `described_packs`'s key), each the
    copy other records share; ``read_text`` gives the set's text when it is not a recent one."""
    found = _recent_sets.get(set_id)
    if found is not None:
        return found
    packs = tuple(_shared(pack) for pack in json.loads(read_text(set_id)))
    _recent_sets.put(set_id, packs)
    return packs


def forget_recent_sets() -> None:
    """Keep no set for lookups, nor their stored ids (tests: what no record holds is then let go)."""
    _recent_sets.clear()
    _stored_ids.clear()


def described_packs(descriptors: tuple[PackDescriptor, ...]) -> list[Any]:
    """The packs an agent described (at register or enrollment) as its record keeps them.

    Known by a hash of pydantic's own JSON of them (a tenth of a millisecond for the built-in
    packs, against a millisecond to turn them into dicts and those into text): a reconnecting
    agent, or one more of a fleet, is one lookup.
    """
    key = (
        "described:"
        + hashlib.sha256(_descriptors_adapter().dump_json(descriptors, by_alias=True)).hexdigest()
    )
    return list(packs_of_set(key, partial(_described_text, descriptors)))


def _described_text(descriptors: tuple[PackDescriptor, ...], _key: str) -> str:
    return json.dumps([p.model_dump(mode="json", by_alias=True) for p in descriptors])


@cache
def _descriptors_adapter() -> TypeAdapter[tuple[PackDescriptor, ...]]:
    from sonde.protocol.messages import PackDescriptor  # the wire models, only when an agent describes

    return TypeAdapter(tuple[PackDescriptor, ...])


def _shared(pack: Any) -> Any:
    if not isinstance(pack, dict):
        return pack  # not a description this hub wrote: kept as it is
    key = hashlib.sha256(json.dumps(pack, sort_keys=True).encode()).digest()
    with _lock:
        found = _descriptions.get(key)
        if found is None:
            found = _descriptions[key] = SharedPack(pack)
    return found
