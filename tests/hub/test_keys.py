"""API keys and enrollment tokens: shown once, stored hashed, tokens single use."""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path

import pytest
from sqlite_utils import Database

from sonde.hub.db import open_database
from sonde.hub.durations import parse_duration
from sonde.hub.enrollment_tokens import (
    EnrollmentRefused,
    TokenNotRevocable,
    consume_enrollment_token,
    create_enrollment_token,
    list_enrollment_tokens,
    peek_enrollment_token,
    revoke_enrollment_token,
)
from sonde.hub.keys import (
    LastAdminKey,
    count_active_admin_keys,
    create_api_key,
    find_api_key,
    get_api_key,
    list_api_keys,
    revoke_api_key,
    touch_api_key,
)
from sonde.protocol.enrollment import TOKEN_PATTERN

T0 = 1_700_000_000.0


def raw_bytes(path: Path) -> bytes:
    """The database file and its WAL side files, as stored on disk."""
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


# --- API keys ------------------------------------------------------------------


def test_create_api_key_returns_secret_once(db: Database) -> None:
    record, secret = create_api_key(db, "ci bot", role="member", policy={"agents": ["web-*"]}, now=T0)
    assert secret.startswith("sonde_")
    assert record.prefix == secret[:12]
    assert record.role == "member"
    assert record.policy == {"agents": ["web-*"]}
    assert record.created_at == T0
    assert record.revoked_at is None
    assert "key_hash" not in record.model_dump()
    assert secret not in repr(record)
    assert get_api_key(db, record.id) == record
    assert list_api_keys(db) == [record]


