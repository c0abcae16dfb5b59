"""Reading the audit log: rows by agent, actor, action, time and text, newest first, a page at a time.

An admin reads the rows as written. A key without the admin role reads its own rows only,
and reads a refusal of an agent outside its policy as it was told of it (`query_audit_page`,
``as_told``): out-of-scope agents stay invisible there too.
"""

from __future__ import annotations

import json
from typing import Any

from sqlite_utils import Database

from sonde.hub.audit import canonical_json

MAX_QUERY_LIMIT = 1000
_QUERY_COLUMNS = "seq, ts, actor, action, target, outcome, duration_ms, detail, hash"
# A refusal of an agent outside the caller's policy, as its caller was told of it: an unknown agent.
# An MCP call's row then reads as an unknown agent's (outcome the code, detail the tool alone);
# a REST request's is dropped, as an unknown agent leaves none.
_HIDDEN_AGENT = "json_extract(detail, '$.reason') = 'agent_not_allowed'"
_AS_TOLD = (
    f"(SELECT seq, ts, actor, action, target,"
    f" CASE WHEN {_HIDDEN_AGENT} THEN json_extract(detail, '$.code') ELSE outcome END AS outcome, duration_ms,"
    f" CASE WHEN {_HIDDEN_AGENT} THEN json_object('tool', json_extract(detail, '$.tool')) ELSE detail END"
    f" AS detail, hash FROM audit WHERE NOT ({_HIDDEN_AGENT} AND substr(action, 1, 9) <> 'mcp.call.'))"
)
_CONTAINS_CLAUSE = (  # a literal, case-sensitive text in any text column
    "(instr(actor, ?) > 0 OR instr(action, ?) > 0 OR instr(coalesce(target, ''), ?) > 0"
    " OR instr(outcome, ?) > 0 OR instr(coalesce(detail, ''), ?) > 0)"
)


def query_audit(db: Database, /, **filters: Any) -> list[dict[str, Any]]:
    """The rows of `query_audit_page` (same filters), without whether more matched."""
    rows, _ = query_audit_page(db, **filters)
    return rows


def query_audit_page(
    db: Database,
    *,
    agent: str | None = None,
    actor: str | None = None,
    action_prefix: str | None = None,
    since: float | None = None,
    until: float | None = None,
    contains: str | None = None,
    limit: int = 100,
    as_told: bool = False,
) -> tuple[list[dict[str, Any]], bool]:
    """Audit rows, newest first, as dicts (``detail`` decoded): the newest ``limit`` matching rows,
    and whether older ones also matched.

    ``agent`` matches ``target`` exactly; ``since`` is inclusive and ``until`` exclusive
    (unix seconds).

    ``contains`` keeps rows whose actor, action, target, outcome or detail contains
    that literal, case-sensitive text; it is applied in the query, before the limit.
    ``as_told``: each refusal of an agent outside the caller's policy reads as the unknown
    agent the caller was told it was (what a key without the admin role reads of its own
    rows: out-of-scope agents stay invisible there too); filters apply to the rows so read.
    Raises ValueError unless 1 <= limit <= 1000.
    """
    if not 1 <= limit <= MAX_QUERY_LIMIT:
        raise ValueError(f"limit must be between 1 and {MAX_QUERY_LIMIT}, not {limit}")
    clauses: list[str] = []
    params: list[Any] = []
    for clause, value in (("target = ?", agent), ("actor = ?", actor), ("ts >= ?", since), ("ts < ?", until)):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    if action_prefix:
        clauses.append("substr(action, 1, ?) = ?")
        params += [len(action_prefix), action_prefix]
    if contains:
        clauses.append(_CONTAINS_CLAUSE)
        params += [*[contains] * 4, _json_escaped(contains)]
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows_of = _AS_TOLD if as_told else "audit"
    query = f"SELECT {_QUERY_COLUMNS} FROM {rows_of} {where} ORDER BY seq DESC LIMIT ?"
    rows = [
        {**row, "detail": json.loads(row["detail"]) if row["detail"] else {}}
        for row in db.query(query, [*params, limit + 1])
    ]
    return rows[:limit], len(rows) > limit


def _json_escaped(text: str) -> str:
    """``text`` as it appears inside a JSON string in the stored ``detail`` (quotes, non-ASCII escaped)."""
    return canonical_json(text)[1:-1]
