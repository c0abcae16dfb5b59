"""Hardware, block devices, kernel messages, connections, ping and traceroute, for real on this machine."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from sonde.packs.context import ProbeContext
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK
from sonde.packs.system.reachability import parse_ping
from tests.conftest import require

REGISTRY = PackRegistry.of([PACK])


async def run(name: str, **params: Any) -> dict[str, Any]:
    return (await execute_probe(REGISTRY, name, params, ProbeContext())).result


async def test_hardware_summary() -> None:
    hardware = await run("system.hardware.summary")
    cpu = hardware["cpu"]
    assert cpu["logical_cpus"] == os.cpu_count()
    assert cpu["architecture"] == os.uname().machine
    assert cpu["model_name"]
    if cpu["sockets"] and cpu["cores_per_socket"] and cpu["threads_per_core"]:
        assert cpu["sockets"] * cpu["cores_per_socket"] * cpu["threads_per_core"] == cpu["logical_cpus"]
    assert hardware["memory_total_bytes"] == psutil.virtual_memory().total
    assert hardware["virtualized"] == (cpu["hypervisor_vendor"] is not None)


async def test_block_devices_hold_the_root_disk() -> None:
    if shutil.which("lsblk") is None:
        with pytest.raises(ProbeExecutionError) as caught:
            await run("system.block.devices")
        assert caught.value.code == "unavailable"
        return
    devices = (await run("system.block.devices"))["devices"]
    assert devices
    assert all(d["size_bytes"] is None or d["size_bytes"] >= 0 for d in devices)
    names = {d["name"] for d in devices}
    assert all(d["parent"] is None or d["parent"] in names for d in devices)
    counted = set(psutil.disk_io_counters(perdisk=True))
    assert any(d["io"] is not None for d in devices if d["name"] in counted)


def dmesg_restricted() -> bool:
    """kernel.dmesg_restrict=1 and no CAP_SYSLOG: reading the ring buffer is refused."""
    restricted = Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1"
    return restricted and os.geteuid() != 0


async def test_kernel_messages_or_a_clear_refusal() -> None:
    if dmesg_restricted():
        with pytest.raises(ProbeExecutionError) as caught:
            await run("system.kernel.messages")
        assert caught.value.code == "permission_denied"
        assert "CAP_SYSLOG" in caught.value.message
        return
    found = await run("system.kernel.messages", max_level="debug", limit=5)
    assert 1 <= len(found["messages"]) <= 5
    assert sum(found["counts_by_level"].values()) >= len(found["messages"])
    assert found["truncated"] == (sum(found["counts_by_level"].values()) > 5)
    seconds = [m["seconds_since_boot"] for m in found["messages"]]
    assert seconds == sorted(seconds)


async def test_kernel_messages_cut_to_fit_keep_the_newest() -> None:
    """Cut from the end like any list, a storm's newest messages were the ones dropped."""
    if dmesg_restricted():
        return  # covered above
    whole = await run("system.kernel.messages", max_level="debug", limit=2000)
    require(len(whole["messages"]) > 20, "a kernel ring buffer of more than 20 messages")
    cut = (
        await execute_probe(
            REGISTRY,
            "system.kernel.messages",
            {"max_level": "debug", "limit": 2000},
            ProbeContext(),
            max_result_bytes=4096,
        )
    ).result
    assert 0 < len(cut["messages"]) < len(whole["messages"])
    assert cut["messages"][-1]["seconds_since_boot"] >= whole["messages"][-1]["seconds_since_boot"]


async def test_kernel_messages_respect_the_level() -> None:
    if dmesg_restricted():
        return  # covered by the test above
    found = await run("system.kernel.messages", max_level="err", limit=2000)
    assert all(m["level"] in ("emerg", "alert", "crit", "err") for m in found["messages"])