def test_only_the_hash_of_a_secret_is_stored(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    db = open_database(path)
    _, key_secret = create_api_key(db, "laptop")
    _, token_secret = create_enrollment_token(db)
    on_disk_open = raw_bytes(path)
    db.close()
    for data in (on_disk_open, raw_bytes(path)):
        assert key_secret.encode() not in data
        assert token_secret.encode() not in data
    assert hashlib.sha256(key_secret.encode()).hexdigest().encode() in raw_bytes(path)


def test_find_and_revoke(db: Database) -> None:
    record, secret = create_api_key(db, "alice")
    assert find_api_key(db, secret) == record
    assert find_api_key(db, secret + "x") is None
    assert revoke_api_key(db, record.id, now=T0) is True
    assert find_api_key(db, secret) is None
    assert revoke_api_key(db, record.id) is False
    assert revoke_api_key(db, "no-such-id") is False
    revoked = get_api_key(db, record.id)
    assert revoked is not None
    assert revoked.revoked_at == T0


@pytest.mark.parametrize("secret", ["", "sonde_" + "a" * 1000, "not a key"])
def test_find_unknown_secret(db: Database, secret: str) -> None:
    create_api_key(db, "alice")
    assert find_api_key(db, secret) is None


@pytest.mark.parametrize(
    ("name", "role", "message"),
    [
        ("", "member", "invalid API key name"),
        ("   ", "member", "invalid API key name"),
        ("x" * 65, "member", "invalid API key name"),
        ("bad/name", "member", "invalid API key name"),
        ("ok", "root", "invalid role 'root'"),
    ],
)
def test_create_api_key_validates(db: Database, name: str, role: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        create_api_key(db, name, role=role)
    assert list_api_keys(db) == []


def test_policy_must_be_an_object(db: Database) -> None:
    with pytest.raises(ValueError, match="JSON object"):
        create_api_key(db, "bob", policy=["web-*"])  # type: ignore[arg-type]


def test_count_active_admin_keys_and_touch(db: Database) -> None:
    first, _ = create_api_key(db, "admin 1", role="admin")
    create_api_key(db, "admin 2", role="admin")
    create_api_key(db, "member", role="member")
    assert count_active_admin_keys(db) == 2
    revoke_api_key(db, first.id)
    assert count_active_admin_keys(db) == 1
    touch_api_key(db, first.id, T0 + 5)
    touched = get_api_key(db, first.id)
    assert touched is not None
    assert touched.last_used_at == T0 + 5


# --- enrollment tokens -----------------------------------------------------------


def test_token_format_and_record(db: Database) -> None:
    record, secret = create_enrollment_token(db, ttl_s=900, now=T0)
    assert re.fullmatch(TOKEN_PATTERN, secret)
    assert record.expires_at == T0 + 900
    assert record.used_at is None
    assert list_enrollment_tokens(db, now=T0) == [record]


@pytest.mark.parametrize("ttl_s", [59.0, 7 * 86400 + 1, float("nan")])
def test_token_ttl_bounds(db: Database, ttl_s: float) -> None:
    with pytest.raises(ValueError, match="between 60 s and 7 days"):
        create_enrollment_token(db, ttl_s=ttl_s)


def test_reserved_name_must_be_valid(db: Database) -> None:
    with pytest.raises(ValueError, match="invalid agent name"):
        create_enrollment_token(db, name="not a name")


def test_token_is_single_use(db: Database) -> None:
    _, secret = create_enrollment_token(db, now=T0)
    used = consume_enrollment_token(db, secret, "web-1", "agent-1", now=T0 + 10)
    assert used.used_at == T0 + 10
    assert used.used_by == "agent-1"
    with pytest.raises(EnrollmentRefused) as refused:
        consume_enrollment_token(db, secret, "web-2", "agent-2", now=T0 + 20)
    assert refused.value.code == "token_used"
    assert refused.value.message == (
        "enrollment token was already used at 2023-11-14T22:13:30Z; ask an admin for a new one"
    )


def test_expired_token(db: Database) -> None:
    _, secret = create_enrollment_token(db, ttl_s=60, now=T0)
    with pytest.raises(EnrollmentRefused) as refused:
        consume_enrollment_token(db, secret, "web-1", "agent-1", now=T0 + 60)
    assert refused.value.code == "token_expired"
    assert "expired at 2023-11-14T22:14:20Z; ask an admin for a new one" in refused.value.message


@pytest.mark.parametrize("secret", ["A" * 32, "short", "has spaces in it!!"])
def test_unknown_token(db: Database, secret: str) -> None:
    create_enrollment_token(db)
    with pytest.raises(EnrollmentRefused) as refused:
        consume_enrollment_token(db, secret, "web-1", "agent-1")
    assert refused.value.code == "unknown_token"
    assert refused.value.message == "enrollment token is not known to this hub"


def test_token_reserved_for_another_name(db: Database) -> None:
    _, secret = create_enrollment_token(db, name="db-1", now=T0)
    with pytest.raises(EnrollmentRefused) as refused:
        consume_enrollment_token(db, secret, "web-1", "agent-1", now=T0 + 1)
    assert refused.value.code == "token_name_mismatch"
    assert "'db-1'" in refused.value.message
    # the refusal did not burn the token: its rightful agent can still use it
    assert consume_enrollment_token(db, secret, "db-1", "agent-2", now=T0 + 2).used_by == "agent-2"


def test_concurrent_consumption_has_one_winner(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"
    setup = open_database(path)
    secrets = [create_enrollment_token(setup)[1] for _ in range(20)]
    connections = [open_database(path), open_database(path)]
    outcomes: list[list[str]] = [[], []]
    barrier = threading.Barrier(2, timeout=10)

    def race(index: int) -> None:
        for secret in secrets:
            barrier.wait()
            try:
                consume_enrollment_token(connections[index], secret, f"web-{index}", f"agent-{index}")
            except EnrollmentRefused as refused:
                outcomes[index].append(refused.code)
            else:
                outcomes[index].append("won")

    threads = [threading.Thread(target=race, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    for database in (*connections, setup):
        database.close()
    for first, second in zip(*outcomes, strict=True):
        assert sorted([first, second]) == ["token_used", "won"]


def test_a_revoked_token_is_refused_as_revoked(db: Database) -> None:
    record, secret = create_enrollment_token(db, name="web-1", now=T0)
    revoked = revoke_enrollment_token(db, record.id, now=T0 + 10)
    assert (revoked.state, revoked.revoked_at, revoked.used_at) == ("revoked", T0 + 10, None)
    with pytest.raises(EnrollmentRefused) as peeked:
        peek_enrollment_token(db, secret, now=T0 + 20)
    with pytest.raises(EnrollmentRefused) as consumed:
        consume_enrollment_token(db, secret, "web-1", "agent-1", now=T0 + 20)
    for refused in (peeked, consumed):
        assert refused.value.code == "token_revoked"
        assert refused.value.message == (
            "enrollment token was revoked at 2023-11-14T22:13:30Z; ask an admin for a new one"
        )
    assert list_enrollment_tokens(db, now=T0 + 20) == [revoked]  # kept, for the audit trail


def test_only_a_token_that_could_still_enroll_is_revoked(db: Database) -> None:
    used, used_secret = create_enrollment_token(db, now=T0)
    consume_enrollment_token(db, used_secret, "web-1", "agent-1", now=T0 + 1)
    expired, _ = create_enrollment_token(db, ttl_s=60, now=T0)
    twice, _ = create_enrollment_token(db, now=T0)
    revoke_enrollment_token(db, twice.id, now=T0 + 2)
    for token_id, state, says in [
        ("no-such-id", None, "no enrollment token has id 'no-such-id'"),
        (
            used.id,
            "used",
            f"enrollment token {used.id} was already used at 2023-11-14T22:13:21Z by agent agent-1; "
            "revoking it would change nothing",
        ),
        (expired.id, "expired", f"enrollment token {expired.id} already expired at 2023-11-14T22:14:20Z"),
        (twice.id, "revoked", f"enrollment token {twice.id} was already revoked at 2023-11-14T22:13:22Z"),
    ]:
        with pytest.raises(TokenNotRevocable) as refused:
            revoke_enrollment_token(db, token_id, now=T0 + 60)
        assert refused.value.state == state
        assert refused.value.message.startswith(says)
    states = {t.id: (t.state, t.revoked_at) for t in list_enrollment_tokens(db, now=T0 + 60)}
    assert states == {
        used.id: ("used", None),
        expired.id: ("expired", None),
        twice.id: ("revoked", T0 + 2),
    }


def test_listed_tokens_say_their_state_at_the_time_asked(db: Database) -> None:
    record, _ = create_enrollment_token(db, ttl_s=60, now=T0)
    assert record.state == "active"
    assert [t.state for t in list_enrollment_tokens(db, now=T0 + 59)] == ["active"]
    assert [t.state for t in list_enrollment_tokens(db, now=T0 + 60)] == ["expired"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("15m", 900.0), ("2h", 7200.0), ("1d", 86400.0), ("600", 600.0), (" 1.5h ", 5400.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "15x", "-5m", "1h30m", "15 minutes", "1e3"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_peek_shows_the_reserved_name_without_spending(db: Database) -> None:
    _, reserved = create_enrollment_token(db, name="db-1", now=T0)
    _, free = create_enrollment_token(db, now=T0)
    assert peek_enrollment_token(db, reserved, now=T0 + 1) == "db-1"
    assert peek_enrollment_token(db, free, now=T0 + 1) is None
    consume_enrollment_token(db, free, "web-1", "agent-1", now=T0 + 2)
    for secret, now, code in [
        (free, T0 + 3, "token_used"),
        (reserved, T0 + 900, "token_expired"),
        ("B" * 32, T0, "unknown_token"),
    ]:
        with pytest.raises(EnrollmentRefused) as refused:
            peek_enrollment_token(db, secret, now=now)
        assert refused.value.code == code


def test_secrets_never_look_like_command_line_options(tmp_path: Path) -> None:
    """A secret starting with '-' would be read as an option by `sonde enroll --token X`."""
    from sonde.hub.db import open_database
    from sonde.hub.enrollment_tokens import create_enrollment_token
    from sonde.hub.keys import create_api_key

    db = open_database(tmp_path / "keys.db")
    try:
        for _ in range(200):
            assert not create_enrollment_token(db)[1].startswith("-")
            assert not create_api_key(db, "k")[1].startswith("-")
    finally:
        db.close()


def test_an_admin_key_with_a_policy_it_would_ignore_is_refused(db: Database) -> None:
    with pytest.raises(
        ValueError, match="an admin key reaches every agent and probe whatever its policy says"
    ):
        create_api_key(db, "wide", role="admin", policy={"agents": ["web-*"]})
    assert list_api_keys(db) == []


def test_the_last_admin_key_cannot_be_revoked(db: Database) -> None:
    first, _ = create_api_key(db, "first", role="admin")
    second, _ = create_api_key(db, "second", role="admin")
    member, _ = create_api_key(db, "member")
    assert revoke_api_key(db, first.id)
    with pytest.raises(LastAdminKey, match="is the last active admin key"):
        revoke_api_key(db, second.id)
    assert revoke_api_key(db, member.id)  # members come and go
    assert get_api_key(db, second.id) is not None
    assert get_api_key(db, second.id).revoked_at is None  # type: ignore[union-attr]
