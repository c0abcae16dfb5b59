"""The pure parts of the system pack, on recorded real inputs and hand-made edge cases."""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path
from types import SimpleNamespace

import pytest

from sonde.packs.system.cpu import busy_percent, parse_pressure, time_shares
from sonde.packs.system.disk import Mount, read_only_by, real_filesystems
from sonde.packs.system.info import iso_utc, operating_system, parse_os_release
from sonde.packs.system.kernel import parse_dmesg_json
from sonde.packs.system.memory import oom_kills_in
from sonde.packs.system.process_info import DENIED, process_info_from
from sonde.packs.system.processes import join_cmdline, summarize
from sonde.packs.system.procnet import (
    ProcNetSocket,
    decode_address,
    decode_endpoint,
    is_listening,
    parse_proc_net,
)

RECORDED = Path(__file__).parent / "recorded"
DiskPartition = namedtuple("DiskPartition", "device mountpoint fstype opts")


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def proc_net(name: str, protocol: str) -> list[ProcNetSocket]:
    return list(parse_proc_net(recorded(name).splitlines(), protocol, byteorder="little"))  # type: ignore[arg-type]


def listening(rows: list[ProcNetSocket]) -> set[tuple[str, int]]:
    return {(row.local_address, row.local_port) for row in rows if is_listening(row)}


# os-release


def test_os_release_of_debian_12() -> None:
    fields = parse_os_release(recorded("os-release-debian12.txt"))
    assert fields["PRETTY_NAME"] == "Debian GNU/Linux 12 (bookworm)"
    assert fields["HOME_URL"] == "https://www.debian.org/"
    described = operating_system(fields, "/etc/os-release")
    assert (described.name, described.id, described.version_id) == ("Debian GNU/Linux", "debian", "12")
    assert described.pretty_name == "Debian GNU/Linux 12 (bookworm)"


def test_os_release_quoting_comments_and_junk() -> None:
    fields = parse_os_release(recorded("os-release-edge.txt"))
    assert fields == {
        "NAME": "Example Linux",
        "PRETTY_NAME": 'Example "Quoted" Linux $HOME 1.0',
        "ID": "example",
        "VERSION_ID": "1.0",
        "INDENTED": "kept",
        "BROKEN": "unbalanced",
        "EMPTY": "",
    }


def test_os_release_defaults_when_fields_are_missing() -> None:
    described = operating_system(parse_os_release("VERSION_ID=\n"), None)
    assert (described.name, described.pretty_name, described.id) == ("Linux", "Linux", "linux")
    assert described.version_id is None
    assert described.source is None


def test_os_release_pretty_name_falls_back_to_name_and_version() -> None:
    described = operating_system(parse_os_release('NAME="Alpine Linux"\nVERSION_ID=3.20.1\n'), None)
    assert described.pretty_name == "Alpine Linux 3.20.1"


def test_iso_utc() -> None:
    assert iso_utc(0) == "1970-01-01T00:00:00+00:00"
    assert iso_utc(1_700_000_000.75) == "2023-11-14T22:13:20+00:00"


@pytest.mark.parametrize("epoch_s", [300_000_000_000, -300_000_000_000, 1e300, float("nan"), float("inf")])
def test_iso_utc_of_a_time_no_date_can_say_is_none(epoch_s: float) -> None:
    """`touch -d @300000000000` sets a file's mtime in the year 11476: no exception, a None."""
    assert iso_utc(epoch_s) is None


# /proc/net


@pytest.mark.parametrize(
    ("hex_address", "byteorder", "text"),
    [
        ("0100007F", "little", "127.0.0.1"),
        ("00000000", "little", "0.0.0.0"),
        ("7F000001", "big", "127.0.0.1"),
        ("00000000000000000000000001000000", "little", "::1"),
        ("0000000000000000FFFF00000100007F", "little", "::ffff:127.0.0.1"),
        ("B80D0120000000000000000001000000", "little", "2001:db8::1"),
        ("20010DB8000000000000000000000001", "big", "2001:db8::1"),
    ],
)
def test_decode_address(hex_address: str, byteorder: str, text: str) -> None:
    assert decode_address(hex_address, byteorder) == text  # type: ignore[arg-type]


