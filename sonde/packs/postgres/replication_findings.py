"""The postgres runbook's findings of replication, WAL archiving and transaction ID wraparound.

A standby without a WAL receiver, its replay paused or behind, replicas lagging, slots holding
WAL or lost, archiving failing, autovacuum off, and databases' IDs nearing wraparound: each judged against the
runbook's `THRESHOLDS` (sonde.packs.postgres.runbook), which it is handed.
"""

from __future__ import annotations

from collections.abc import Mapping

from sonde.packs.runbook import Finding, Reading, Threshold, check, human_bytes, human_seconds


def not_streaming_finding(standby: Reading, probe: str) -> Finding:
    """A standby with no WAL receiver: nothing comes from its primary, though its replay delay reads 0."""
    last = standby.get("last_replayed_xact_s")
    detail = (
        "No WAL receiver runs (pg_stat_wal_receiver is empty): its primary is down or unreachable, refuses "
        "the standby's connection, or no longer has the WAL the standby needs; this standby's log says "
        "which. Its replay delay reads 0 once all it received is replayed, so it says nothing while no "
        "WAL comes in"
        + (
            f"; the last transaction it replayed committed {human_seconds(last)} ago."
            if last is not None
            else "."
        )
    )
    if standby.get("primary_conninfo_set") is False:
        detail += " primary_conninfo is empty: this standby is not set up to stream at all."
    if standby.get("restore_command_set"):
        detail += (
            " restore_command is set: it may be in archive recovery, replaying WAL from the archive "
            "instead, which keeps it only as current as the last archived segment; check that WAL "
            "still reaches the archive and why it does not stream."
        )
    elif standby.get("restore_command_set") is False:
        detail += " restore_command is empty: it has no WAL archive to fall back on either."
    return Finding("critical", "This standby is not streaming from its primary", detail, probe)


def archive_only_finding(standby: Reading, probe: str) -> Finding:
    """A standby set up to replay from the WAL archive alone (log shipping): no receiver is expected."""
    last = standby.get("last_replayed_xact_s")
    replayed = (
        f"The last transaction it replayed committed {human_seconds(last)} ago"
        if last is not None
        else "It has replayed no transaction since it started"
    )
    return Finding(
        "info",
        "This standby replays WAL from the archive only, not streaming",
        "primary_conninfo is empty and restore_command is set: it is set up for log shipping, and is "
        "as current as the last WAL segment its primary archived (how often that happens is the "
        f"primary's archive_timeout). {replayed}; on a busy primary that is how far behind it is, on an "
        "idle one it says nothing, so its lag is not judged here: check the primary's archiving "
        "(postgres.replication.status there).",
        probe,
    )


def standby_findings(thresholds: Mapping[str, Threshold], standby: Reading, probe: str) -> list[Finding]:
    found: list[Finding] = []
    archive_only = (
        standby.get("receiver_running") is False
        and standby.get("primary_conninfo_set") is False
        and standby.get("restore_command_set") is True
    )
    if archive_only:
        found.append(archive_only_finding(standby, probe))
    elif standby.get("receiver_running") is False:
        found.append(not_streaming_finding(standby, probe))
    elif standby.get("receiver_status") not in (None, "streaming"):
        found.append(
            Finding(
                "warning",
                f"This standby's WAL receiver is {standby['receiver_status']}, not streaming",
                f"Its primary: {standby.get('primary_address')}; this standby's log says why.",
                probe,
            )
        )
    gap = standby.get("receive_replay_gap_bytes")
    gap_text = (
        f"{human_bytes(gap)} received are not replayed yet"
        if gap is not None
        else "no WAL was streamed since it started"
    )
    delay = standby.get("replay_delay_s")
    if standby.get("replay_paused"):
        severity = thresholds["replication_lag_s"].severity(delay) or "warning"
        behind = f", {delay:g} s behind its primary" if delay else ""
        found.append(
            Finding(
                severity,
                f"WAL replay is paused on this standby{behind}",
                f"Replay is paused: WAL still arrives but is not applied ({gap_text}), and queries here "
                "see the data as of the pause. Someone ran pg_wal_replay_pause(), or the server paused "
                "itself (a recovery target reached, or a setting below the primary's: its log says). "
                "SELECT pg_wal_replay_resume() resumes it, unless it was paused on purpose.",
                probe,
            )
        )
    elif not archive_only:
        found += check(
            thresholds["replication_lag_s"],
            delay,
            probe,
            "This standby replays {value} behind its primary",
            f"WAL receiver: {standby.get('receiver_status')}; {gap_text}.",
        )
    return found