@asynccontextmanager
async def tcp_connection() -> AsyncIterator[tuple[int, trio.SocketStream, trio.socket.SocketType]]:
    """An established TCP connection of this process on 127.0.0.1: (listener's port, client, server)."""
    listener = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with listener:
        await listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = await trio.open_tcp_stream("127.0.0.1", port)
        server, _ = await listener.accept()
        with server:
            async with client:
                yield port, client, server


@pytest.fixture
async def connected_pair() -> AsyncIterator[int]:
    """An established TCP connection of this process on 127.0.0.1; yields the listener's port."""
    async with tcp_connection() as (port, _, _):
        yield port


async def test_connections_show_our_own() -> None:
    async with tcp_connection() as (port, client, _):
        client_port = client.socket.getsockname()[1]
        found = await run("system.network.connections", state="established", port=port)
        listening = await run("system.network.connections", state="listen", port=port)
    # Another process's connection may use this port number at its other end: look at our two ends.
    ends = {(c["local_port"], c["remote_port"]): c["pid"] for c in found["connections"]}
    assert ends[(client_port, port)] == ends[(port, client_port)] == os.getpid()
    assert found["counts_by_state"]["ESTABLISHED"] >= 2
    assert [c["local_port"] for c in listening["connections"]] == [port]


async def test_connections_limit_marks_truncation(connected_pair: int) -> None:
    found = await run("system.network.connections", state="all", limit=1)
    assert len(found["connections"]) == 1
    assert found["truncated"] is True


async def test_time_wait_connections_have_no_owner_to_hide() -> None:
    async with tcp_connection() as (port, client, server):
        client_port = client.socket.getsockname()[1]
        await client.aclose()  # the side that closes first keeps the TIME_WAIT socket
        assert await server.recv(1) == b""
    found = await run("system.network.connections", state="time_wait", port=port)
    # Other tests' connections in TIME_WAIT (60 s) may have used this port number too: pick ours.
    ours = [c for c in found["connections"] if (c["local_port"], c["remote_port"]) == (client_port, port)]
    assert [c["pid"] for c in ours] == [None]
    assert found["processes_visible"] is True  # TIME_WAIT sockets belong to no process
    assert found["note"] is None


async def test_ping_loopback() -> None:
    if shutil.which("ping") is None:  # iputils-ping is optional: then the probe must say so cleanly
        with pytest.raises(ProbeExecutionError) as caught:
            await run("system.network.ping", host="127.0.0.1")
        assert caught.value.code == "unavailable"
        assert "'ping' is not installed" in caught.value.message
        return
    found = await run("system.network.ping", host="127.0.0.1", count=2, timeout_s=1)
    assert (found["reachable"], found["transmitted"], found["received"]) == (True, 2, 2)
    assert found["loss_percent"] == 0.0
    assert 0 <= found["rtt_min_ms"] <= found["rtt_avg_ms"] <= found["rtt_max_ms"]


PING_HINT = "needs iputils' ping (Debian and Ubuntu: apt-get install -y iputils-ping)"
UNREACHABLE = "192.0.2.99"  # TEST-NET-1: no host answers there


def on_link(address: str) -> bool:
    """Whether this machine has an interface in ``address``'s /24: then ARP fails and ping reports errors."""
    prefix = address.rsplit(".", 1)[0] + "."
    return any(
        entry.family == socket.AF_INET and entry.address.startswith(prefix)
        for entries in psutil.net_if_addrs().values()
        for entry in entries
    )


@pytest.mark.parametrize(("count", "timeout_s"), [(1, 1), (2, 1), (3, 2)])
async def test_ping_of_an_unreachable_address_sends_count_packets_in_bounded_time(
    count: int, timeout_s: int
) -> None:
    """iputils' -w DEADLINE makes -c a count of replies to wait for: it kept sending until the deadline."""
    require(shutil.which("ping") is not None, PING_HINT)
    started = trio.current_time()
    found = await run("system.network.ping", host=UNREACHABLE, count=count, timeout_s=timeout_s)
    assert trio.current_time() - started < (count - 1) * 0.2 + timeout_s + 1.5
    assert (found["reachable"], found["transmitted"], found["received"]) == (False, count, 0)
    assert found["loss_percent"] == 100.0


