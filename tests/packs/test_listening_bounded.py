"""`system.network.listening` lists at most `limit` sockets, filtered, and counts them all.

On a machine with thousands of listeners the list ran past the executor's 256 KiB cap and was
cut from its end: every UDP socket was left out, and the answer said only "truncated". Now
the probe cuts its own list, says how many TCP and UDP listeners there are, and can be asked
for one protocol or port.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from sonde.packs.context import ProbeContext
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK

REGISTRY = PackRegistry.of([PACK])
TCP_OPEN, UDP_OPEN = 5, 3


@pytest.fixture
def own_ports() -> Iterator[dict[str, list[int]]]:
    """`TCP_OPEN` listening TCP and `UDP_OPEN` bound UDP sockets on 127.0.0.1: their ports."""
    with ExitStack() as stack:
        ports: dict[str, list[int]] = {"tcp": [], "udp": []}
        for protocol, kind, count in (
            ("tcp", socket.SOCK_STREAM, TCP_OPEN),
            ("udp", socket.SOCK_DGRAM, UDP_OPEN),
        ):
            for _ in range(count):
                held = stack.enter_context(socket.socket(socket.AF_INET, kind))
                held.bind(("127.0.0.1", 0))
                if kind == socket.SOCK_STREAM:
                    held.listen()
                ports[protocol].append(held.getsockname()[1])
        yield ports


async def listening(**params: Any) -> dict[str, Any]:
    return (await execute_probe(REGISTRY, "system.network.listening", params, ProbeContext())).result


async def test_a_cut_list_counts_what_it_left_out(own_ports: dict[str, list[int]]) -> None:
    every = await listening()
    assert every["tcp_listeners"] >= TCP_OPEN
    assert every["udp_listeners"] >= UDP_OPEN
    assert every["matched"] == every["tcp_listeners"] + every["udp_listeners"]
    udp = await listening(protocol="udp", limit=1)
    assert [s["protocol"] for s in udp["sockets"]] == ["udp"]
    assert udp["truncated"] is True
    assert udp["matched"] == every["udp_listeners"]
    assert udp["tcp_listeners"] == every["tcp_listeners"]


async def test_one_port_is_asked_for(own_ports: dict[str, list[int]]) -> None:
    port = own_ports["udp"][1]
    found = await listening(port=port)
    assert [(s["protocol"], s["port"]) for s in found["sockets"]] == [("udp", port)]
    assert found["matched"] == 1
    assert found["truncated"] is False


@pytest.mark.parametrize("params", [{"limit": 0}, {"limit": 1001}, {"protocol": "sctp"}, {"port": 0}])
async def test_bounds_are_kept(params: dict[str, Any]) -> None:
    with pytest.raises(ProbeExecutionError) as caught:
        await listening(**params)
    assert caught.value.code == "invalid_params"
