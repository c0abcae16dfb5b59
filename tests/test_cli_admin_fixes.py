"""The real `sonde hub key|token|agent ...` commands on a hub's data directory: a secret pasted where
an id was due is used (by its hash), never shown nor recorded; the CLI's audit rows carry what was
granted; a refusal that is not a usage error exits 1; an empty path variable is as if unset; bad
durations, names and globs are refused saying exactly why."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sonde.agent.enroll import build_request
from sonde.hub.agent_records import AgentRecord, insert_agent
from sonde.hub.db import open_database
from sonde.hub.enrollment_tokens import consume_enrollment_token, create_enrollment_token
from sonde.hub.keys import create_api_key
from sonde.name_rules import invalid_agent_name
from sonde.protocol.signing import new_private_key, public_key_to_text
from tests.e2e.harness import rest_token
from tests.e2e.procs import SONDE, URL_LINE, base_env, running_hub, spawn
from tests.security.attack_fleet import REGISTRY
from tests.subprocs import run_any

UNKNOWN_KEY = "sonde_" + "Q" * 43  # the shape of a key's secret, of no key
UNKNOWN_TOKEN = "enr_" + "Q" * 32


def sonde_hub(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    data_dir = ["--data-dir", str(tmp_path / "data")] if env is None else []
    return subprocess.run(
        [*SONDE, "hub", *args, *data_dir],
        env={**base_env(tmp_path / "home"), **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """The store a hub's first start leaves (the admin commands never create one)."""
    open_database(tmp_path / "data" / "sonde.db").close()
    return tmp_path / "data"


def audit(data_dir: Path, action: str) -> list[dict[str, Any]]:
    db = open_database(data_dir / "sonde.db")
    try:
        rows = list(
            db.query("SELECT target, outcome, detail FROM audit WHERE action = ? ORDER BY seq", [action])
        )
    finally:
        db.close()
    return [{**row, "detail": json.loads(row["detail"] or "{}")} for row in rows]


def database_bytes(data_dir: Path) -> bytes:
    """Every byte of the store, its write-ahead log folded in first."""
    with sqlite3.connect(data_dir / "sonde.db") as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return b"".join(p.read_bytes() for p in data_dir.iterdir() if p.name.startswith("sonde.db"))