async def test_ping_reports_host_unreachable_errors() -> None:
    """On its own /24, the address's ARP fails after 3 s (3 solicitations 1 s apart): "+2 errors"."""
    require(shutil.which("ping") is not None, PING_HINT)
    if not on_link(UNREACHABLE):
        pytest.skip(f"{UNREACHABLE} is routed away from this machine: its packets are lost without an error")
    started = trio.current_time()
    found = await run("system.network.ping", host=UNREACHABLE, count=2, timeout_s=5)
    assert trio.current_time() - started < 0.2 + 5 + 1.5
    assert (found["transmitted"], found["received"], found["errors"]) == (2, 0, 2)
    assert found["error"].startswith("Destination Host Unreachable from ")
    assert found["error"].endswith(" (2 errors)")


async def test_ping_loopback_sends_count_packets() -> None:
    require(shutil.which("ping") is not None, PING_HINT)
    found = await run("system.network.ping", host="127.0.0.1", count=3, timeout_s=1)
    assert (found["transmitted"], found["received"], found["errors"], found["error"]) == (3, 3, 0, None)


def test_ping_errors_are_reported_not_left_null() -> None:
    """ "+2 errors": the ICMP errors that came back instead of replies, named with their sender."""
    text = (Path(__file__).parent / "recorded" / "hand" / "ping-iputils-unreachable.txt").read_text()
    down = parse_ping("10.0.0.99", text, "")
    assert (down.transmitted, down.received, down.errors) == (3, 0, 2)
    assert down.error == "Destination Host Unreachable from 10.0.0.1 (2 errors)"
    mixed = (
        "From 10.0.0.1 icmp_seq=1 Destination Host Unreachable\n"
        "From 10.0.0.254 (10.0.0.254) icmp_seq=2 Time to live exceeded\n"
        "3 packets transmitted, 0 received, +2 errors, 100% packet loss, time 2030ms\n"
    )
    assert parse_ping("10.0.0.99", mixed, "").error == (
        "Destination Host Unreachable from 10.0.0.1; Time to live exceeded from 10.0.0.254 (2 errors)"
    )
    bare = parse_ping("10.0.0.99", "1 packets transmitted, 0 received, +1 errors, 100% packet loss\n", "")
    assert (bare.errors, bare.error) == (1, "1 error")


async def test_ping_of_an_unknown_name_reports_the_error() -> None:
    if shutil.which("ping") is None:
        return  # covered by test_ping_loopback
    found = await run("system.network.ping", host="no-such-host.invalid", count=1, timeout_s=1)
    assert found["reachable"] is False
    assert found["error"]


async def test_traceroute_loopback() -> None:
    if shutil.which("traceroute") is None:  # optional, like ping
        with pytest.raises(ProbeExecutionError) as caught:
            await run("system.network.traceroute", host="127.0.0.1")
        assert caught.value.code == "unavailable"
        return
    found = await run("system.network.traceroute", host="127.0.0.1", max_hops=3, wait_s=1)
    assert found["destination"] == "127.0.0.1"
    assert found["reached"] is True
    assert found["hops"][0]["addresses"] == ["127.0.0.1"]


@pytest.mark.parametrize(
    ("name", "params", "package"),
    [
        ("system.network.ping", {"host": "127.0.0.1"}, "iputils-ping"),
        ("system.network.traceroute", {"host": "127.0.0.1"}, "traceroute"),
        ("system.block.devices", {}, "util-linux"),
    ],
)
async def test_a_missing_binary_is_unavailable_not_a_failure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, name: str, params: dict[str, Any], package: str
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing installed
    with pytest.raises(ProbeExecutionError) as caught:
        await run(name, **params)
    assert caught.value.code == "unavailable"
    assert "is not installed on this machine" in caught.value.message
    assert f"apt install {package}" in caught.value.message
