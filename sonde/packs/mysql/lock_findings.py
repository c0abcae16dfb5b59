"""Findings on what MySQL/MariaDB clients wait for and how long they run: lock waits, long queries.

Each lock wait finding names the thread that blocks the others (one finding per
blocker), what it is doing (often nothing: an idle thread holding a transaction
open) and how to find or end it. A long-running thread is one whose statement has
run, or whose transaction has been open, past the threshold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sonde.packs.runbook import Finding, Reading, Threshold, human_seconds, worse

LOCKS = "mysql.locks.waits"
PROCESSES = "mysql.processes.list"
WAITERS_NAMED = 5  # waiting threads named in a finding's detail, at most
BLOCKERS_JUDGED = 5  # blockers given a finding each, those with the most waiting first
QUERY_SHOWN_CHARS = 200
# the server's own threads, long-running by nature: replication, the event scheduler, background work
BACKGROUND_COMMANDS = frozenset(
    {"Daemon", "Binlog Dump", "Binlog Dump GTID", "Slave_IO", "Slave_SQL", "Slave_worker"}
)
BACKGROUND_USERS = frozenset({"system user", "event_scheduler"})


def describe_thread(thread: Mapping[str, Any] | None) -> str:
    """A thread as the on-call engineer needs it: who, from where, doing what, its transaction."""
    if thread is None:
        return "a thread no longer in the process list"
    doing = f"{thread.get('command')} for {human_seconds(thread.get('time_s'))}"
    if thread.get("state"):
        doing += f", state '{thread['state']}'"
    if thread.get("transaction_s") is not None:
        doing += f", transaction {thread.get('transaction_state')} open for {human_seconds(thread['transaction_s'])}"
    query = (thread.get("query") or "")[:QUERY_SHOWN_CHARS]
    statement = f": {query}" if query else ", no statement running"
    return f"thread {thread['id']} ({thread.get('user')}@{thread.get('host')}, {doing}{statement})"


def _waiters(waits: list[Mapping[str, Any]]) -> str:
    named = [w["waiting"]["id"] if w.get("waiting") else "?" for w in waits[:WAITERS_NAMED]]
    more = f" and {len(waits) - WAITERS_NAMED} more" if len(waits) > WAITERS_NAMED else ""
    return f"{', '.join(map(str, named))}{more}"


def _blocker_finding(
    thresholds: Mapping[str, Threshold],
    blocker: Mapping[str, Any] | None,
    waits: list[Mapping[str, Any]],
    lock: str,
) -> list[Finding]:
    longest = max((w.get("wait_s") or 0 for w in waits), default=0)
    severity = worse(
        thresholds["lock_waiters"].severity(len(waits)), thresholds["lock_wait_s"].severity(longest)
    )
    if severity is None:
        return []
    name = f"thread {blocker['id']}" if blocker else "a thread no longer listed"
    waited = (
        f"the longest for {human_seconds(longest)}" if len(waits) > 1 else f"for {human_seconds(longest)}"
    )
    return [
        Finding(
            severity,
            f"MySQL {name} blocks {len(waits)} thread{'s' if len(waits) > 1 else ''} on {lock}",
            f"The blocker is {describe_thread(blocker)}. Waiting: thread {_waiters(waits)}, {waited}."
            f"{_what_to_do(blocker)} See mysql.locks.waits.",
            LOCKS,
        )
    ]


def _what_to_do(blocker: Mapping[str, Any] | None) -> str:
    if blocker is None:
        return ""
    if blocker.get("transaction_s") is not None:
        return (
            " An idle blocker holding a transaction open is a client that did not commit: find it by its "
            f"host. If it must go, KILL {blocker['id']} ends it (its transaction rolls back)."
        )
    return (
        " A blocker with no transaction holds a table lock (LOCK TABLES, until UNLOCK TABLES) or runs DDL: "
        f"find the client by its host. If it must go, KILL {blocker['id']} ends it."
    )


def row_lock_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    by_blocker: dict[Any, list[Mapping[str, Any]]] = {}
    blockers: dict[Any, Mapping[str, Any] | None] = {}
    for wait in reading.get("row_lock_waits", []):
        blocker = wait.get("blocking")
        key = blocker["id"] if blocker else None
        by_blocker.setdefault(key, []).append(wait)
        blockers[key] = blocker
    found: list[Finding] = []
    for key, waits in sorted(by_blocker.items(), key=lambda kv: -len(kv[1]))[:BLOCKERS_JUDGED]:
        tables = sorted({str(w["lock_table"]) for w in waits if w.get("lock_table")})
        found += _blocker_finding(
            thresholds, blockers[key], waits, f"row locks in {', '.join(tables) or '?'}"
        )
    return found


def _lock_name(wait: Mapping[str, Any]) -> str:
    state = str(wait["waiting"].get("state") or "Waiting for table metadata lock")
    return state.removeprefix("Waiting for ")


def metadata_lock_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    waits = [{**w, "wait_s": w["waiting"].get("time_s")} for w in reading.get("metadata_lock_waits", [])]
    by_holder: dict[int, list[Mapping[str, Any]]] = {}
    holders: dict[int, Mapping[str, Any]] = {}
    for wait in waits:
        for holder in wait.get("holders") or []:
            by_holder.setdefault(holder["id"], []).append(wait)
            holders[holder["id"]] = holder
    found: list[Finding] = []
    for key, held in sorted(by_holder.items(), key=lambda kv: -len(kv[1]))[:BLOCKERS_JUDGED]:
        objects = sorted({str(w.get("object")) for w in held if w.get("object")})
        found += _blocker_finding(
            thresholds, holders[key], held, f"a {_lock_name(held[0])} on {', '.join(objects)}"
        )
    unknown = [w for w in waits if not w.get("holders")]
    severity = worse(
        thresholds["lock_waiters"].severity(len(unknown)),
        thresholds["lock_wait_s"].severity(max((w["wait_s"] or 0 for w in unknown), default=0)),
    )
    if unknown and severity:
        found.append(
            Finding(
                severity,
                f"{len(unknown)} MySQL thread{'s wait' if len(unknown) > 1 else ' waits'} on a "
                f"{_lock_name(unknown[0])}, holder unknown",
                f"Waiting: {describe_thread(unknown[0]['waiting'])}"
                + (f" and {len(unknown) - 1} more" if len(unknown) > 1 else "")
                + f". {reading.get('visibility') or 'The holder was not found.'}",
                LOCKS,
            )
        )
    return found


def lock_wait_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    """One finding per blocking thread (row locks, then metadata locks); one for waits whose holder is unknown."""
    found = row_lock_findings(thresholds, reading) + metadata_lock_findings(thresholds, reading)
    if not reading.get("sees_all_threads", True):
        found.append(
            Finding(
                "info",
                "MySQL lock waits are partly hidden from this login",
                str(reading.get("visibility")),
                LOCKS,
            )
        )
    return found


def running_s(thread: Mapping[str, Any]) -> float:
    """How long a thread has run: its transaction's age, or its statement's (an idle thread's: none)."""
    statement_s = 0 if thread.get("command") == "Sleep" else thread.get("time_s") or 0
    return max(thread.get("transaction_s") or 0, statement_s)


def is_background(thread: Mapping[str, Any]) -> bool:
    return thread.get("command") in BACKGROUND_COMMANDS or thread.get("user") in BACKGROUND_USERS


def long_query_findings(thresholds: Mapping[str, Threshold], reading: Reading) -> list[Finding]:
    """The longest-running client thread, a statement or an open transaction, past ``long_query_s``."""
    threads = [t for t in reading.get("threads", []) if not is_background(t) and running_s(t) > 0]
    found: list[Finding] = []
    if threads:
        longest = max(threads, key=running_s)
        severity = thresholds["long_query_s"].severity(running_s(longest))
        transaction = longest.get("command") == "Sleep" or (longest.get("transaction_s") or 0) > (
            longest.get("time_s") or 0
        )
        what = "transaction has been open" if transaction else "query has been running"
        if severity:
            found.append(
                Finding(
                    severity,
                    f"A MySQL {what} for {human_seconds(running_s(longest))}",
                    f"{len(threads)} long-running; the longest is {describe_thread(longest)}. A long "
                    "transaction holds its locks and keeps old row versions (the undo history grows). "
                    "See mysql.processes.list and mysql.locks.waits.",
                    PROCESSES,
                )
            )
    hidden = reading.get("hidden_threads") or 0
    if hidden:
        found.append(
            Finding(
                "info",
                f"About {hidden} MySQL connections could not be checked for long queries",
                str(reading.get("visibility")),
                PROCESSES,
            )
        )
    return found
