"""A hub whose database file is removed (or replaced) while it runs saves what it holds and stops.

SQLite writes on to the file it opened whatever became of its name: a review's hub answered
every call and write for as long as it ran after `rm sonde.db*`, said `ok` on /api/v1/health,
and lost the whole database when it stopped.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.e2e.procs import URL_LINE, running_hub, spawn

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

LOST = re.compile(r"everything the hub held, to this moment, is saved as (\S+sonde\.db\.lost-\S+)\.")


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_database_removed_or_replaced_under_the_hub_is_saved_and_the_hub_stops(
    tmp_path: Path, how: str
) -> None:
    with running_hub(tmp_path) as hub:
        database = hub.data_dir / "sonde.db"
        before = hub.cli("hub", "key", "create", "--name", "before")
        assert before.returncode == 0, before.stderr
        copy = tmp_path / "copy.db"
        shutil.copy(database, copy)  # an old copy: no key made after
        with hub.client() as http:  # written by the hub alone, after the loss: kept too
            for path in sorted(hub.data_dir.glob("sonde.db*")):
                path.unlink()
            if how == "replaced":
                shutil.copy(copy, database)
            made = http.post("/api/v1/api-keys", json={"name": "after"})
            assert made.status_code == 201, made.text
        saved = Path(hub.proc.wait_for(LOST, timeout=20).group(1))
        assert hub.proc.popen.wait(20) == 1
        assert (
            f"the hub's database {database} was {'removed' if how == 'removed' else 'replaced by another file'}"
            in hub.proc.output
        )
        assert saved.parent == hub.data_dir
        for path in hub.data_dir.glob("sonde.db*"):
            if path != saved:
                path.unlink()
        restored = hub.cli("hub", "restore", str(saved))
        assert restored.returncode == 0, restored.stderr
        keys = hub.cli("hub", "key", "list")
        assert "before" in keys.stdout, keys.stdout
        assert "after" in keys.stdout, keys.stdout  # what the hub wrote after the loss was saved too
        again = spawn(["hub", "--bind", "127.0.0.1:0", "--data-dir", str(hub.data_dir)], hub.env)
        try:
            again.wait_for(URL_LINE)
        finally:
            assert again.stop() == 0
