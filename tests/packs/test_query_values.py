"""Query text with its values as ``?``: what the database packs send on unless told to show them."""

from __future__ import annotations

import pytest

from sonde.packs.context import ProbeContext
from sonde.packs.query_values import masked_command, masked_sql, values_shown


@pytest.mark.parametrize(
    ("sql", "shape"),
    [
        (
            "INSERT INTO users(email, password_hash) VALUES ('a@b.c', 'Hunter2xyz')",
            "INSERT INTO users(email, password_hash) VALUES (?, ?)",
        ),
        (
            "SELECT * FROM t1 WHERE id = 42 AND score > 1.5e3 LIMIT 10",
            "SELECT * FROM t1 WHERE id = ? AND score > ? LIMIT ?",
        ),
        ("UPDATE t SET n = n + 1 WHERE id = $1", "UPDATE t SET n = n + ? WHERE id = $1"),
        ("SELECT 'it''s', E'a\\'b', 'c'", "SELECT ?, ?, ?"),
        ("SELECT 'C:\\' AS path, 2", "SELECT ? AS path, ?"),  # no backslash escapes in standard strings
        ("SELECT $$secret$$, $tag$x $$ y$tag$, 3", "SELECT ?, ?, ?"),
        ('SELECT "Email 1" FROM "t 2" WHERE x = .5', 'SELECT "Email 1" FROM "t 2" WHERE x = ?'),
        ("SELECT x'DEADBEEF', B'101', 0x1F, -7", "SELECT ?, ?, ?, -?"),
        (
            "/* app=web 'quoted' */ SELECT 1 -- id 5\nFROM t",
            "/* app=web 'quoted' */ SELECT ? -- id 5\nFROM t",
        ),
        ("SELECT * FROM t WHERE token = 'cut short, 1000 charac", "SELECT * FROM t WHERE token = ?"),
        ("ALTER ROLE app PASSWORD 'Hunter2xyz'", "ALTER ROLE app PASSWORD ?"),
        ("SELECT pg_sleep(30)", "SELECT pg_sleep(?)"),
        ("SELECT café, naïve2 FROM t", "SELECT café, naïve2 FROM t"),
        # from a review: each of these sent a value on
        ("UPDATE t SET note = $é$holder-secret-1$é$ WHERE id = 1", "UPDATE t SET note = ? WHERE id = ?"),
        (
            "/* a /* b */ ' */ UPDATE t SET note = 'secret4' WHERE id = 1",
            "/* a /* b */ ' */ UPDATE t SET note = ? WHERE id = ?",
        ),
        ("SELECT 1_000_000, 0o17, 0x_FF, 123abc", "SELECT ?, ?, ?, ?abc"),
    ],
)
def test_postgres_text_keeps_its_shape_without_its_values(sql: str, shape: str) -> None:
    assert masked_sql(sql, "postgres") == shape


@pytest.mark.parametrize(
    ("sql", "shape"),
    [
        (
            "SELECT * FROM users WHERE email = \"a@b.c\" AND name = 'O\\'Brien'",
            "SELECT * FROM users WHERE email = ? AND name = ?",
        ),
        ("CREATE USER x IDENTIFIED BY 'rev22QuerySecret987'", "CREATE USER x IDENTIFIED BY ?"),
        (
            "SELECT `col 1`, 1st_table.id FROM 1st_table # note 'x'",
            "SELECT `col 1`, 1st_table.id FROM 1st_table # note 'x'",
        ),
        ("SELECT _utf8mb4'x', N'y', X'ff'", "SELECT _utf8mb4?, ?, ?"),
        ("/* sonde */ SELECT SLEEP(30)", "/* sonde */ SELECT SLEEP(?)"),
        # from a review: each of these sent a value on
        (
            "UPDATE t SET bal=bal--5, note='my-secret1' WHERE id=1",
            "UPDATE t SET bal=bal--?, note=? WHERE id=?",
        ),
        ("SELECT 1 -- note 'x'\nFROM t", "SELECT ? -- note 'x'\nFROM t"),  # a comment before a blank
        ("SELECT /*!50000 'my-secret3' */ 1", "SELECT /*!? ? */ ?"),
        ("SELECT /*+ SET_VAR(x='secret') */ 1", "SELECT /*+ SET_VAR(x=?) */ ?"),
    ],
)
def test_mysql_text_keeps_its_shape_without_its_values(sql: str, shape: str) -> None:
    assert masked_sql(sql, "mysql") == shape


def test_an_eval_script_keeps_its_code_without_its_values() -> None:
    script = "local secret='rd-secret1' -- the \"token\"\nreturn redis.call('GET', KEYS[1]) .. [[long secret]] .. 42"
    assert masked_command(["EVAL", script, "1", "k"]) == [
        "EVAL",
        'local secret=? -- the "token"\nreturn redis.call(?, KEYS[?]) .. ? .. ?',
        "?",
        "?",
    ]


def test_a_redis_command_keeps_its_name_and_key() -> None:
    assert masked_command(["HSET", "session:1", "token", "Hunter2xyz"]) == ["HSET", "session:1", "?", "?"]
    assert masked_command(["SET", "k", "v", "... (3 more arguments)"]) == [
        "SET",
        "k",
        "?",
        "... (3 more arguments)",
    ]
    assert masked_command(["PING"]) == ["PING"]


@pytest.mark.parametrize(
    ("settings", "shown"), [({"show_values": True}, True), ({"show_values": "yes"}, False), ({}, False)]
)
def test_only_true_shows_the_values(settings: dict[str, object], shown: bool) -> None:
    ctx = ProbeContext()
    ctx.settings.packs["redis"] = settings  # type: ignore[assignment]
    assert values_shown(ctx, "redis") is shown
