"""The systemd pack. systemd is not PID 1 here: parsers run on hand-recorded outputs
(recorded/hand/, in the exact formats of systemd 252) and the probes must answer
"not available on this machine" cleanly. `systemd.journal.query` also runs for real
against a stand-in ``journalctl`` executable first on PATH, with the booted marker
pointed at a real directory."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import sonde.packs.systemd as systemd_pack
from sonde.packs.context import ProbeContext
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.runbook import Threshold
from sonde.packs.systemd import PACK, detect_systemd
from sonde.packs.systemd.journal import JournalParams, journal_argv, parse_journal
from sonde.packs.systemd.runbook import RUNBOOK, THRESHOLDS, build_runbook
from sonde.packs.systemd.units import _units, parse_show, parse_unit_list, unit_status

HAND = Path(__file__).parent / "recorded" / "hand"
REGISTRY = PackRegistry.of([PACK])
BOOT = 1_714_990_000.0
SYSTEMD_RUNS_HERE = Path("/run/systemd/system").is_dir()


def hand(name: str) -> str:
    return (HAND / name).read_text()


def test_units_from_json() -> None:
    units = parse_unit_list(hand("systemctl-list-units.json"))
    assert len(units) == 9
    nginx = next(u for u in units if u.unit == "nginx.service")
    assert (nginx.load, nginx.active, nginx.sub) == ("loaded", "failed", "failed")
    summary = _units(units, 3)
    assert summary.counts_by_active == {"active": 6, "failed": 1, "inactive": 2}
    assert (summary.total, len(summary.units), summary.truncated) == (9, 3, True)


def test_units_from_the_plain_table_of_older_systemctl() -> None:
    units = parse_unit_list(hand("systemctl-list-units-plain.txt"))
    assert [u.unit for u in units] == [
        "cron.service",
        "dbus.service",
        "nginx.service",
        "ssh.service",
        "systemd-tmpfiles-clean.service",
    ]
    assert units[2].active == "failed"
    assert units[3].description == "OpenBSD Secure Shell server"


def test_units_plain_table_with_the_failed_marker() -> None:
    [unit] = parse_unit_list("● nginx.service loaded failed failed A high performance web server\n")
    assert (unit.unit, unit.active) == ("nginx.service", "failed")


def test_unit_status_of_a_running_service() -> None:
    status = unit_status(parse_show(hand("systemctl-show-nginx.txt")), BOOT)
    assert (status.load_state, status.active_state, status.sub_state) == ("loaded", "active", "running")
    assert (status.main_pid, status.restarts, status.restart_policy) == (812, 2, "on-failure")
    assert (status.memory_bytes, status.tasks, status.cpu_seconds) == (6914048, 3, 0.118)
    assert status.active_since == "2024-05-06T10:06:45+00:00"  # boot + 5.123456 s
    assert status.inactive_since is None
    assert status.unit_file_state == "enabled"


def test_unit_status_of_a_missing_unit_has_nulls_not_sentinels() -> None:
    status = unit_status(parse_show(hand("systemctl-show-missing.txt")), BOOT)
    assert status.load_state == "not-found"
    assert (status.main_pid, status.memory_bytes, status.tasks, status.cpu_seconds) == (
        None,
        None,
        None,
        None,
    )
    assert status.unit_file_state is None
    assert status.fragment_path is None


def test_journal_json_entries() -> None:
    entries, more = parse_journal(hand("journalctl-json.txt"), 10, "last")
    assert len(entries) == 5  # the cut last line is dropped
    assert more is False
    start, emerg, audit, binary, kernel = entries
    assert start.time == "2024-05-06T10:11:12+00:00"
    assert (start.priority, start.unit, start.identifier, start.pid) == (
        "info",
        "nginx.service",
        "systemd",
        1,
    )
    assert emerg.priority == "err"
    assert "Address already in use" in emerg.message
    assert (audit.transport, audit.audit_type, audit.identifier) == ("audit", "USER_LOGIN", "sshd")
    assert binary.message == "bad \ufffdbyte"  # MESSAGE as a list of bytes, invalid UTF-8
    assert (kernel.priority, kernel.transport, kernel.unit) == ("crit", "kernel", None)


def test_an_entry_stamped_past_the_year_9999_keeps_the_rest() -> None:
    """journal-remote keeps the sender's clock: one far-off (or garbled) stamp is a null time."""
    lines = [
        json.dumps({"__REALTIME_TIMESTAMP": str(300_000_000_000 * 10**6), "MESSAGE": "far"}),
        json.dumps({"__REALTIME_TIMESTAMP": "12x", "MESSAGE": "garbled"}),
        json.dumps({"__REALTIME_TIMESTAMP": "9" * 5000, "MESSAGE": "endless"}),
        json.dumps({"__REALTIME_TIMESTAMP": "1715000000000000", "MESSAGE": "near"}),
    ]
    entries, _ = parse_journal("\n".join(lines) + "\n", 10, "first")
    assert [(e.message, e.time) for e in entries] == [
        ("far", None),
        ("garbled", None),
        ("endless", None),
        ("near", "2024-05-06T12:53:20+00:00"),
    ]


