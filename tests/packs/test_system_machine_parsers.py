"""Parsers of lscpu, /proc/cpuinfo, lsblk, dmesg, ping and traceroute on recorded outputs.

Files in recorded/ were captured on a Debian 12 KVM guest; files in recorded/hand/
were written by hand in the exact formats the tools print (see recorded/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from sonde.packs.system.blockdev import flatten_lsblk, with_io
from sonde.packs.system.connections import TcpConnection, summarize
from sonde.packs.system.hardware import cpu_from_cpuinfo, cpu_from_lscpu, flatten_lscpu
from sonde.packs.system.kernel import parse_dmesg_json, parse_dmesg_text, select
from sonde.packs.system.reachability import parse_hop, parse_ping, parse_traceroute

RECORDED = Path(__file__).parent / "recorded"
BOOT = 1_700_000_000.0


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def test_lscpu_json_of_a_kvm_guest() -> None:
    cpu = cpu_from_lscpu(json.loads(recorded("lscpu-kvm.json")))
    assert cpu.model_name == "Intel(R) Xeon(R) Processor"
    assert (cpu.logical_cpus, cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core) == (2, 1, 2, 1)
    assert (cpu.hypervisor_vendor, cpu.virtualization_type) == ("KVM", "full")
    assert cpu.architecture == "x86_64"


def test_lscpu_nested_children_of_newer_util_linux() -> None:
    document = {
        "lscpu": [
            {"field": "Architecture:", "data": "aarch64"},
            {
                "field": "Vendor ID:",
                "data": "ARM",
                "children": [
                    {
                        "field": "Model name:",
                        "data": "Neoverse-N1",
                        "children": [{"field": "Socket(s):", "data": "-"}],
                    },
                ],
            },
        ]
    }
    assert flatten_lscpu(document["lscpu"])["Model name"] == "Neoverse-N1"
    cpu = cpu_from_lscpu(document)
    assert (cpu.model_name, cpu.sockets, cpu.hypervisor_vendor) == ("Neoverse-N1", None, None)


def test_proc_cpuinfo_fallback() -> None:
    cpu = cpu_from_cpuinfo(recorded("proc-cpuinfo-kvm.txt"), "x86_64")
    assert cpu.model_name == "Intel(R) Xeon(R) Processor"
    assert (cpu.logical_cpus, cpu.sockets, cpu.cores_per_socket, cpu.threads_per_core) == (2, 1, 2, 1)
    assert cpu.virtualization_type == "full"  # the 'hypervisor' flag
    assert cpu.source == "/proc/cpuinfo"


def test_lsblk_json_of_a_vm() -> None:
    rows = flatten_lsblk(json.loads(recorded("lsblk-vm.json"))["blockdevices"])
    assert [(r.name, r.type, r.size_bytes, r.mountpoint) for r in rows] == [
        ("zram0", "disk", 0, None),
        ("vda", "disk", 274877906944, "/"),
    ]
    assert rows[1].rotational is True
    assert rows[1].read_only is False


def test_lsblk_tree_and_old_string_values() -> None:
    document = {
        "blockdevices": [
            {
                "name": "sda",
                "path": "/dev/sda",
                "type": "disk",
                "size": "512110190592",
                "ro": "0",
                "rm": "0",
                "rota": "1",
                "model": "Samsung SSD 860 ",
                "children": [
                    {
                        "name": "sda1",
                        "path": "/dev/sda1",
                        "type": "part",
                        "size": "536870912",
                        "fstype": "vfat",
                        "mountpoint": "/boot/efi",
                    },
                    {
                        "name": "sda2",
                        "type": "part",
                        "size": "511571509248",
                        "fstype": "crypto_LUKS",
                        "children": [
                            {
                                "name": "root",
                                "type": "crypt",
                                "size": "511554732032",
                                "fstype": "ext4",
                                "mountpoint": "/",
                            }
                        ],
                    },
                ],
            }
        ]
    }
    rows = flatten_lsblk(document["blockdevices"])
    assert [(r.name, r.parent) for r in rows] == [
        ("sda", None),
        ("sda1", "sda"),
        ("sda2", "sda"),
        ("root", "sda2"),
    ]
    assert rows[0].size_bytes == 512110190592
    assert rows[0].rotational is True
    assert rows[0].model == "Samsung SSD 860"
    counters = {"sda": SimpleNamespace(read_bytes=1, write_bytes=2, read_count=3, write_count=4)}
    io = with_io(rows, counters)
    assert io[0].io is not None
    assert io[0].io.write_count == 4
    assert io[1].io is None


def test_dmesg_json() -> None:
    messages = parse_dmesg_json(recorded("dmesg-json.json"), BOOT)
    assert len(messages) == 37
    first = messages[0]
    assert (first.level, first.facility, first.seconds_since_boot) == ("notice", "kern", 0.0)
    assert first.message.startswith("Linux version")
    assert first.time == "2023-11-14T22:13:20+00:00"
    kept, counts = select(messages, "warn", 100)
    assert all(m.level in ("emerg", "alert", "crit", "err", "warn") for m in kept)
    assert sum(counts.values()) == 37


def test_dmesg_json_facility_of_userspace_messages() -> None:
    [message] = parse_dmesg_json('{"dmesg": [{"pri": 30, "time": 5.5, "msg": "systemd[1]: Started"}]}', BOOT)
    assert (message.facility, message.level) == ("daemon", "info")


def test_dmesg_json_x_names_every_facility_and_level() -> None:
    """util-linux 2.38's numeric ``pri`` held the facility or the level, not both: a daemon's
    warning read as the kernel's debug message, out of the default view."""
    messages = parse_dmesg_json(recorded("dmesg-json-x.json"), BOOT)
    by_text = {m.message: (m.facility, m.level) for m in messages}
    assert by_text["userspace daemon-info test"] == ("daemon", "info")
    assert by_text["userspace user-err test"] == ("user", "err")
    assert by_text["userspace pri=28"] == ("daemon", "warn")
    assert by_text["userspace pri=24"] == ("daemon", "emerg")
    assert by_text["userspace pri=86"] == ("authpriv", "info")
    assert by_text["userspace local0-err test"] == (None, None)  # dmesg says neither: not guessed
    assert messages[0].facility == "kern"
    kept, counts = select(messages, "warn", 100)
    assert "userspace pri=28" in [m.message for m in kept]
    assert all(m.level is not None for m in kept)
    assert counts["unknown"] == 3
    everything, _ = select(messages, "debug", 100)
    assert len(everything) == len(messages) == 39


