"""`sonde hub key|token|agent|audit ...` refuse bad input and an unusable database with a message, not a traceback."""

from __future__ import annotations

import json
import resource
import subprocess
import time
from pathlib import Path

from sonde.hub.audit import verify_audit
from sonde.hub.db import open_database
from sonde.hub.enrollment_tokens import consume_enrollment_token, create_enrollment_token
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_ok


def sonde_hub(
    tmp_path: Path, *args: str, file_size_limit: int | None = None
) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if file_size_limit is not None:  # past it every write fails, as on a full disk
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    env = base_env(tmp_path / "home")
    if file_size_limit is not None:  # else a module compiled meanwhile is cached cut at the limit
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run(
        [*SONDE, "hub", *args, "--data-dir", str(tmp_path / "data")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=limit,
    )


def make_store(tmp_path: Path) -> None:
    """The empty store a hub's first start leaves (the admin commands never create one)."""
    open_database(tmp_path / "data" / "sonde.db").close()


def test_a_bad_name_or_glob_is_a_message_and_exit_2(tmp_path: Path) -> None:
    make_store(tmp_path)
    for args, says in [
        (["key", "create", "--name", "!!bad"], "invalid API key name '!!bad'"),
        (["key", "create", "--name", "ok", "--agents", ""], "agents: '' is no agent glob or #tag: use"),
        (["token", "create", "--name", "a b"], "invalid agent name 'a b': an agent name is 1 to 63"),
        (
            ["key", "create", "--name", "ok", "--role", "admin", "--agents", "web-*"],
            "whatever its policy says",
        ),
    ]:
        done = sonde_hub(tmp_path, *args)
        assert done.returncode == 2, done.stderr
        assert says in done.stderr
        assert "Traceback" not in done.stderr
        assert done.stdout == ""


def test_a_database_that_cannot_be_written_changes_nothing_and_says_so(tmp_path: Path) -> None:
    make_store(tmp_path)
    first = sonde_hub(tmp_path, "key", "create", "--name", "first")
    assert first.returncode == 0, first.stderr
    for args in (["key", "create", "--name", "second"], ["token", "create"], ["key", "revoke", "x"]):
        done = sonde_hub(tmp_path, *args, file_size_limit=4096)
        assert done.returncode == 1, done.stderr
        assert "cannot use the hub's database" in done.stderr
        assert "nothing was changed" in done.stderr
        assert "Traceback" not in done.stderr
        assert done.stdout == ""  # no secret printed for a key that was not made
    listed = run_ok(
        [*SONDE, "hub", "key", "list", "--data-dir", str(tmp_path / "data")], env=base_env(tmp_path / "home")
    )
    assert "first" in listed.stdout
    assert "second" not in listed.stdout
    verified = run_ok(
        [*SONDE, "hub", "audit", "verify", "--data-dir", str(tmp_path / "data")],
        env=base_env(tmp_path / "home"),
    )
    assert "audit chain intact: 1 rows verified" in verified.stderr


def test_a_data_directory_that_holds_no_hub_is_said_and_nothing_is_made(tmp_path: Path) -> None:
    for args in (
        ["key", "create", "--name", "laptop"],
        ["token", "create"],
        ["key", "list"],
        ["audit", "verify"],
        ["audit", "prune", "--older-than", "30d"],
        ["key", "revoke", "k1"],
        ["token", "list"],
        ["token", "revoke", "t1"],
        ["agent", "accept", "web-1"],
        ["agent", "tag", "web-1", "prod"],
        ["audit", "list"],
    ):
        done = sonde_hub(tmp_path, *args)
        assert done.returncode == (3 if args == ["audit", "verify"] else 1)  # verify: "not checked"
        assert (
            f"no hub database at {tmp_path / 'data' / 'sonde.db'}: pass the hub's --data-dir" in done.stderr
        )
        assert done.stdout == ""  # no key or token that no hub would accept
    assert not (tmp_path / "data").exists()


def test_key_list_says_when_each_key_was_last_used(tmp_path: Path) -> None:
    """--json had last_used_at; the table did not say whether a key was in use at all."""
    make_store(tmp_path)
    for name in ("used", "idle"):
        assert sonde_hub(tmp_path, "key", "create", "--name", name).returncode == 0
    db = open_database(tmp_path / "data" / "sonde.db")
    try:
        db.execute(
            "UPDATE api_keys SET last_used_at = 1764232500 WHERE name = 'used'"
        )  # 2025-11-27 08:35:00Z
        db.conn.commit()
    finally:
        db.close()
    done = sonde_hub(tmp_path, "key", "list")
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    assert "LAST USED" in header
    [used] = [row for row in rows if " used " in row]
    [idle] = [row for row in rows if " idle " in row]
    assert "2025-11-27 08:35:00Z" in used
    assert " never " in idle


def test_a_data_dir_that_is_a_file_is_said_as_such(tmp_path: Path) -> None:
    """A backup file given as --data-dir was 'no hub database at FILE/sonde.db'."""
    (tmp_path / "data").write_bytes(b"SQLite format 3\x00")
    done = sonde_hub(tmp_path, "key", "list")
    assert done.returncode == 1, done.stderr
    assert (
        f"--data-dir {tmp_path / 'data'} is a file, not a directory: pass the hub's data directory"
        in done.stderr
    )


def test_the_last_admin_key_is_not_revoked_from_the_cli_either(tmp_path: Path) -> None:
    make_store(tmp_path)
    created = sonde_hub(tmp_path, "key", "create", "--name", "only", "--role", "admin")
    assert created.returncode == 0, created.stderr
    key_id = created.stderr.split("admin API key ")[1].split()[0]
    done = sonde_hub(tmp_path, "key", "revoke", key_id)
    assert done.returncode == 1, done.stderr  # a refusal, not a usage error
    assert "is the last active admin key" in done.stderr
    assert "Traceback" not in done.stderr


def tokens_in_each_state(tmp_path: Path) -> dict[str, str]:
    """Four tokens made on the store: state -> id (the revoked one is revoked by the CLI)."""
    db = open_database(tmp_path / "data" / "sonde.db")
    try:
        made = {
            state: create_enrollment_token(db, name="web-1" if state == "active" else None)
            for state in ("active", "used", "revoked")
        }
        expired, _ = create_enrollment_token(db, ttl_s=60, now=time.time() - 3600)
        consume_enrollment_token(db, made["used"][1], "web-2", "agent-2")
    finally:
        db.close()
    ids = {state: record.id for state, (record, _) in made.items()}
    revoked = sonde_hub(tmp_path, "token", "revoke", ids["revoked"])
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stderr == f"revoked enrollment token {ids['revoked']}; it can no longer enroll an agent\n"
    return {**ids, "expired": expired.id}


def test_token_list_shows_the_usable_tokens_and_with_all_every_state(tmp_path: Path) -> None:
    make_store(tmp_path)
    ids = tokens_in_each_state(tmp_path)
    secret = sonde_hub(tmp_path, "token", "create").stdout.strip()
    table = sonde_hub(tmp_path, "token", "list")
    assert table.returncode == 0, table.stderr
    assert table.stderr == ""
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["ID", "NAME", "STATE", "CREATED", "EXPIRES", "DETAIL"]
    assert len(rows) == 2
    assert rows[0].startswith(ids["active"])
    assert rows[0].split()[1:3] == ["web-1", "active"]
    assert secret not in table.stdout
    full = sonde_hub(tmp_path, "token", "list", "--all").stdout.splitlines()[1:]
    states = {row.split()[0]: row.split()[2] for row in full}
    assert {ids[state]: state for state in ids}.items() <= states.items()
    used_row = next(row for row in full if row.startswith(ids["used"]))
    assert used_row.endswith(" by agent agent-2")
    assert " used at " in used_row
    assert " revoked at " in next(row for row in full if row.startswith(ids["revoked"]))
    listed = sonde_hub(tmp_path, "token", "list", "--json")
    assert listed.stderr == ""
    assert [(t["id"], t["name"], t["state"]) for t in json.loads(listed.stdout)][:1] == [
        (ids["active"], "web-1", "active")
    ]
    every = json.loads(sonde_hub(tmp_path, "token", "list", "--all", "--json").stdout)
    by_id = {t["id"]: t for t in every}
    assert by_id[ids["used"]]["used_by"] == "agent-2"
    assert by_id[ids["revoked"]]["revoked_at"] is not None
    assert {by_id[ids[state]]["state"] for state in ids} == set(ids)
    assert all("secret" not in t and "token_hash" not in t for t in every)


def test_token_revoke_refuses_what_cannot_enroll_anyway_and_audits_each_try(tmp_path: Path) -> None:
    make_store(tmp_path)
    ids = tokens_in_each_state(tmp_path)
    for token_id, says in [
        ("no-such-id", "no enrollment token has id 'no-such-id'"),
        (ids["used"], f"enrollment token {ids['used']} was already used at "),
        (ids["expired"], f"enrollment token {ids['expired']} already expired at "),
        (ids["revoked"], f"enrollment token {ids['revoked']} was already revoked at "),
    ]:
        done = sonde_hub(tmp_path, "token", "revoke", token_id)
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith(says)
        assert done.stderr.endswith(" (see `sonde hub token list --all`)\n")
        assert done.stdout == ""
    db = open_database(tmp_path / "data" / "sonde.db")
    try:
        rows = list(db.query("SELECT target, outcome, detail FROM audit WHERE action = 'cli.token.revoke'"))
        assert verify_audit(db).ok
    finally:
        db.close()
    assert [(row["target"], row["outcome"], json.loads(row["detail"])) for row in rows] == [
        (ids["revoked"], "ok", {"name": None}),
        ("no-such-id", "not_found", {"state": None}),
        (ids["used"], "not_found", {"state": "used"}),
        (ids["expired"], "not_found", {"state": "expired"}),
        (ids["revoked"], "not_found", {"state": "revoked"}),
    ]


def test_a_token_is_revoked_by_its_own_text_and_the_log_names_only_its_id(tmp_path: Path) -> None:
    """Whoever pasted a token where it should not be has its text at hand, not its id."""
    make_store(tmp_path)
    created = sonde_hub(tmp_path, "token", "create", "--name", "web-9")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip()
    token_id = created.stderr.split("enrollment token ")[1].split()[0]  # create names the id
    listed = json.loads(sonde_hub(tmp_path, "token", "list", "--json").stdout)
    assert [t["id"] for t in listed] == [token_id]
    done = sonde_hub(tmp_path, "token", "revoke", secret)
    assert done.returncode == 0, done.stderr
    assert (
        done.stderr
        == f"revoked enrollment token {token_id} (for agent 'web-9'); it can no longer enroll an agent\n"
    )
    again = sonde_hub(tmp_path, "token", "revoke", secret)
    assert again.returncode == 1
    assert again.stderr.startswith(f"enrollment token {token_id} was already revoked at ")
    unknown = sonde_hub(tmp_path, "token", "revoke", "enr_" + "x" * 32)
    assert unknown.returncode == 1
    assert unknown.stderr == "no such enrollment token (see `sonde hub token list --all`)\n"
    db = open_database(tmp_path / "data" / "sonde.db")
    try:
        rows = list(db.query("SELECT target, outcome FROM audit WHERE action = 'cli.token.revoke'"))
        text = json.dumps(list(db.query("SELECT * FROM audit")))
    finally:
        db.close()
    assert [(row["target"], row["outcome"]) for row in rows] == [
        (token_id, "ok"),
        (token_id, "not_found"),
        (None, "not_found"),
    ]
    assert secret not in text


def test_audit_verify_help_lists_every_exit_code() -> None:
    done = run_ok([*SONDE, "hub", "audit", "verify", "--help"], env=base_env(Path("/nonexistent")))
    text = " ".join(done.stdout.split())
    assert "Exits 0 when it is intact, 1 when a row was edited or deleted, 2 for a usage error" in text
    assert "3 when it could not be checked" in text


def test_help_offers_no_empty_list_flags_and_names_the_data_dir() -> None:
    env = base_env(Path("/nonexistent"))
    created = " ".join(run_ok([*SONDE, "hub", "key", "create", "--help"], env=env).stdout.split())
    assert "--empty-" not in created  # cyclopts' negative flags for lists: nothing an operator needs
    assert "The hub's data directory, where its sonde.db is" in created
    served = " ".join(run_ok([*SONDE, "hub", "--help"], env=env).stdout.split())
    assert "--empty-" not in served