def slot_findings(thresholds: Mapping[str, Threshold], slot: Reading, probe: str) -> list[Finding]:
    name = slot["name"]
    if slot.get("wal_status") == "lost":
        return [
            Finding(
                "critical",
                f"Replication slot {name} has lost WAL its consumer needs",
                "wal_status 'lost': WAL past the slot's restart point was removed (max_slot_wal_keep_size), "
                "so its replica or subscriber can never catch up from it. Rebuild that replica (or "
                "re-create the subscription) and drop the slot.",
                probe,
            )
        ]
    found = []
    if slot.get("wal_status") == "unreserved":
        found.append(
            Finding(
                "warning",
                f"Replication slot {name} is about to lose WAL its consumer needs",
                f"wal_status 'unreserved': it holds more WAL than max_slot_wal_keep_size; the next "
                f"checkpoint may remove WAL its consumer has not received ({human_bytes(slot.get('safe_wal_bytes'))} "
                "of margin). Its consumer must catch up now.",
                probe,
            )
        )
    if not slot.get("active"):
        found += check(
            thresholds["replication_lag_bytes"],
            slot.get("retained_wal_bytes"),
            probe,
            f"Inactive replication slot {name} retains {{value}} of WAL",
            "An unused slot keeps WAL until the disk fills; drop it if its consumer is gone.",
        )
    return found


def archiver_findings(thresholds: Mapping[str, Threshold], archiver: Reading, probe: str) -> list[Finding]:
    if not archiver.get("failing"):
        return []
    since = archiver.get("last_archived_s")
    severity = thresholds["archive_failing_s"].severity(since) if since is not None else "critical"
    last_ok = (
        f"the last success was {archiver.get('last_archived_wal')} at {archiver.get('last_archived_at')}, "
        f"{human_seconds(since)} ago"
        if since is not None
        else "none succeeded since the statistics were reset"
    )
    return [
        Finding(
            severity or "warning",
            "PostgreSQL's WAL archiving is failing",
            f"archive_command failed on {archiver.get('last_failed_wal')} at {archiver.get('last_failed_at')} "
            f"({archiver.get('failed_count')} failures since the statistics were reset); {last_ok}. The "
            "archiver retries that segment and keeps it and every later one in pg_wal until it goes: "
            "pg_wal grows until the disk fills, and backups lack the WAL to restore past it. The "
            "server log shows archive_command's error.",
            probe,
        )
    ]


def replication_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    probe = "postgres.replication.status"
    found: list[Finding] = []
    standby = reading.get("standby")
    if standby is not None:
        found += standby_findings(thresholds, standby, probe)
    for replica in reading.get("replicas", []):
        name = replica.get("application_name") or replica.get("client")
        found += check(
            thresholds["replication_lag_s"],
            replica.get("replay_lag_s"),
            probe,
            f"Replica {name} lags {{value}} behind",
            f"state {replica.get('state')}, {replica.get('sync_state')}.",
        )
        found += check(
            thresholds["replication_lag_bytes"],
            replica.get("replay_lag_bytes"),
            probe,
            f"Replica {name} lags {{value}} of WAL behind",
            f"state {replica.get('state')}.",
        )
    for slot in reading.get("slots", []):
        found += slot_findings(thresholds, slot, probe)
    if reading.get("archiver"):
        found += archiver_findings(thresholds, reading["archiver"], probe)
    return found + replication_visibility_findings(reading, probe)