def test_dmesg_numeric_facilities_past_ftp_are_named() -> None:
    entries = ",".join(
        f'{{"pri": {facility * 8 + 3}, "time": 1.0, "msg": "m{facility}"}}' for facility in (12, 15, 16, 23)
    )
    facilities = [m.facility for m in parse_dmesg_json(f'{{"dmesg": [{entries}]}}', BOOT)]
    assert facilities == ["ntp", "solaris-cron", "local0", "local7"]


def test_dmesg_text_fallback() -> None:
    messages = parse_dmesg_text(recorded("dmesg-x.txt") + "  continued detail\n", BOOT)
    assert len(messages) == 29
    assert messages[0].level == "notice"
    assert messages[0].message.startswith("Linux version")
    assert messages[-1].message.endswith("\n  continued detail")
    assert {m.level for m in messages} == {"notice", "info", "debug", "warn"}


def test_select_keeps_the_last_n() -> None:
    messages = parse_dmesg_text(recorded("dmesg-x.txt"), BOOT)
    kept, _ = select(messages, "debug", 3)
    assert kept == messages[-3:]


def test_ping_outputs() -> None:
    loopback = parse_ping("127.0.0.1", recorded("ping-iputils-loopback.txt"), "")
    assert (loopback.reachable, loopback.transmitted, loopback.received, loopback.loss_percent) == (
        True,
        3,
        3,
        0.0,
    )
    assert (loopback.rtt_min_ms, loopback.rtt_avg_ms, loopback.rtt_max_ms) == (0.018, 0.032, 0.041)
    lossy = parse_ping("10.0.0.9", recorded("hand/ping-iputils-loss.txt"), "")
    assert (lossy.received, lossy.loss_percent, lossy.rtt_max_ms) == (2, 50.0, 1.2)
    down = parse_ping("10.0.0.99", recorded("hand/ping-iputils-unreachable.txt"), "")
    assert (down.reachable, down.transmitted, down.loss_percent, down.rtt_avg_ms) == (False, 3, 100.0, None)
    busybox = parse_ping("10.0.0.9", recorded("hand/ping-busybox.txt"), "")
    assert (busybox.received, busybox.rtt_avg_ms) == (2, 0.561)
    unknown = parse_ping("x.invalid", "", "ping: x.invalid: Name or service not known\n")
    assert unknown.error == "ping: x.invalid: Name or service not known"


def test_traceroute_outputs() -> None:
    loopback = parse_traceroute("127.0.0.1", recorded("traceroute-loopback.txt"), "")
    assert (loopback.destination, loopback.reached, len(loopback.hops)) == ("127.0.0.1", True, 1)
    route = parse_traceroute("db.internal", recorded("hand/traceroute-multihop.txt"), "")
    assert route.destination == "10.20.0.5"
    assert route.reached is True
    assert [h.hop for h in route.hops] == [1, 2, 3, 4]
    assert route.hops[1].timeouts == 2
    assert route.hops[1].addresses == []
    assert route.hops[2].addresses == ["172.16.4.1", "172.16.4.9"]
    assert route.hops[3].notes == ["!H", "!H"]
    assert route.hops[3].rtt_ms == [3.003, 3.1]
    failed = parse_traceroute("x.invalid", "", 'x.invalid: Name or service not known\nCannot handle "host"\n')
    assert failed.error
    assert failed.hops == []
    assert parse_hop("not a hop") is None


def test_connection_summary_counts_everything_and_filters() -> None:
    rows = [
        TcpConnection("ipv4", "127.0.0.1", 5432, "127.0.0.1", 40000, "ESTABLISHED", 10),
        TcpConnection("ipv4", "127.0.0.1", 40000, "127.0.0.1", 5432, "ESTABLISHED", None),
        TcpConnection("ipv4", "0.0.0.0", 5432, "0.0.0.0", 0, "LISTEN", 10),
        TcpConnection("ipv6", "::1", 8080, "::1", 50000, "TIME_WAIT", None),
    ]
    counts, chosen = summarize(rows, "established")
    assert counts == {"ESTABLISHED": 2, "LISTEN": 1, "TIME_WAIT": 1}
    assert len(chosen) == 2
    assert len(summarize(rows, "all")[1]) == 4
    assert [c.state for c in summarize(rows, "all", 5432)[1]] == ["ESTABLISHED", "ESTABLISHED", "LISTEN"]
