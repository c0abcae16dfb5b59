"""Every probe of the system pack, run for real on this machine through the executor."""

from __future__ import annotations

import datetime
import math
import os
import re
import socket
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import psutil
import pytest
import trio
import trio.testing

from sonde.packs.context import ProbeContext
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK
from sonde.packs.system.disk import PSEUDO_FILESYSTEMS, FilesystemUsage
from sonde.packs.system.listening import listening_from_procfs
from sonde.packs.system.process_info import PID_MAX

REGISTRY = PackRegistry.of([PACK])
EXPECTED_PROBES = {
    "system.info",
    "system.cpu.usage",
    "system.memory.usage",
    "system.disk.usage",
    "system.network.interfaces",
    "system.network.listening",
    "system.processes.top",
    "system.process.info",
    "system.hardware.summary",
    "system.block.devices",
    "system.files.list",
    "system.files.deleted_open",
    "system.files.directories",
    "system.files.read",
    "system.logs.tail",
    "system.logs.head",
    "system.kernel.messages",
    "system.network.connections",
    "system.network.ping",
    "system.network.traceroute",
}
MY_NAME = psutil.Process().name()
HAS_PRESSURE = {
    resource: os.path.exists(f"/proc/pressure/{resource}") for resource in ("cpu", "memory", "io")
}
LONG_TIMEOUTS_S = {"system.files.directories": 30, "system.network.traceroute": 60}


async def run(name: str, **params: Any) -> dict[str, Any]:
    outcome = await execute_probe(REGISTRY, name, params, ProbeContext())
    assert not outcome.truncated
    return outcome.result


async def refusal(name: str, params: dict[str, Any]) -> ProbeExecutionError:
    with pytest.raises(ProbeExecutionError) as caught:
        await execute_probe(REGISTRY, name, params, ProbeContext())
    return caught.value


def parse_iso(text: str) -> datetime.datetime:
    moment = datetime.datetime.fromisoformat(text)
    assert moment.utcoffset() == datetime.timedelta(0)
    return moment


# the pack itself


def test_the_pack_declares_exactly_the_expected_probes() -> None:
    assert set(PACK.probes) == EXPECTED_PROBES


@pytest.mark.parametrize("name", sorted(EXPECTED_PROBES))
def test_probe_is_named_and_described_for_a_model(name: str) -> None:
    spec = PACK.probes[name]
    assert re.fullmatch(r"system\.[a-z_]+(\.[a-z_]+)?", spec.name)
    assert len(spec.description) >= 40
    assert spec.timeout_s <= LONG_TIMEOUTS_S.get(name, 15)


@pytest.mark.parametrize("name", sorted(EXPECTED_PROBES))
def test_params_schema_forbids_unknown_fields(name: str) -> None:
    spec = PACK.probes[name]
    assert spec.params_schema()["additionalProperties"] is False
    assert spec.params.model_json_schema()["additionalProperties"] is False


def test_every_number_param_is_bounded() -> None:
    for spec in PACK.probes.values():
        for field_name, field in spec.params_schema()["properties"].items():
            if field.get("type") in ("integer", "number"):
                assert "minimum" in field, (spec.name, field_name)
                assert "maximum" in field, (spec.name, field_name)


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("system.processes.top", {"limit": 0}),
        ("system.processes.top", {"limit": 1000}),
        ("system.processes.top", {"limit": "5"}),
        ("system.processes.top", {"sort_by": "x"}),
        ("system.processes.top", {"sort_by": "cpu", "user": "root"}),
        ("system.process.info", {}),
        ("system.process.info", {"pid": -1}),
        ("system.process.info", {"pid": 0}),
        ("system.process.info", {"pid": PID_MAX + 1}),
        ("system.process.info", {"pid": "1"}),
        ("system.process.info", {"pid": True}),
        ("system.cpu.usage", {"interval_s": -0.1}),
        ("system.cpu.usage", {"interval_s": 60}),
        ("system.cpu.usage", {"interval_s": "fast"}),
        ("system.info", {"verbose": True}),
        ("system.disk.usage", {"all": True}),
        ("system.network.listening", {"kind": "tcp"}),
    ],
)
async def test_invalid_params_are_refused(name: str, params: dict[str, Any]) -> None:
    error = await refusal(name, params)
    assert error.code == "invalid_params"
    assert name in error.message


# each probe, for real