def key_states(tmp_path: Path) -> dict[str, str]:
    listed = sonde_hub(tmp_path, "key", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    return {k["id"]: "revoked" if k["revoked_at"] else "active" for k in json.loads(listed.stdout)}


def new_key(tmp_path: Path, *args: str) -> tuple[str, str]:
    """The id and secret of a key made by `sonde hub key create`."""
    made = sonde_hub(tmp_path, "key", "create", *args)
    assert made.returncode == 0, made.stderr
    return made.stderr.split(" API key ")[1].split()[0], made.stdout.strip()


# --- 1: a key's or token's secret pasted where its id was due -----------------------------------


@pytest.mark.parametrize("pasted", ["{}", "  {}\n"], ids=["as is", "with blanks"])
def test_a_key_is_revoked_by_its_secret_which_is_never_shown_nor_recorded(
    tmp_path: Path, data_dir: Path, pasted: str
) -> None:
    key_id, secret = new_key(tmp_path, "--name", "leaked")
    done = sonde_hub(tmp_path, "key", "revoke", pasted.format(secret))
    assert done.returncode == 0, done.stderr
    assert f"revoked API key {key_id}" in done.stderr
    assert secret not in done.stderr + done.stdout
    assert key_states(tmp_path)[key_id] == "revoked"
    assert audit(data_dir, "cli.api_key.revoke") == [{"target": key_id, "outcome": "ok", "detail": {}}]
    assert secret.encode() not in database_bytes(data_dir)


def test_a_secret_no_key_has_is_neither_shown_nor_recorded(tmp_path: Path, data_dir: Path) -> None:
    for pasted in (UNKNOWN_KEY, f"Bearer {UNKNOWN_KEY}", UNKNOWN_KEY[:30]):
        done = sonde_hub(tmp_path, "key", "revoke", pasted)
        assert done.returncode == 1, done.stderr
        assert "no API key has that secret" in done.stderr
        assert UNKNOWN_KEY[6:26] not in done.stderr
    assert [row["target"] for row in audit(data_dir, "cli.api_key.revoke")] == [None, None, None]
    assert UNKNOWN_KEY[6:26].encode() not in database_bytes(data_dir)


def test_a_token_pasted_with_blanks_is_revoked_by_its_text_never_shown(
    tmp_path: Path, data_dir: Path
) -> None:
    db = open_database(data_dir / "sonde.db")
    try:
        token, secret = create_enrollment_token(db)
    finally:
        db.close()
    done = sonde_hub(tmp_path, "token", "revoke", f" {secret} ")
    assert done.returncode == 0, done.stderr
    assert f"revoked enrollment token {token.id}" in done.stderr
    for pasted in (f" {UNKNOWN_TOKEN}", f"{UNKNOWN_TOKEN}\t", UNKNOWN_KEY):
        unknown = sonde_hub(tmp_path, "token", "revoke", pasted)
        assert unknown.returncode == 1, unknown.stderr
        assert "no such enrollment token" in unknown.stderr
        assert pasted.strip()[8:] not in unknown.stderr
    rows = audit(data_dir, "cli.token.revoke")
    assert [(row["target"], row["outcome"]) for row in rows] == [
        (token.id, "ok"),
        (None, "not_found"),
        (None, "not_found"),
        (None, "not_found"),
    ]
    stored = database_bytes(data_dir)
    assert secret.encode() not in stored
    assert b"Q" * 20 not in stored


@pytest.mark.parametrize("args", [["agent", "accept"], ["agent", "remove"]], ids=" ".join)
def test_an_agent_name_shaped_like_a_secret_is_not_echoed(
    tmp_path: Path, data_dir: Path, args: list[str]
) -> None:
    done = sonde_hub(tmp_path, *args, UNKNOWN_KEY)
    assert done.returncode == 1, done.stderr
    assert "no agent named 'sonde_[hidden]'" in done.stderr
    assert UNKNOWN_KEY not in done.stderr


# --- 6: the CLI's audit rows carry what was granted; a refusal exits 1 ---------------------------


def test_the_cli_records_the_policy_and_the_ttl_it_granted(tmp_path: Path, data_dir: Path) -> None:
    key_id, _ = new_key(tmp_path, "--name", "web-team", "--agents", "web-*", "--probes", "system.*")
    member_id, _ = new_key(tmp_path, "--name", "all")
    made = sonde_hub(tmp_path, "token", "create", "--ttl", "2h", "--name", "web-1")
    assert made.returncode == 0, made.stderr
    policy = {"agents": ["web-*"], "probes": ["system.*"]}
    assert [(r["target"], r["detail"]) for r in audit(data_dir, "cli.api_key.create")] == [
        (key_id, {"name": "web-team", "role": "member", "policy": policy}),
        (member_id, {"name": "all", "role": "member", "policy": None}),
    ]
    assert [r["detail"] for r in audit(data_dir, "cli.token.create")] == [{"name": "web-1", "ttl_s": 7200.0}]


def test_refusing_to_revoke_the_last_admin_key_is_on_the_record_and_exits_1(
    tmp_path: Path, data_dir: Path
) -> None:
    key_id, secret = new_key(tmp_path, "--name", "only", "--role", "admin")
    for given in (key_id, secret):
        done = sonde_hub(tmp_path, "key", "revoke", given)
        assert done.returncode == 1, done.stderr
        assert f"API key {key_id} (only) is the last active admin key" in done.stderr
        assert secret not in done.stderr
    assert (
        audit(data_dir, "cli.api_key.revoke") == [{"target": key_id, "outcome": "refused", "detail": {}}] * 2
    )
    assert key_states(tmp_path)[key_id] == "active"


# --- 5: an empty path variable is as if unset --------------------------------------------------


def test_an_empty_sonde_data_dir_is_the_default_not_the_current_directory(
    tmp_path: Path, data_dir: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    open_database(elsewhere / "sonde.db").close()  # a hub database in the current directory
    default = tmp_path / "home" / ".local" / "share" / "sonde" / "sonde.db"
    for args in (["key", "list"], ["key", "create", "--name", "x"], ["agent", "list"]):
        done = sonde_hub(tmp_path, *args, env={"SONDE_DATA_DIR": ""}, cwd=elsewhere)
        assert done.returncode == 1, done.stderr
        assert f"no hub database at {default}" in done.stderr
    db = open_database(elsewhere / "sonde.db")
    try:
        assert db.execute("SELECT count(*) FROM api_keys").fetchone() == (0,)
    finally:
        db.close()


def test_empty_tls_variables_are_as_if_unset(tmp_path: Path) -> None:
    env = {**base_env(tmp_path / "home"), "SONDE_TLS_CERT": "", "SONDE_TLS_KEY": ""}
    proc = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")], env)
    try:
        assert proc.wait_for(URL_LINE, timeout=30).group(1).startswith("http://127.0.0.1:")
    finally:
        assert proc.stop() == 0


# --- 8: durations, names and globs --------------------------------------------------------------


@pytest.mark.parametrize("ttl", [["--ttl", "-5m"], ["--ttl=-5m"], ["--ttl", "-1"]], ids=" ".join)
def test_a_negative_ttl_is_refused_as_negative(tmp_path: Path, data_dir: Path, ttl: list[str]) -> None:
    done = sonde_hub(tmp_path, "token", "create", *ttl)
    assert done.returncode == 2, done.stderr
    assert (
        f"--ttl: invalid duration {ttl[-1].removeprefix('--ttl=')!r}: a duration cannot be negative"
        in done.stderr
    )
    assert "requires an argument" not in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("length", [65, 101])
def test_a_long_key_name_is_refused_with_the_real_limit(tmp_path: Path, data_dir: Path, length: int) -> None:
    done = sonde_hub(tmp_path, "key", "create", "--name", "n" * length)
    assert done.returncode == 2, done.stderr
    assert "no API key name has more than 64 characters" in done.stderr
    assert new_key(tmp_path, "--name", "n" * 64)[1].startswith("sonde_")


def test_a_long_agent_name_is_refused_with_the_real_limit(tmp_path: Path, data_dir: Path) -> None:
    done = sonde_hub(tmp_path, "token", "create", "--name", "a" * 64)
    assert done.returncode == 2, done.stderr
    assert "no agent name has more than 63 characters" in done.stderr


@pytest.mark.parametrize(
    ("flag", "glob", "says"),
    [
        ("--agents", "[", "'[' has a '[' with no closing ']': it would match nothing"),
        ("--agents", "web-[0-9", "'web-[0-9' has a '[' with no closing ']'"),
        ("--agents", "[z-a]", "its set '[z-a]' matches no character a name can have"),
        ("--probes", "system.[", "'system.[' has a '[' with no closing ']'"),
        ("--probes", "system-*", "'system-*' has '-' outside a [set], a character no probe name has"),
        ("--agents", "web!", "'web!' has '!' outside a [set], a character no agent name has"),
    ],
)
def test_a_glob_that_can_match_nothing_is_refused(
    tmp_path: Path, data_dir: Path, flag: str, glob: str, says: str
) -> None:
    done = sonde_hub(tmp_path, "key", "create", "--name", "k", flag, glob)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert audit(data_dir, "cli.api_key.create") == []


def test_a_glob_with_a_closed_set_is_taken(tmp_path: Path, data_dir: Path) -> None:
    new_key(
        tmp_path,
        "--name",
        "k",
        *("--agents", "web-[0-9]*", "--agents", "[]ab]", "--agents", "db-[!0-9]"),
        *("--probes", "system.[am]*", "--probes", "postgres.[a-m]*", "--probes", "redis.[!s]*"),
    )


def test_a_used_tokens_refusal_names_the_cli_command_that_removes_its_agent(
    tmp_path: Path, data_dir: Path
) -> None:
    db = open_database(data_dir / "sonde.db")
    try:
        token, secret = create_enrollment_token(db)
        consume_enrollment_token(db, secret, "web-1", "agent-1")
        create_api_key(db, "spare")
    finally:
        db.close()
    done = sonde_hub(tmp_path, "token", "revoke", token.id)
    assert done.returncode == 1, done.stderr
    assert "remove it (`sonde hub agent remove agent-1`, or DELETE /api/v1/agents/agent-1)" in done.stderr


# --- usage errors that say what is wrong: an agent name, a probe glob's characters -------------


def test_a_bad_agent_name_states_the_rule_as_enroll_does(tmp_path: Path, data_dir: Path) -> None:
    """One message for one mistake, whichever command refuses the name."""
    made = sonde_hub(tmp_path, "token", "create", "--name", "bad/name")
    assert made.returncode == 2, made.stderr
    assert made.stderr.strip() == f"sonde hub: {invalid_agent_name('bad/name')}"
    assert "1 to 63 letters" in made.stderr
    enrolled = subprocess.run(
        [*SONDE, "enroll", "--hub", "http://127.0.0.1:9", "--name", "bad/name"],
        env={**base_env(tmp_path / "home"), "SONDE_ENROLL_TOKEN": "enr_" + "Q" * 32},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert enrolled.returncode == 2  # a usage error, as the hub's command says it
    assert enrolled.stderr.strip() == f"sonde enroll: {invalid_agent_name('bad/name')}"


@pytest.mark.parametrize(
    ("flag", "glob", "says"),
    [
        (
            "--probes",
            "System.*",
            "'System.*' is no probe glob: use 1 to 100 of a-z 0-9 . _ and the wildcards",
        ),
        ("--probes", "system mem", "'system mem' is no probe glob"),
        ("--agents", "", "'' is no agent glob or #tag: use 1 to 64 of A-Z a-z 0-9 . _ -"),
        ("--agents", "web/1", "'web/1' is no agent glob or #tag"),
    ],
)
def test_a_glob_with_characters_no_name_has_says_which_it_may_hold(
    tmp_path: Path, data_dir: Path, flag: str, glob: str, says: str
) -> None:
    done = sonde_hub(tmp_path, "key", "create", "--name", "k", flag, glob)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert "should match pattern" not in done.stderr
    assert audit(data_dir, "cli.api_key.create") == []


def test_a_probe_glob_matching_no_known_probe_is_warned_of_and_taken(tmp_path: Path, data_dir: Path) -> None:
    made = sonde_hub(tmp_path, "key", "create", "--name", "k", "--probes", "nosuch.*", "--probes", "system.*")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("sonde_")
    warnings = [line for line in made.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "sonde hub: warning: --probes 'nosuch.*' matches no probe known to this hub (none of its packs, "
        "nor any enrolled agent's); the key reaches no probe through it until one appears"
    ]
    assert audit(data_dir, "cli.api_key.create")[0]["detail"]["policy"]["probes"] == ["nosuch.*", "system.*"]


def test_a_probe_glob_an_enrolled_agents_own_pack_matches_is_no_warning(
    tmp_path: Path, data_dir: Path
) -> None:
    db = open_database(data_dir / "sonde.db")
    try:
        insert_agent(
            db,
            AgentRecord(
                id="agent-1",
                name="web-1",
                public_key="k",
                enrolled_at=1.0,
                packs=[{"name": "custom", "version": "1", "probes": [{"name": "custom.queue.depth"}]}],
            ),
        )
    finally:
        db.close()
    made = sonde_hub(tmp_path, "key", "create", "--name", "k", "--probes", "custom.*")
    assert made.returncode == 0, made.stderr
    assert "warning" not in made.stderr


def test_an_agent_glob_or_tag_matching_no_enrolled_agent_is_warned_of_and_taken(
    tmp_path: Path, data_dir: Path
) -> None:
    """Before, `--agents 'wbe-*'` (a typo) or a tag no agent has made the key with no word, where
    a `--probes` glob matching no probe was warned of."""
    db = open_database(data_dir / "sonde.db")
    try:
        insert_agent(
            db, AgentRecord(id="agent-1", name="web-1", public_key="k", enrolled_at=1.0, tags=["prod"])
        )
    finally:
        db.close()
    made = sonde_hub(
        tmp_path,
        "key",
        "create",
        "--name",
        "k",
        "--agents",
        "wbe-*",
        "--agents",
        "#canary",
        "--agents",
        "web-*",
    )
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("sonde_")
    warnings = [line for line in made.stderr.splitlines() if "warning" in line]
    assert warnings == [
        "sonde hub: warning: --agents 'wbe-*' matches no agent enrolled now; the key is made all the same, "
        "as one may enroll later, and reaches no agent through it until then",
        "sonde hub: warning: --agents '#canary' matches no agent enrolled now (none has the tag canary); "
        "the key is made all the same, as one may enroll or be tagged later, and reaches no agent through "
        "it until then",
    ]
    assert audit(data_dir, "cli.api_key.create")[0]["detail"]["policy"]["agents"] == [
        "wbe-*",
        "#canary",
        "web-*",
    ]
    matching = sonde_hub(tmp_path, "key", "create", "--name", "k2", "--agents", "web-?", "--agents", "#PROD")
    assert matching.returncode == 0, matching.stderr
    assert "warning" not in matching.stderr  # a tag matches as a policy matches it: case aside


# --- a name shaped like a secret is refused, never stored ------------------------------------------

SECRET_WORDS = "has the shape of a Sonde API key or enrollment token"


@pytest.mark.parametrize(
    "args",
    [["key", "create", "--name", UNKNOWN_KEY], ["token", "create", "--name", UNKNOWN_KEY]],
    ids=["key", "token"],
)
def test_a_name_shaped_like_a_secret_is_refused_and_never_stored(
    tmp_path: Path, data_dir: Path, args: list[str]
) -> None:
    """A key pasted as a name was stored in the clear (api_keys.name, every backup) and shown in
    lists, the dashboard and a model's answers, where the key itself is kept as a hash."""
    done = sonde_hub(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    assert SECRET_WORDS in done.stderr
    assert UNKNOWN_KEY not in done.stderr + done.stdout
    assert UNKNOWN_KEY.encode() not in database_bytes(data_dir)


def test_enroll_refuses_a_secret_shaped_name_before_it_asks_for_a_token(tmp_path: Path) -> None:
    argv = [*SONDE, "enroll", "--hub", "http://127.0.0.1:9", "--name", UNKNOWN_TOKEN]
    done = run_any(argv, env=base_env(tmp_path / "home"), stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 2, done.stderr
    assert SECRET_WORDS in done.stderr
    assert UNKNOWN_TOKEN not in done.stderr


def test_the_hub_refuses_a_secret_shaped_name_over_rest(tmp_path: Path) -> None:
    with running_hub(tmp_path) as hub, hub.client() as http:
        for path, body in (
            ("/api/v1/api-keys", {"name": UNKNOWN_KEY}),
            ("/api/v1/enrollment-tokens", {"name": UNKNOWN_KEY}),
        ):
            refused = http.post(path, json=body)
            assert refused.status_code == 400, (path, refused.text)
            assert SECRET_WORDS in refused.json()["error"]["message"], refused.text
            assert UNKNOWN_KEY not in refused.text
        # nor does its enrollment, whatever made the request
        key = public_key_to_text(new_private_key().public_key())
        body = build_request(rest_token(hub), "fine-name", key, REGISTRY).model_dump(
            mode="json", by_alias=True
        )
        refused = http.post("/api/v1/agents/enroll", json={**body, "name": UNKNOWN_KEY})
        assert refused.status_code == 400, refused.text
        assert SECRET_WORDS in refused.text
        assert UNKNOWN_KEY not in refused.text


def test_a_key_is_revoked_by_its_name_unless_two_active_keys_share_it(tmp_path: Path, data_dir: Path) -> None:
    """`key revoke laptop` said there was no key with that id, while `agent remove` takes names."""
    made = [sonde_hub(tmp_path, "key", "create", "--name", name) for name in ("laptop", "shared", "shared")]
    assert [done.returncode for done in made] == [0, 0, 0]
    assert "warning" not in made[1].stderr
    assert "warning: 1 other active API key(s) have this name (" in made[2].stderr  # said as it is made
    done = sonde_hub(tmp_path, "key", "revoke", "laptop")
    assert done.returncode == 0, done.stderr
    assert "revoked API key " in done.stderr
    [row] = audit(data_dir, "cli.api_key.revoke")
    assert row["target"] != "laptop"  # the row names the key by its id
    twice = sonde_hub(tmp_path, "key", "revoke", "shared")
    assert twice.returncode == 1
    assert "2 active API keys are named 'shared': give one's id (" in twice.stderr
    listed = sonde_hub(tmp_path, "key", "list").stdout
    assert listed.count("revoked") == 1, listed


# --- at fleet scale: the agent list is counted and filtered --------------------------------------


def test_the_agent_list_counts_every_agent_and_lists_a_status_alone(tmp_path: Path, data_dir: Path) -> None:
    """Regression (3,000 agents): `sonde hub agent list` printed every row with no count and no
    way to see only the agents that are down."""
    db = open_database(data_dir / "sonde.db")
    try:
        for n in range(5):
            insert_agent(db, AgentRecord(name=f"web-{n}", public_key=f"k{n}", enrolled_at=0.0))
        held = {"status": "degraded", "pending_attestation": {"codeHash": "x"}}
        insert_agent(db, AgentRecord(name="db-1", public_key="kd", enrolled_at=0.0, **held))
    finally:
        db.close()
    every = sonde_hub(tmp_path, "agent", "list")
    assert every.returncode == 0, every.stderr
    assert every.stderr.strip().splitlines()[-1] == "6 agent(s): 1 degraded, 5 offline"
    assert len(every.stdout.splitlines()) == 1 + 6
    down = sonde_hub(tmp_path, "agent", "list", "--status", "degraded", "--json")
    assert down.returncode == 0, down.stderr
    assert [a["name"] for a in json.loads(down.stdout)] == ["db-1"]
    assert (
        down.stderr.strip().splitlines()[-1] == "6 agent(s): 1 degraded, 5 offline; 1 listed, those degraded"
    )
    wrong = sonde_hub(tmp_path, "agent", "list", "--status", "asleep")
    assert wrong.returncode == 2, wrong.stderr