def test_journal_first_and_last_n() -> None:
    first, more = parse_journal(hand("journalctl-json.txt"), 2, "first")
    assert [e.pid for e in first] == [1, 812]
    assert more is True
    last, _ = parse_journal(hand("journalctl-json.txt"), 2, "last")
    assert [e.transport for e in last] == ["stdout", "kernel"]


def test_journal_argv_keeps_every_value_in_one_argument() -> None:
    params = JournalParams(
        unit="nginx.service",
        priority="err",
        since="-1h",
        until="now",
        grep="bind\\(\\) failed",
        transport="audit",
        lines=50,
    )
    argv = journal_argv(params)
    assert argv[:3] == ["journalctl", "--no-pager", "--output=json"]
    assert "--lines=50" in argv
    assert {
        "--unit=nginx.service",
        "--priority=err",
        "--since=-1h",
        "--until=now",
        "--grep=bind\\(\\) failed",
    } <= set(argv)
    assert argv[-2:] == ["--", "_TRANSPORT=audit"]
    assert "--reverse" in argv  # the last N newest first, so a cut drops the oldest
    first = journal_argv(JournalParams(direction="first", lines=5))
    assert not any(arg.startswith("--lines") or arg == "--reverse" for arg in first)


ACCEPTED_TIMES = [
    "2024-05-06",
    "2024-05-06 10:00",
    "2024-05-06 10:00:05 UTC",
    "2024-05-06 UTC",
    "2024-02-31",  # strptime's day range, then rolled over: journalctl takes it
    "1970-01-01 00:00 UTC",
    "9999-12-30 23:59:59 UTC",
    "today",
    "yesterday",
    "now",
    "-1h",
    "-5min",
    "-5 min",
    "-5 seconds",
    "5min ago",
    "2 days ago",
    "1 weeks ago",
    "-20000d",
]
REFUSED_TIMES = [
    "5min",  # neither '-' nor 'ago'
    "5 min",
    "5 seconds",
    "30min",
    "-5min ago",  # both
    "2026-13-45",
    "2026-11-25 25:00",
    "2024-05-06 10:60",
    "2024-00-10",
    "-21000d",  # before 1970
    "-99999d",
    "1969-12-31 23:59:59 UTC",
    "9999-12-31 UTC",  # after journalctl's last time
    "-1H",
]


@pytest.mark.parametrize("since", ACCEPTED_TIMES)
def test_journal_time_specs_accepted(since: str) -> None:
    assert JournalParams(since=since).since == since


@pytest.mark.parametrize("until", REFUSED_TIMES)
def test_journal_time_specs_journalctl_refuses_are_refused_naming_the_param(until: str) -> None:
    with pytest.raises(ValidationError) as caught:
        JournalParams(until=until)
    [error] = caught.value.errors()
    assert error["loc"] == ("until",)
    assert "journalctl" in error["msg"]


def test_a_refused_time_lists_the_forms() -> None:
    with pytest.raises(ValidationError, match=r"'5min' is not a time journalctl takes: use 'YYYY-MM-DD"):
        JournalParams(since="5min")


@pytest.mark.skipif(shutil.which("journalctl") is None, reason="no journalctl here")
@pytest.mark.parametrize("spec", ACCEPTED_TIMES + REFUSED_TIMES)
def test_journal_times_are_taken_exactly_when_journalctl_takes_them(spec: str) -> None:
    """The checks against journalctl itself (written for systemd 252); an empty journal will do."""
    done = subprocess.run(
        ["journalctl", "--no-pager", "-n0", f"--since={spec}"], capture_output=True, text=True, check=False
    )
    takes = "Failed to parse timestamp" not in done.stderr
    try:
        JournalParams(since=spec)
    except ValidationError:
        assert not takes, f"journalctl takes {spec!r}"
    else:
        assert takes, f"journalctl refuses {spec!r}: {done.stderr.strip()}"