async def test_system_info() -> None:
    info = await run("system.info")
    assert info["hostname"] == socket.gethostname()
    assert info["os"]["id"]
    assert info["os"]["pretty_name"]
    assert info["kernel"] == os.uname().release
    assert info["arch"] == os.uname().machine
    assert info["cpu_count"] == os.cpu_count()
    assert info["uptime_seconds"] > 0
    booted = parse_iso(info["boot_time"])
    assert booted < datetime.datetime.now(datetime.UTC)


async def test_cpu_usage_over_a_short_interval() -> None:
    usage = await run("system.cpu.usage", interval_s=0.1)
    assert usage["logical_count"] >= 1
    assert len(usage["per_cpu_percent"]) == usage["logical_count"]
    assert 0.0 <= usage["percent"] <= 100.0
    assert all(0.0 <= p <= 100.0 for p in usage["per_cpu_percent"])
    assert usage["load_1m"] >= 0.0
    assert usage["load_per_cpu"] == pytest.approx(usage["load_1m"] / usage["logical_count"], abs=0.01)


async def test_cpu_usage_splits_the_time_over_the_same_sample() -> None:
    usage = await run("system.cpu.usage", interval_s=0.2)
    shares = [usage[key] for key in ("user_percent", "system_percent", "iowait_percent", "steal_percent")]
    assert all(0.0 <= share <= 100.0 for share in shares)
    # busy counts user, system and steal, never iowait (rounding: each share to 0.1)
    assert usage["user_percent"] + usage["system_percent"] + usage["steal_percent"] <= usage["percent"] + 0.5
    pressure = usage["pressure"]
    assert set(pressure) == {"cpu", "memory", "io"}
    for resource, stall in pressure.items():
        if not HAS_PRESSURE[resource]:
            assert stall is None
            continue
        assert set(stall) == {"some_avg10", "some_avg60"}
        assert all(0.0 <= value <= 100.0 for value in stall.values())


async def test_cpu_usage_echoes_a_negative_zero_interval_as_zero() -> None:
    usage = await run("system.cpu.usage", interval_s=-0.0)
    assert usage["interval_s"] == 0.0
    assert math.copysign(1.0, usage["interval_s"]) == 1.0  # not -0.0


@pytest.mark.parametrize("interval_s", [0.0, 0.5, 5.0])
async def test_cpu_usage_waits_its_interval_on_the_trio_clock(
    autojump_clock: trio.testing.MockClock, interval_s: float
) -> None:
    # The sample wait is a trio.sleep (no thread, no blocking sleep), so virtual time is exact.
    started = trio.current_time()
    usage = await run("system.cpu.usage", interval_s=interval_s)
    assert trio.current_time() - started == interval_s
    assert usage["interval_s"] == interval_s
    assert 0.0 <= usage["percent"] <= 100.0


async def test_memory_usage() -> None:
    memory = await run("system.memory.usage")
    assert memory["total_bytes"] > 0
    assert 0 < memory["available_bytes"] <= memory["total_bytes"]


async def test_disk_usage_has_the_root_filesystem_and_no_pseudo_ones() -> None:
    disks = await run("system.disk.usage")
    by_mountpoint = {fs["mountpoint"]: fs for fs in disks["filesystems"]}
    root = by_mountpoint["/"]
    assert root["total_bytes"] > 0
    assert root["used_bytes"] + root["free_bytes"] <= root["total_bytes"]
    assert 0.0 <= root["percent_used"] <= 100.0
    assert not {fs["fstype"] for fs in disks["filesystems"]} & PSEUDO_FILESYSTEMS
    pairs = [(fs["device"], fs["mountpoint"]) for fs in disks["filesystems"]]
    assert len(pairs) == len(set(pairs))


async def test_disk_usage_accounts_for_the_reserved_blocks() -> None:
    """total = used + free + reserved: ext4 keeps 5% for root by default, which df's Avail leaves out."""
    root = {fs["mountpoint"]: fs for fs in (await run("system.disk.usage"))["filesystems"]}["/"]
    now = os.statvfs("/")
    assert root["total_bytes"] == root["used_bytes"] + root["free_bytes"] + root["reserved_bytes"]
    assert root["total_bytes"] == now.f_blocks * now.f_frsize
    expected_reserved = (now.f_bfree - now.f_bavail) * now.f_frsize
    assert abs(root["reserved_bytes"] - expected_reserved) <= 64 * 1024**2  # other writers meanwhile
    assert abs(root["free_bytes"] - now.f_bavail * now.f_frsize) <= 64 * 1024**2
    described = {name: str(field.description) for name, field in FilesystemUsage.model_fields.items()}
    assert "unprivileged" in described["free_bytes"]
    assert "root" in described["reserved_bytes"]


