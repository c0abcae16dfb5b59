"""A per-pack setting no installed pack reads is a typo, said at start: a mistyped port meant the
default one and a mistyped password none, without a word (an operator-day review)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import trio

from sonde.agent.pack_settings import unknown_settings
from sonde.packs.registry import load_packs

INSTALLED = load_packs()


def test_every_setting_a_pack_reads_is_taken_and_nothing_else() -> None:
    configured = {
        "redis": {"port": 6380, "prot": 6380, "show_values": True},
        "postgres": {"host": "db", "database": "app", "pasword": "x"},
        "nginxx": {"config": "/etc/nginx/nginx.conf"},
        "nginx": {"access_log": "/var/log/nginx/a.log"},
        "system": {"anything": 1},
    }
    assert unknown_settings(configured, INSTALLED) == [
        "packs.nginxx: no pack of that name is installed (docker, mysql, nginx, postgres, redis, system, systemd)",
        "packs.postgres.pasword: not a setting of the postgres pack (its settings: host, port, user, "
        "password, database, show_values)",
        "packs.redis.prot: not a setting of the redis pack (its settings: host, port, user, password, "
        "show_values)",
        "packs.system.anything: not a setting of the system pack (it has no settings)",
    ]
    assert unknown_settings({}, INSTALLED) == []


async def test_sonde_serve_says_them_on_stderr(tmp_path: Path) -> None:
    home = tmp_path / "sonde-home"
    home.mkdir(mode=0o700)
    (home / "config.json").write_text(json.dumps({"packs": {"redis": {"prot": 6380}}}))
    (home / "config.json").chmod(0o600)
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "sonde", "serve", "--json"],
            stdin=b"",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "SONDE_HOME": str(home)},
        )
    assert done.returncode == 0, done.stderr
    assert b"packs.redis.prot: not a setting of the redis pack" in done.stderr
    assert b": ignored" in done.stderr


async def test_with_no_config_file_a_refusal_names_the_one_that_would_be_read(tmp_path: Path) -> None:
    """With SONDE_HOME set and no config there, `sonde serve` said to add the directory to
    allowedPaths in "~/.sonde/config.json, or $SONDE_HOME's" (an operator-day review)."""
    home = tmp_path / "sonde-home"
    request = {
        "id": 1,
        "method": "tools/call",
        "params": {"name": "system.files.read", "input": {"path": "/srv/x"}},
    }
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "sonde", "serve", "--json"],
            stdin=json.dumps(request).encode() + b"\n",
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "SONDE_HOME": str(home)},
        )
    assert done.returncode == 0, done.stderr
    answer = [json.loads(line) for line in done.stdout.splitlines() if b'"id"' in line][-1]
    said = json.dumps(answer)
    assert f"allowedPaths in the agent's config ({home / 'config.json'})" in said, said
