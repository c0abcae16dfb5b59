"""`sonde hub key|token|agent|audit ...` refuse bad input and an unusable database with a message, not a traceback."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

from sonde.hub.db import open_database
from tests.e2e.procs import SONDE, base_env
from tests.subprocs import run_ok


def sonde_hub(
    tmp_path: Path, *args: str, file_size_limit: int | None = None
) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        if file_size_limit is not None:  # past it every write fails, as on a full disk
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run(
        [*SONDE, "hub", *args, "--data-dir", str(tmp_path / "data")],
        env=base_env(tmp_path / "home"),
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
        (["key", "create", "--name", "ok", "--agents", ""], "agents.0: String should match pattern"),
        (["token", "create", "--name", "a b"], "invalid agent name 'a b'"),
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
        ["agent", "accept", "web-1"],
    ):
        done = sonde_hub(tmp_path, *args)
        assert done.returncode == 1
        assert (
            f"no hub database at {tmp_path / 'data' / 'sonde.db'}: pass the hub's --data-dir" in done.stderr
        )
        assert done.stdout == ""  # no key or token that no hub would accept
    assert not (tmp_path / "data").exists()


def test_the_last_admin_key_is_not_revoked_from_the_cli_either(tmp_path: Path) -> None:
    make_store(tmp_path)
    created = sonde_hub(tmp_path, "key", "create", "--name", "only", "--role", "admin")
    assert created.returncode == 0, created.stderr
    key_id = created.stderr.split("admin API key ")[1].split()[0]
    done = sonde_hub(tmp_path, "key", "revoke", key_id)
    assert done.returncode == 2, done.stderr
    assert "is the last active admin key" in done.stderr
    assert "Traceback" not in done.stderr