async def test_network_interfaces_include_loopback() -> None:
    interfaces = {i["name"]: i for i in (await run("system.network.interfaces"))["interfaces"]}
    loopback = interfaces["lo"]
    assert loopback["is_up"]
    assert {"family": "ipv4", "address": "127.0.0.1", "netmask": "255.0.0.0"} in loopback["addresses"]
    assert loopback["counters"]["bytes_received"] >= 0


@pytest.fixture
async def own_ports() -> AsyncIterator[dict[str, int]]:
    """A TCP listener and a bound UDP socket of this process on 127.0.0.1, by protocol."""
    tcp = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    udp = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with tcp, udp:
        await tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        await udp.bind(("127.0.0.1", 0))
        yield {"tcp": tcp.getsockname()[1], "udp": udp.getsockname()[1]}


async def test_network_listening_finds_our_own_sockets(own_ports: dict[str, int]) -> None:
    listening = await run("system.network.listening")
    found = {(s["protocol"], s["address"], s["port"]): s for s in listening["sockets"]}
    for protocol, port in own_ports.items():
        entry = found[(protocol, "127.0.0.1", port)]
        assert entry["pid"] == os.getpid()
        assert entry["process_name"] == MY_NAME
        assert entry["family"] == "ipv4"
    assert listening["processes_visible"] == all(s["pid"] is not None for s in listening["sockets"])


async def test_procfs_fallback_finds_our_own_sockets(own_ports: dict[str, int]) -> None:
    found = await trio.to_thread.run_sync(listening_from_procfs)
    ours = {(s.protocol, s.port) for s in found if s.pid == os.getpid()}
    assert ours >= set(own_ports.items())


@pytest.mark.parametrize("sort_by", ["cpu", "memory"])
async def test_processes_top(sort_by: str) -> None:
    top = await run("system.processes.top", sort_by=sort_by, limit=5)
    assert top["sort_by"] == sort_by
    assert top["process_count"] >= len(top["processes"]) >= 1
    assert len(top["processes"]) <= 5
    key = "cpu_percent" if sort_by == "cpu" else "memory_percent"
    values = [p[key] if p[key] is not None else -1.0 for p in top["processes"]]
    assert values == sorted(values, reverse=True)
    for process in top["processes"]:
        assert process["cmdline"] is None or len(process["cmdline"]) <= 512
        if process["create_time"] is not None:
            parse_iso(process["create_time"])


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


async def test_processes_top_by_cpu_leaves_out_the_agent_itself() -> None:
    """Sampling costs the agent CPU: it must not be named the busiest process for measuring."""
    busy = await trio.lowlevel.open_process([sys.executable, "-c", "while True: pass"])
    try:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, spin, 0.5)  # this process busy too
                top = await run("system.processes.top", sort_by="cpu", limit=100)
    finally:
        busy.kill()
        await busy.wait()
    pids = [process["pid"] for process in top["processes"]]
    assert os.getpid() not in pids
    assert busy.pid in pids[:10]  # near the top (other work on a loaded machine may outrank it)
    by_memory = await run("system.processes.top", sort_by="memory", limit=100)
    assert os.getpid() in [process["pid"] for process in by_memory["processes"]]  # its memory is real


async def test_processes_top_default_limit() -> None:
    top = await run("system.processes.top")
    assert len(top["processes"]) == min(10, top["process_count"])


async def test_process_info_of_this_test_process() -> None:
    info = await run("system.process.info", pid=os.getpid())
    assert info["pid"] == os.getpid()
    assert info["name"] == MY_NAME
    assert info["ppid"] == os.getppid()
    assert info["cwd"] == os.getcwd()
    assert info["exe"] == psutil.Process().exe()
    assert info["cmdline"] == psutil.Process().cmdline()
    assert info["memory_rss_bytes"] > 0
    assert info["num_threads"] >= 1
    assert info["open_files_count"] is not None
    assert info["denied"] == []
    parse_iso(info["create_time"])


async def test_process_info_of_init_never_fails() -> None:
    info = await run("system.process.info", pid=1)
    assert info["pid"] == 1
    assert set(info["denied"]) <= {"exe", "cwd", "open_files", "num_fds"}


def unused_pid() -> int:
    taken = set(psutil.pids())
    return next(pid for pid in range(PID_MAX, 0, -1) if pid not in taken)


async def test_process_info_of_a_missing_pid_is_refused_clearly() -> None:
    pid = unused_pid()
    error = await refusal("system.process.info", {"pid": pid})
    assert error.code == "refused"
    assert error.message == f"no process with PID {pid}"
