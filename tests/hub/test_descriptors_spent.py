"""A hub out of file descriptors is told as such, not as a file it may not open."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import os, resource, sqlite3, sys
from pathlib import Path
from sonde.hub.db_errors import database_error
path = Path(sys.argv[1])
sqlite3.connect(path).close()  # a database that is there, and readable
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
try:
    while True:
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
try:
    sqlite3.connect(path).execute("SELECT 1")
except sqlite3.Error as exc:
    print(database_error(path, exc))
"""


def test_an_open_refused_for_want_of_descriptors_names_the_limit(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "sonde.db")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    # before: "... (unable to open database file): the user running this must be able to create, read
    # and write the data directory ...", a permission problem there was none of
    assert said.startswith(
        f"cannot open the hub's database {tmp_path / 'sonde.db'}: this process has all of its 64 file descriptors open"
    ), said
    assert "LimitNOFILE=" in said