def replication_visibility_findings(reading: Reading, probe: str) -> list[Finding]:
    """An info finding when the login could not see the replicas' lag or the WAL receiver's status."""
    hidden = reading.get("hidden_replicas") or 0
    standby = reading.get("standby") or {}
    note = (
        reading.get("visibility") or "The agent's login cannot see replication details: grant it pg_monitor."
    )
    if hidden:
        return [Finding("info", f"{hidden} PostgreSQL replicas could not be checked for lag", note, probe)]
    if standby.get("receiver_running") and standby.get("receiver_status") is None:
        return [Finding("info", "This standby's WAL receiver status could not be read", note, probe)]
    return []


def autovacuum_off_findings(reading: Reading) -> list[Finding]:
    """A warning when autovacuum is off server-wide: whatever the IDs' age, nothing cleans up after writes."""
    if reading.get("autovacuum") is not False:
        return []
    return [
        Finding(
            "warning",
            "PostgreSQL's autovacuum is off",
            "autovacuum is off: no table is vacuumed or analyzed unless someone runs VACUUM and ANALYZE "
            "(by hand or on a schedule). Dead rows pile up and tables and indexes bloat, the planner's "
            "statistics go stale, and transaction IDs age toward wraparound; the server still starts a "
            "vacuum past autovacuum_freeze_max_age to prevent wraparound, and that one alone. Unless "
            "scheduled VACUUMs take its place, turn it on: ALTER SYSTEM SET autovacuum = on; then SELECT "
            "pg_reload_conf().",
            "postgres.vacuum.wraparound",
        )
    ]


def wraparound_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    """Autovacuum off (`autovacuum_off_findings`), and the database nearest wraparound."""
    return autovacuum_off_findings(reading) + oldest_database_findings(thresholds, reading)


def oldest_database_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    """One finding for the database nearest wraparound, naming how many others are past the warning."""
    threshold = thresholds["xid_age"]
    databases = reading.get("databases") or []
    oldest = reading.get("oldest")
    if oldest is None:
        return []
    age = max(oldest["xid_age"], oldest["multixact_age"])
    severity = threshold.severity(age)
    if severity is None:
        return []
    kind, setting = (
        ("transaction ID", "autovacuum_freeze_max_age")
        if oldest["xid_age"] >= oldest["multixact_age"]
        else ("multixact ID", "autovacuum_multixact_freeze_max_age")
    )
    others = sum(
        1
        for db in databases
        if db["name"] != oldest["name"] and threshold.severity(max(db["xid_age"], db["multixact_age"]))
    )
    freeze_max = reading.get(setting)
    detail = (
        f"Its oldest unfrozen {kind} is {age:,} old (transaction IDs {oldest['xid_age']:,}, multixact IDs "
        f"{oldest['multixact_age']:,}), of the 2,147,483,648 at which they wrap around: about 3 million "
        "short of that (1 million before PostgreSQL 14) the server refuses every write until the database "
        "is vacuumed. "
    )
    if freeze_max is not None and age > freeze_max:
        detail += f"Autovacuum should have frozen it at {freeze_max:,} ({setting}): its vacuums fail or are held back. "
    elif freeze_max is not None:
        detail += (
            f"{setting} is {freeze_max:,}: autovacuum forces no freezing vacuum before that age, too near "
            "wraparound; lower it. "
        )
    if reading.get("autovacuum") is False:
        detail += "autovacuum is off. "
    detail += (
        "Look for what holds the oldest ID: a long or prepared transaction (postgres.queries.long_running, "
        "postgres.locks.blocked), a replication slot or standby with an old xmin; then run VACUUM (FREEZE) "
        "on that database's oldest tables."
    )
    if others:
        detail += f" {others} other databases are past {threshold.warning:,.0f} too."
    return [
        Finding(
            severity,
            f"PostgreSQL database {oldest['name']} is {oldest['wraparound_percent']:g}% of the way to "
            f"{kind} wraparound",
            detail,
            "postgres.vacuum.wraparound",
        )
    ]
