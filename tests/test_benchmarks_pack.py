"""The simulated agents' packs: what they register is what they enrolled with, as a real agent's.

`sonde enroll` and `sonde start` both offer the packs detected on the machine
(`active_packs`); the simulated agents enroll through the real `enroll`, which
applies it, and run through `agent_main`, which does not. Offered every
installed pack there, each simulated agent's first register changed its record's
packs, a write a real agent's first register does not cost the hub.
"""

from __future__ import annotations

from benchmarks.pack import PACK_NAME, bench_registry
from sonde.agent.identity import active_packs
from sonde.packs.registry import load_packs


def test_the_described_packs_are_those_a_real_agent_here_offers() -> None:
    offered = bench_registry(describe_installed=True)
    real = active_packs(load_packs(), None)
    assert set(offered.packs) == {PACK_NAME, *real.packs}
    assert set(active_packs(offered, None).packs) == set(offered.packs)  # enroll's filter keeps them all


def test_without_describe_installed_only_the_bench_pack() -> None:
    assert list(bench_registry().packs) == [PACK_NAME]