def test_detection_and_probes_say_not_available() -> None:
    detection = PACK.detection()
    assert detection.detected == SYSTEMD_RUNS_HERE
    if not SYSTEMD_RUNS_HERE:
        assert "not the init system" in detection.reason
        assert detect_systemd().reason == detection.reason


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("systemd.units.list", {}),
        ("systemd.units.failed", {}),
        ("systemd.unit.status", {"unit": "ssh.service"}),
        ("systemd.journal.query", {"transport": "audit"}),
    ],
)
async def test_probe_is_unavailable_without_systemd(name: str, params: dict[str, Any]) -> None:
    if SYSTEMD_RUNS_HERE:
        pytest.skip("systemd runs here; the parsers above cover the formats")
    with pytest.raises(ProbeExecutionError) as caught:
        await execute_probe(REGISTRY, name, params, ProbeContext())
    assert caught.value.code == "unavailable"
    assert "systemd is not available on this machine" in caught.value.message


def test_runbook_flags_each_failed_unit() -> None:
    failed = _units(parse_unit_list(hand("systemctl-list-units-failed.json")), 100).model_dump()
    findings = RUNBOOK.evaluate({"systemd.units.failed": failed})
    assert [(f.severity, f.title) for f in findings] == [
        ("warning", "Unit logrotate.service has failed"),
        ("warning", "Unit nginx.service has failed"),
    ]
    assert "systemd.journal.query with unit=nginx.service" in findings[1].detail
    strict = build_runbook({**THRESHOLDS, "failed_units": Threshold(warning=1, critical=2)})
    assert {f.severity for f in strict.evaluate({"systemd.units.failed": failed})} == {"critical"}
    assert RUNBOOK.evaluate({"systemd.units.failed": _units([], 100).model_dump()}) == []


def test_runbook_flags_a_burst_of_journal_errors() -> None:
    entries, _ = parse_journal(hand("journalctl-json.txt"), 10, "last")
    reading = {"entries": [e.model_dump() for e in entries] * 5, "truncated": False, "note": None}
    [finding] = RUNBOOK.evaluate({"systemd.journal.query": reading})
    assert finding.severity == "warning"
    assert finding.title == "25 error entries in the journal in the last hour"
    assert "nginx.service" in finding.detail
    one = build_runbook({**THRESHOLDS, "journal_errors_last_hour": Threshold(warning=1, critical=100)})
    [finding] = one.evaluate({"systemd.journal.query": {**reading, "entries": reading["entries"][:1]}})
    assert finding.title == "1 error entry in the journal in the last hour"  # not "1 ... entries"


# systemd.journal.query against a stand-in journalctl


def install_journalctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """Put ``script`` first on PATH as ``journalctl`` and make this machine look systemd-booted."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    journalctl = bin_dir / "journalctl"
    journalctl.write_text(script)
    journalctl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    booted = tmp_path / "run-systemd-system"
    booted.mkdir()
    monkeypatch.setattr(systemd_pack, "BOOTED_MARKER", booted)


async def query(**params: Any) -> dict[str, Any]:
    return (await execute_probe(REGISTRY, "systemd.journal.query", params, ProbeContext())).result


@pytest.mark.parametrize("said", ["", "-- No entries --"])
async def test_a_grep_that_matches_nothing_is_an_empty_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: str
) -> None:
    """journalctl 243+ exits 1 when --grep matches nothing (systemd PR #12581)."""
    install_journalctl(tmp_path, monkeypatch, f"#!/bin/sh\nprintf '%s' '{said}' >&2\nexit 1\n")
    assert await query(grep="no such text") == {"entries": [], "truncated": False, "note": None}


async def test_a_silent_journalctl_failure_names_its_exit_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_journalctl(tmp_path, monkeypatch, "#!/bin/sh\nexit 1\n")
    with pytest.raises(ProbeExecutionError) as caught:
        await query(unit="nginx.service")  # no grep: status 1 is a failure
    assert caught.value.code == "unavailable"
    assert caught.value.message == "journalctl failed (exit status 1), with nothing on stderr"


# The last --lines=N entries, each ~20 KiB of JSON: more than BYTES_PER_ENTRY, so the output is cut.
BIG_ENTRIES = f"""#!{sys.executable}
import json, sys
count = next(int(arg.split("=")[1]) for arg in sys.argv if arg.startswith("--lines="))
order = range(count)
for index in reversed(order) if "--reverse" in sys.argv else order:
    stamp = str(1_700_000_000_000_000 + index * 1_000_000)
    print(json.dumps({{"__REALTIME_TIMESTAMP": stamp, "MESSAGE": f"entry {{index}} " + "x" * 20_000}}))
"""


async def test_the_last_entries_keep_the_newest_when_the_output_is_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install_journalctl(tmp_path, monkeypatch, BIG_ENTRIES)
    found = await query(lines=4)  # a 64 KiB cap: three whole entries fit
    assert [entry["message"].split()[1] for entry in found["entries"]] == ["1", "2", "3"]
    assert found["entries"][-1]["time"] == "2023-11-14T22:13:23+00:00"
    assert found["truncated"] is True