def test_decode_endpoint_reads_the_port_as_big_endian_hex() -> None:
    assert decode_endpoint("0100007F:0CEA", "little") == ("ipv4", "127.0.0.1", 3306)


@pytest.mark.parametrize("bad", ["", "7F0001", "0100007F00", "-100007F", "0100007G"])
def test_decode_address_refuses_what_is_not_hex(bad: str) -> None:
    with pytest.raises(ValueError, match="not a /proc/net address"):
        decode_address(bad, "little")


def test_proc_net_tcp_recorded() -> None:
    rows = proc_net("proc-net-tcp.txt", "tcp")
    assert len(rows) == 13
    first = rows[0]
    assert (first.family, first.local_address, first.local_port) == ("ipv4", "127.0.0.1", 3306)
    assert (first.state, first.uid, first.inode) == (0x0A, 107, 10139)
    assert {row.state for row in rows} == {0x0A, 0x01, 0x06}
    assert ("0.0.0.0", 2024) in listening(rows)
    assert len(listening(rows)) == 9


def test_proc_net_tcp_established_row_has_its_peer() -> None:
    established = [row for row in proc_net("proc-net-tcp.txt", "tcp") if row.state == 0x01]
    assert {(r.local_port, r.remote_address, r.remote_port) for r in established} == {
        (4369, "127.0.0.1", 49998),
        (49998, "127.0.0.1", 4369),
    }
    assert not any(is_listening(row) for row in established)


def test_proc_net_tcp6_recorded() -> None:
    rows = proc_net("proc-net-tcp6.txt", "tcp")
    assert {row.family for row in rows} == {"ipv6"}
    assert listening(rows) == {("::ffff:127.0.0.1", 51827), ("::", 44717), ("::1", 4369), ("::1", 6379)}


def test_proc_net_udp_keeps_bound_and_drops_connected_sockets() -> None:
    rows = proc_net("proc-net-udp.txt", "udp")
    assert len(rows) == 3
    assert listening(rows) == {("0.0.0.0", 38610), ("127.0.0.1", 41375)}


def test_proc_net_udp6_recorded() -> None:
    assert listening(proc_net("proc-net-udp6.txt", "udp")) == {("::1", 51210), ("::", 60931)}


def test_proc_net_skips_blank_and_malformed_rows() -> None:
    rows = proc_net("proc-net-tcp-edge.txt", "tcp")
    assert [(row.local_address, row.local_port, row.uid) for row in rows] == [
        ("0.0.0.0", 22, 0),
        ("10.0.0.10", 443, 1000),
        ("127.0.0.1", 8080, 33),
    ]
    assert rows[1].remote_address == "10.0.0.2"
    assert rows[1].remote_port == 54321


def test_proc_net_of_an_empty_table() -> None:
    assert list(parse_proc_net([], "udp")) == []
    assert list(parse_proc_net(["  sl  local_address rem_address"], "udp")) == []


# pseudo filesystems


def partitions(name: str) -> list[DiskPartition]:
    return [DiskPartition(**entry) for entry in json.loads(recorded(name))]


def test_real_filesystems_of_this_vm() -> None:
    assert real_filesystems(partitions("disk-partitions.json")) == [
        Mount("tmpfs", "/dev/shm", "tmpfs"),  # over-mounted: listed once
        Mount("/dev/vda", "/", "ext4"),
        Mount("model_tools_unavailable", "/mnt/sandboxing/model_tools_env/v1/python", "tmpfs"),
    ]  # not the tmpfs on /sys/fs/cgroup


def test_real_filesystems_keeps_overlay_bind_mounts_and_network_filesystems() -> None:
    kept = real_filesystems(partitions("disk-partitions-edge.json"))
    assert [(m.mountpoint, m.fstype) for m in kept] == [
        ("/", "overlay"),
        ("/run", "tmpfs"),
        ("/data", "xfs"),
        ("/srv/bind", "xfs"),
        ("/mnt/nas", "nfs4"),
        ("/mnt/ssh", "fuse.sshfs"),
        ("/boot/efi", "vfat"),
    ]


