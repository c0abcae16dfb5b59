"""A directory swapped for a symlink between the allow-list check and the open.

``ProbeContext.allowed_path`` resolves a path and checks it; the probe opens it
later in a worker thread. A racer thread keeps swapping a directory inside the
allowed one for a symlink to a directory outside, while the real file probes
run through `execute_probe` on a path through it. Whatever each call answers
(a result, or a refusal when it sees the path change), no call may show what
lies outside: a line of its file, the name of its entries, or the size of the
sparse file it holds (the size walk of system.files.directories).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK

CALLS = 1500  # per probe; the code before the fix escaped within a few dozen
SECRET = "OUTSIDE-SECRET-LINE"
OUTSIDE_ENTRY = "outside-only-entry"
OUTSIDE_SPARSE_BYTES = 1 << 40  # apparent size of a sparse file outside: seen only by escaping
SHARED_NAMES = [f"both-{number}" for number in range(20)]  # directories inside and outside

REGISTRY = PackRegistry.of([PACK])


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[Path]:
    """``allowed/realdir`` (a log and a directory inside), ``outside`` (a secret log, entries
    of its own, sparse files in directories named as inside and not),
    and a racer swapping ``allowed/realdir`` for a symlink to ``outside`` and back."""
    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    for directory in SHARED_NAMES:
        (allowed / "realdir" / directory).mkdir(parents=True)
    (allowed / "realdir" / "x.log").write_text("harmless inside line\n")
    for directory in (OUTSIDE_ENTRY, *SHARED_NAMES):  # a walk by path finds these outside too
        (outside / directory).mkdir(parents=True)
        with (outside / directory / "sparse").open("wb") as sparse:
            sparse.truncate(OUTSIDE_SPARSE_BYTES)
    (outside / "x.log").write_text(f"{SECRET}\n")
    (outside / f"{OUTSIDE_ENTRY}.log").write_text("z\n")
    (allowed / "lnk").symlink_to(outside)
    stop = threading.Event()
    racer = threading.Thread(target=_swap_until, args=(allowed, stop))
    racer.start()
    try:
        yield allowed
    finally:
        stop.set()
        racer.join()


def _swap_until(allowed: Path, stop: threading.Event) -> None:
    real, backup, link = allowed / "realdir", allowed / "bak", allowed / "lnk"
    while not stop.is_set():
        real.rename(backup)
        link.rename(real)
        real.rename(link)
        backup.rename(real)


def _escaped(result: dict[str, Any]) -> bool:
    text = str(result)
    sizes = [entry["apparent_size_bytes"] or 0 for entry in result.get("entries", ())]
    return SECRET in text or OUTSIDE_ENTRY in text or any(size >= OUTSIDE_SPARSE_BYTES for size in sizes)


@pytest.mark.parametrize(
    ("probe", "where", "params"),
    [
        ("system.files.read", "realdir/x.log", {}),
        ("system.logs.tail", "realdir/x.log", {}),
        ("system.files.list", "realdir", {}),
        ("system.files.directories", "realdir", {"sort_by": "size"}),
        ("system.files.directories", "", {"sort_by": "size"}),  # the size walk through realdir
    ],
)
async def test_swapped_directory_never_leads_outside(
    layout: Path, probe: str, where: str, params: dict[str, Any]
) -> None:
    ctx = ProbeContext(settings=ProbeSettings(allowed_paths=(str(layout),)))
    arguments = {"path": str(layout / where), **params}
    answered = 0
    for call in range(CALLS):
        outcome = await _call(probe, arguments, ctx)
        if isinstance(outcome, ProbeExecutionError):  # it saw the path change: a clean refusal
            assert outcome.code in {"refused", "permission_denied"}, outcome
            assert SECRET not in str(outcome)
            continue
        assert not _escaped(outcome), f"call {call} read outside: {outcome}"
        answered += 1
    assert answered > 0


async def _call(
    probe: str, arguments: dict[str, Any], ctx: ProbeContext
) -> dict[str, Any] | ProbeExecutionError:
    try:
        return (await execute_probe(REGISTRY, probe, arguments, ctx)).result
    except ProbeExecutionError as exc:
        return exc
