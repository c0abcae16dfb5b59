"""A filtered log probe on a long log of numbers answers well within its deadline.

A review's 17 MB file from ``seq 1 2300000``: ``system.logs.head`` with ``contains: "99999"`` ran
past its 15 s deadline with no answer, where a filter matching nothing took 0.4 s. Each ~1 MiB
batch holding a line that matched was scrubbed three times over (with context, each line with
its file's name before it, each line bare), the second ~160,000 times the path, and every scrub
searched its whole text for ~200 needles. The agent's own scrubber runs here, as in the daemon.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sonde.agent.scrubber import Scrubber
from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK
from sonde.packs.system.textfile import MAX_SCAN_BYTES

REGISTRY = PackRegistry.of([PACK])
SCRUBBER = Scrubber()
NUMBERS = 2_300_000  # 17 MB: more than a probe scans (MAX_SCAN_BYTES)


@pytest.fixture(scope="module")
def numbers_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """``seq 1 2300000``, and what it holds."""
    log = tmp_path_factory.mktemp("numbers") / "seq.log"
    data = "".join(f"{number}\n" for number in range(1, NUMBERS + 1)).encode()
    log.write_bytes(data)
    return log, data


def matching(scanned: bytes) -> list[str]:
    return [line.decode() for line in scanned.split(b"\n") if b"99999" in line]


@pytest.mark.parametrize("probe", ["system.logs.head", "system.logs.tail"])
async def test_a_filter_on_a_long_log_of_numbers_answers_within_its_deadline(
    numbers_log: tuple[Path, bytes], probe: str
) -> None:
    log, data = numbers_log
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(log.parent),)), redact=SCRUBBER.redacted)
    params = {"path": str(log), "lines": 100, "contains": "99999"}
    # the probe's own deadline (15 s): this took 17 to 20 s of CPU, now 2 to 3 s
    outcome = await execute_probe(REGISTRY, probe, params, ctx, scrub=SCRUBBER.scrub_result)
    # the head's scan ends within a line, the tail's starts within one (never sent)
    scanned = data[:MAX_SCAN_BYTES] if probe.endswith("head") else data[-MAX_SCAN_BYTES:].partition(b"\n")[2]
    assert outcome.result["lines"] == matching(scanned)
    assert 30 < len(outcome.result["lines"]) < 100
    assert (outcome.result["complete"], outcome.result["truncated"]) == (False, False)