def test_real_filesystems_accepts_any_object_with_the_three_fields() -> None:
    row = SimpleNamespace(device="/dev/sdb", mountpoint="/x", fstype="ext4")
    assert real_filesystems([row, row]) == [Mount("/dev/sdb", "/x", "ext4")]


# CPU percent


def test_busy_percent_between_two_samples() -> None:
    before = {"user": 100.0, "system": 50.0, "idle": 800.0, "iowait": 50.0, "guest": 10.0}
    after = {"user": 160.0, "system": 70.0, "idle": 900.0, "iowait": 70.0, "guest": 40.0}
    assert busy_percent(before, after) == 40.0  # 80 busy of 200, guest not counted twice


def test_busy_percent_since_boot_and_without_elapsed_time() -> None:
    times = {"user": 30.0, "idle": 70.0}
    assert busy_percent(None, times) == 30.0
    assert busy_percent(times, times) == 0.0


def test_time_shares_name_iowait_and_steal_over_the_same_sample() -> None:
    before = {"user": 100.0, "nice": 0.0, "system": 50.0, "idle": 800.0, "iowait": 50.0, "irq": 0.0}
    after = {
        "user": 140.0,
        "nice": 10.0,
        "system": 60.0,
        "idle": 880.0,
        "iowait": 90.0,
        "irq": 10.0,
        "steal": 10.0,
        "guest": 5.0,
    }
    # 200 elapsed (guest is inside user): busy = user+nice 50, system+irq 20, steal 10 -> 80
    assert time_shares(before, after) == {
        "percent": 40.0,
        "user_percent": 25.0,
        "system_percent": 10.0,
        "iowait_percent": 20.0,
        "steal_percent": 5.0,
    }
    assert time_shares(after, after) == dict.fromkeys(time_shares(after, after), 0.0)


def test_pressure_some_line() -> None:
    text = "some avg10=18.04 avg60=36.82 avg300=43.46 total=763734825\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    assert parse_pressure(text) == {"some_avg10": 18.04, "some_avg60": 36.82}
    assert parse_pressure("") is None


# read-only mounts

