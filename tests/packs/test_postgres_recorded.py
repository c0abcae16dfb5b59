"""The postgres runbook on readings recorded from real servers (PostgreSQL 15, Debian 12).

Each ``recorded/postgres-*.json`` is a probe's answer captured by
`tests/packs/test_postgres_own_servers.py` (``SONDE_RECORD_POSTGRES=1``) from a server
of its own: 17 ordinary clients on max_connections 20 with 3 reserved, a standby whose
primary was stopped, one whose replay was paused, a primary seen by a login without
pg_monitor, a transaction left idle and one failed, a lock held by a prepared
transaction, WAL archiving failing with a lost slot, and databases 1.65e9 transactions
old. Times are changed where a finding needs a longer wait than the recording had.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sonde.packs.postgres.runbook import RUNBOOK
from sonde.packs.runbook import Finding, human_bytes

RECORDED = Path(__file__).parent / "recorded"


def recorded(name: str) -> dict[str, Any]:
    reading: dict[str, Any] = json.loads((RECORDED / f"postgres-{name}.json").read_text())
    return reading


def evaluate(probe: str, reading: dict[str, Any]) -> list[Finding]:
    return RUNBOOK.evaluate({probe: reading})


def test_no_slot_left_for_ordinary_clients() -> None:
    # 17 on max_connections 20 with 3 reserved: the 18th non-superuser was refused; Sonde said 85 %
    reading = recorded("connections-refused")
    assert (reading["usage_percent"], reading["client_limit"], reading["clients_refused"]) == (
        100.0,
        17,
        True,
    )
    [finding] = evaluate("postgres.connections.usage", reading)
    assert (finding.severity, finding.title) == (
        "critical",
        "PostgreSQL refuses new connections: all 17 slots for ordinary clients are taken",
    )
    assert "(max_connections 20 less 3 superuser_reserved_connections)" in finding.detail
    # PostgreSQL 16's reserved_connections are taken off too, and named
    sixteen = {**reading, "reserved_connections": 2, "client_limit": 15, "usage_percent": 80.0}
    sixteen |= {"total": 12, "free_client_slots": 3, "clients_refused": False, "by_state": {"idle": 12}}
    [finding] = evaluate("postgres.connections.usage", sixteen)
    assert (finding.severity, finding.title) == (
        "warning",
        "PostgreSQL uses 80% of the connection slots for ordinary clients",
    )
    assert (
        "of the 15 (max_connections 20 less 3 superuser_reserved_connections and 2 reserved_connections"
        in (finding.detail)
    )
    assert "3 left before their logins are refused" in finding.detail


def test_a_standby_that_lost_its_primary() -> None:
    reading = recorded("standby-primary-lost")
    standby = reading["standby"]
    assert (standby["replay_delay_s"], standby["receiver_running"]) == (0.0, False)
    [finding] = evaluate("postgres.replication.status", reading)
    assert (finding.severity, finding.title) == ("critical", "This standby is not streaming from its primary")
    assert "replay delay reads 0" in finding.detail
    assert "restore_command is empty" in finding.detail
    archive = {**reading, "standby": {**standby, "restore_command_set": True}}
    [finding] = evaluate("postgres.replication.status", archive)
    assert finding.severity == "critical"
    assert "restore_command is set: it may be in archive recovery" in finding.detail
    # a login that may not read the settings: neither is claimed
    unknown = {**reading, "standby": {**standby, "restore_command_set": None, "primary_conninfo_set": None}}
    [finding] = evaluate("postgres.replication.status", unknown)
    assert "restore_command" not in finding.detail
    assert "primary_conninfo" not in finding.detail


def test_a_paused_standby_says_paused() -> None:
    # paused, Sonde warned "replays 42.96 s behind" and never said paused
    reading = recorded("standby-replay-paused")
    standby = reading["standby"]
    assert standby["replay_paused"] is True
    assert standby["receive_replay_gap_bytes"] > 0
    behind = {**reading, "standby": {**standby, "replay_delay_s": 42.96}}
    [finding] = evaluate("postgres.replication.status", behind)
    assert (finding.severity, finding.title) == (
        "warning",
        "WAL replay is paused on this standby, 42.96 s behind its primary",
    )
    assert (
        f"{human_bytes(standby['receive_replay_gap_bytes'])} received are not replayed yet" in finding.detail
    )
    far = {**reading, "standby": {**standby, "replay_delay_s": 400.0}}
    [finding] = evaluate("postgres.replication.status", far)
    assert (finding.severity, finding.title) == (
        "critical",
        "WAL replay is paused on this standby, 400 s behind its primary",
    )


def test_replicas_a_login_without_pg_monitor_cannot_judge() -> None:
    reading = recorded("primary-replica-hidden")
    [replica] = reading["replicas"]
    assert (replica["hidden"], replica["replay_lag_s"], replica["replay_lag_bytes"]) == (True, None, None)
    [finding] = evaluate("postgres.replication.status", reading)
    assert (finding.severity, finding.title) == ("info", "1 PostgreSQL replicas could not be checked for lag")
    assert finding.detail == reading["visibility"]
    assert "pg_monitor" in finding.detail


def test_transactions_left_idle() -> None:
    # BEGIN; SELECT 1; idle 64 s read "A PostgreSQL query has been running for 64.2 s"
    reading = recorded("idle-in-transaction")
    by_state = {q["state"]: q for q in reading["queries"]}
    left = {**by_state["idle in transaction"], "idle_s": 64.0, "transaction_s": 64.2, "duration_s": 64.1}
    [finding] = evaluate("postgres.queries.long_running", {**reading, "queries": [left]})
    assert (finding.severity, finding.title) == (
        "warning",
        "A PostgreSQL transaction has been left open and idle for 64 s (open 64 s)",
    )
    assert "holds every lock it took" in finding.detail
    assert f"pg_terminate_backend({left['pid']})" in finding.detail
    aborted = {**by_state["idle in transaction (aborted)"], "idle_s": 70.0, "duration_s": 70.0}
    [finding] = evaluate("postgres.queries.long_running", {**reading, "queries": [aborted]})
    assert finding.title == "A failed PostgreSQL transaction has been left open and idle for 70 s"
    assert "no locks" in finding.detail
    # a transaction busy with short statements, read between two, is open, not left idle
    busy = {**left, "idle_s": 0.01, "duration_s": 0.02}
    [finding] = evaluate("postgres.queries.long_running", {**reading, "queries": [busy]})
    assert finding.title == "A PostgreSQL transaction has been open for 64.2 s"


def test_idle_and_open_read_in_the_same_units() -> None:
    # "idle for 3.7 minutes (open 221.9 s)", and rounding made it "idle for 81 s (open 80.7 s)"
    reading = recorded("idle-in-transaction")
    left = next(q for q in reading["queries"] if q["state"] == "idle in transaction")
    minutes = {**left, "idle_s": 221.0, "transaction_s": 221.9, "duration_s": 221.0}
    [finding] = evaluate("postgres.queries.long_running", {**reading, "queries": [minutes]})
    assert finding.title == (
        "A PostgreSQL transaction has been left open and idle for 3.7 minutes (open 3.7 minutes)"
    )
    assert "its transaction has been open 3.7 minutes, and idle since its last" in finding.detail
    rounded = {**left, "idle_s": 80.8, "transaction_s": 80.7, "duration_s": 80.7}
    [finding] = evaluate("postgres.queries.long_running", {**reading, "queries": [rounded]})
    assert finding.title == "A PostgreSQL transaction has been left open and idle for 81 s (open 81 s)"


def test_every_long_session_is_told_not_only_the_longest() -> None:
    # one idle in transaction, one active in a transaction open 72 s, one failed and idle 84 s: only
    # the longest made a finding, and the other two were never said
    reading = recorded("idle-in-transaction")
    by_state = {q["state"]: q for q in reading["queries"]}
    idle = {**by_state["idle in transaction"], "pid": 101, "idle_s": 90.0, "transaction_s": 90.0}
    active = {**idle, "pid": 102, "state": "active", "idle_s": None, "transaction_s": 72.0, "duration_s": 2.0}
    aborted = {**by_state["idle in transaction (aborted)"], "pid": 103, "idle_s": 84.0, "duration_s": 84.0}
    aborted["transaction_s"] = 84.0
    found = evaluate("postgres.queries.long_running", {**reading, "queries": [idle, aborted, active]})
    assert [(f.severity, f.title) for f in found] == [
        ("warning", "A PostgreSQL transaction has been left open and idle for 90 s (open 90 s)"),
        ("warning", "A PostgreSQL transaction has been open for 72 s"),
        ("warning", "A failed PostgreSQL transaction has been left open and idle for 84 s"),
    ]
    assert all(f.detail.startswith(f"PID {pid} (") for f, pid in zip(found, (101, 102, 103), strict=True))
    assert "until it rolls back" in found[2].detail
    # many of one kind: one finding, counted, the oldest named and its severity, the others listed (bounded)
    many = [
        {**idle, "pid": 200 + n, "idle_s": 60.0 + n * 40, "transaction_s": 61.0 + n * 40} for n in range(9)
    ]
    [finding] = evaluate("postgres.queries.long_running", {**reading, "queries": many})
    assert (finding.severity, finding.title) == (
        "critical",
        "9 PostgreSQL transactions have been left open and idle, the oldest open 6.3 minutes",
    )
    assert finding.detail.startswith("The oldest: PID 208 (user ")
    assert "Also: PID 207 (idle in transaction, 5.7 minutes), PID 206 " in finding.detail
    assert finding.detail.endswith(", PID 203 (idle in transaction, 3.0 minutes) and 3 more.")
    truncated = {**reading, "queries": many[:2], "truncated": True}
    [finding] = evaluate("postgres.queries.long_running", truncated)
    assert finding.title.startswith("2 PostgreSQL transactions have been left open and idle")
    assert finding.detail.endswith("The probe listed only the oldest sessions: more are past the threshold.")
    # a session under the threshold (a reading taken with a lower min_duration_s) is no finding
    short = {**active, "transaction_s": 10.0, "duration_s": 10.0}
    assert evaluate("postgres.queries.long_running", {**reading, "queries": [short]}) == []


def test_a_lock_held_by_a_prepared_transaction() -> None:
    reading = recorded("blocked-by-prepared")
    [finding] = evaluate("postgres.locks.blocked", reading)
    assert "wait on prepared transaction 'sonde-gid-1' (owner postgres, database postgres" in finding.detail
    assert "PID 0" not in finding.detail
    # the prepared transactions not read (an older agent): still not "PID 0"
    [finding] = evaluate("postgres.locks.blocked", {**reading, "prepared_transactions": []})
    assert "a prepared transaction (PID 0: no session holds it; see pg_prepared_xacts)" in finding.detail


def test_a_session_blocked_for_over_a_minute_is_critical() -> None:
    # one blocked session read a warning however long it had waited (MySQL's lock wait: critical at 60 s)
    reading = recorded("blocked-by-prepared")
    [row] = reading["blocked"]
    waited = {**reading, "blocked": [{**row, "waiting_s": 75.0}]}
    [finding] = evaluate("postgres.locks.blocked", waited)
    assert (finding.severity, finding.title) == (
        "critical",
        "1 PostgreSQL session is blocked by a lock for 75 s",
    )
    brief = {**reading, "blocked": [{**row, "waiting_s": 12.0}]}
    [finding] = evaluate("postgres.locks.blocked", brief)
    assert (finding.severity, finding.title) == (
        "warning",
        "1 PostgreSQL session is blocked by a lock for 12 s",
    )
    two = {
        **reading,
        "blocked": [{**row, "waiting_s": 12.0}, {**row, "pid": row["pid"] + 1, "waiting_s": 61.0}],
    }
    [finding] = evaluate("postgres.locks.blocked", two)
    assert (finding.severity, finding.title) == (
        "critical",
        "2 PostgreSQL sessions are blocked by locks, the longest for 61 s",
    )
    # a wait this login may not see (or an older agent's reading): judged by the count alone
    [finding] = evaluate("postgres.locks.blocked", {**reading, "blocked": [{**row, "waiting_s": None}]})
    assert (finding.severity, finding.title) == ("warning", "1 PostgreSQL session is blocked by a lock")


def test_archiving_failures_and_a_lost_slot() -> None:
    reading = recorded("archiving-failing-slot-lost")
    titles = {(f.severity, f.title) for f in evaluate("postgres.replication.status", reading)}
    assert titles == {
        ("critical", "Replication slot gone has lost WAL its consumer needs"),
        ("critical", "PostgreSQL's WAL archiving is failing"),
    }
    # a failure a minute after a success: the archiver may get past it, a warning
    archiver = {
        **reading["archiver"],
        "last_archived_s": 60.0,
        "last_archived_wal": "000000010000000000000002",
    }
    [finding] = evaluate("postgres.replication.status", {**reading, "slots": [], "archiver": archiver})
    assert (finding.severity, finding.title) == ("warning", "PostgreSQL's WAL archiving is failing")
    assert "the last success was 000000010000000000000002" in finding.detail
    healthy = {**archiver, "failing": False}
    assert evaluate("postgres.replication.status", {**reading, "slots": [], "archiver": healthy}) == []


def wraparound_only(reading: dict[str, Any]) -> list[Finding]:
    """The findings of the IDs' age, without the one of autovacuum off (the recording's server had it off)."""
    return [f for f in evaluate("postgres.vacuum.wraparound", reading) if "wraparound" in f.title]


def test_wraparound_thresholds() -> None:
    reading = recorded("wraparound")
    [finding] = wraparound_only(reading)
    assert finding.severity == "critical"  # 1.65e9 is past 1.6e9
    assert "transaction ID wraparound" in finding.title

    def aged(age: int) -> dict[str, Any]:
        databases = [
            {**db, "xid_age": age, "wraparound_percent": round(age * 100 / 2**31, 1)}
            for db in reading["databases"]
        ]
        return {**reading, "databases": databases, "oldest": databases[0]}

    [finding] = wraparound_only(aged(1_300_000_000))
    assert (finding.severity, finding.title) == (
        "warning",
        f"PostgreSQL database {reading['oldest']['name']} is 60.5% of the way to transaction ID wraparound",
    )
    assert wraparound_only(aged(250_000_000)) == []


def test_autovacuum_off_is_a_warning_at_any_age() -> None:
    # SHOW autovacuum = off (the reading's "autovacuum": false) said nothing below 1.2e9 transactions
    reading = recorded("wraparound")
    young = [
        {**db, "xid_age": 1000, "multixact_age": 1, "wraparound_percent": 0.0} for db in reading["databases"]
    ]
    off = {**reading, "databases": young, "oldest": young[0], "autovacuum": False}
    [finding] = evaluate("postgres.vacuum.wraparound", off)
    assert (finding.severity, finding.title) == ("warning", "PostgreSQL's autovacuum is off")
    assert "no table is vacuumed or analyzed" in finding.detail
    assert "ALTER SYSTEM SET autovacuum = on" in finding.detail
    assert evaluate("postgres.vacuum.wraparound", {**off, "autovacuum": True}) == []
    # near wraparound too: both said
    titles = {f.title for f in evaluate("postgres.vacuum.wraparound", reading)}
    assert "PostgreSQL's autovacuum is off" in titles
    assert len(titles) == 2