MOUNTINFO = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
28 27 0:25 / /mnt/tools ro,nosuid - tmpfs tools ro,size=4k
50 27 7:0 / /mnt/with\\040space rw,relatime - ext4 /dev/loop0 ro
51 27 254:0 / /srv/config ro,relatime shared:1 master:2 - ext4 /dev/vda rw,discard
52 27 7:1 / /data rw - xfs /dev/loop1 rw
53 27 7:1 / /data ro - xfs /dev/loop1 ro
"""


def test_read_only_by_the_filesystem_or_the_mount_alone() -> None:
    assert read_only_by(MOUNTINFO) == {
        "/": None,
        "/mnt/tools": "filesystem",
        "/mnt/with space": "filesystem",  # remounted ro: the mount options still say rw
        "/srv/config": "mount",  # a read-only bind mount of a writable filesystem
        "/data": "filesystem",  # mounted over: the last one is what a path reaches
    }


# OOM kills in the kernel log

DMESG_WITH_OOM = json.dumps(
    {
        "dmesg": [
            {
                "pri": 4,
                "time": 100.5,
                "msg": "python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0",
            },
            {
                "pri": 3,
                "time": 3044.879266,
                "msg": "Memory cgroup out of memory: Killed process 6104 (python3) total-vm:323784kB, "
                "anon-rss:65024kB, file-rss:6592kB, shmem-rss:0kB, UID:0 pgtables:184kB oom_score_adj:0",
            },
            {"pri": 3, "time": 3050.0, "msg": "Out of memory: Killed process 77 (java de luxe) total-vm:1kB"},
            {
                "pri": 3,
                "time": 3060.0,
                "msg": "Out of memory: Kill process 78 (old) score 900 or sacrifice child",
            },
            {"pri": 3, "time": 3061.0, "msg": "I/O error, dev vda, sector 1 Killed process 9 (no)"},
        ]
    }
)


def test_oom_kills_in_the_kernel_log_newest_last_with_how_long_ago() -> None:
    messages = parse_dmesg_json(DMESG_WITH_OOM, boot_time=1_700_000_000.0)
    kills = oom_kills_in(messages, now_since_boot_s=3100.0)
    assert [(k.pid, k.process, k.memory_cgroup, k.seconds_ago) for k in kills] == [
        (6104, "python3", True, 55.1),
        (77, "java de luxe", False, 50.0),
        (78, "old", False, 40.0),
    ]
    assert kills[0].time == "2023-11-14T23:04:04+00:00"
    assert len(oom_kills_in(messages, now_since_boot_s=3100.0, limit=2)) == 2
    assert oom_kills_in(messages, now_since_boot_s=3100.0, limit=2)[-1].pid == 78


# process fields


def test_join_cmdline_cuts_long_lines() -> None:
    assert join_cmdline(["python", "-m", "x"]) == "python -m x"
    assert join_cmdline([]) == ""
    assert join_cmdline(None) is None
    cut = join_cmdline(["a" * 600])
    assert cut is not None
    assert len(cut) == 512
    assert cut.endswith("…")


def test_summary_of_a_process_hiding_everything() -> None:
    values = {attr: None for attr in ("name", "username", "memory_info", "status", "cmdline", "create_time")}
    summary = summarize(42, None, None, values)
    assert summary.pid == 42
    assert summary.rss_bytes is None
    assert summary.cmdline is None


def test_process_info_names_the_denied_fields() -> None:
    memory = SimpleNamespace(rss=1024, vms=4096)
    values = {
        "ppid": 1,
        "name": "sshd",
        "exe": DENIED,
        "cmdline": ["sshd", "-D", "x" * 600],
        "username": "root",
        "status": "sleeping",
        "create_time": 0.0,
        "cpu_percent": 1.26,
        "memory_info": memory,
        "num_threads": 1,
        "open_files": DENIED,
        "num_fds": DENIED,
        "cwd": DENIED,
    }
    info = process_info_from(7, values)
    assert info.denied == ["cwd", "exe", "num_fds", "open_files"]
    assert (info.exe, info.cwd, info.open_files_count, info.num_fds) == (None, None, None, None)
    assert (info.memory_rss_bytes, info.memory_vms_bytes, info.cpu_percent) == (1024, 4096, 1.3)
    assert info.cmdline is not None
    assert len(info.cmdline[2]) == 512
    assert info.cmdline[2].endswith("x…")  # cut, and saying so
    assert info.create_time == "1970-01-01T00:00:00+00:00"


def test_process_info_says_how_many_arguments_it_left_out() -> None:
    info = process_info_from(7, {"cmdline": ["prog", *(f"a{n}" for n in range(300))], "status": "sleeping"})
    assert info.cmdline is not None
    assert len(info.cmdline) == 257
    assert info.cmdline[-1] == "… 45 more arguments"


def test_a_zombies_missing_command_line_is_not_called_denied() -> None:
    values = {"cmdline": DENIED, "cwd": DENIED, "exe": DENIED, "num_fds": DENIED, "status": "zombie"}
    info = process_info_from(7, values)
    assert info.denied == ["num_fds"]
    assert (info.cmdline, info.cwd, info.exe) == (None, None, None)


def test_kills_counted_but_gone_from_the_kernel_log_are_said() -> None:
    from sonde.packs.system.memory import kills_gone_note

    note = kills_gone_note(1, [])
    assert note is not None
    assert note.startswith("1 OOM kill(s) counted since boot, but none is in the kernel log any more")
    assert kills_gone_note(0, []) is None
    assert kills_gone_note(None, []) is None
    assert kills_gone_note(2, None) is None  # unreadable: oom_kills_unreadable says why
