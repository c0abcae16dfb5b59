"""`sonde hub --audit-keep`: a prune the database refuses for a lasting reason makes
GET /api/v1/health answer ``degraded``, until a write works again.

The real `sonde hub` starts with a file-size limit (RLIMIT_FSIZE, set before it is exec'd,
lifted from outside with prlimit, as tests/e2e/test_database_unwritable_health.py does): nothing it writes at
start grows a file, but its prune at start must write, and fails as on a full disk. A
reader in this process keeps the database's -shm file, which every connection maps, in
place. Before, the prune's failure was a warning in the log and /health answered 200
``ok``: a prune that kept failing, and a disk filling up, were invisible to monitoring.
"""

from __future__ import annotations

import re
import resource
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.e2e.procs import SONDE, URL_LINE, RunningHub, base_env, running_hub, wait_until, watch
from tests.e2e.test_audit_retention import old_rows
from tests.e2e.test_database_unwritable_health import DISK_WORDS, TINY_FILES, degraded_for_a_while

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]

RETENTION_LINE = re.compile(r"sonde\.hub\.audit_retention: audit retention: (.*)")
# `python -c LIMITED SIZE ARGV...`: exec ARGV with no file of its to grow past SIZE bytes
LIMITED = (
    "import os, resource, sys; "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY)); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def test_a_prune_the_database_refuses_makes_health_degraded_until_a_write_works(tmp_path: Path) -> None:
    data_dir = tmp_path / "hubdata"
    old_rows(data_dir, 3000, age_days=3)  # first on the log: the prune must cut them, a write
    with running_hub(tmp_path) as first:  # makes the admin key: the next start writes nothing
        admin_key = first.admin_key
    reader = sqlite3.connect(data_dir / "sonde.db")
    try:
        reader.execute("SELECT count(*) FROM audit").fetchone()  # maps the -shm file, and keeps it
        env = base_env(tmp_path / "hubhome")
        argv = [sys.executable, "-c", LIMITED, str(TINY_FILES), *SONDE, "hub", "--bind", "127.0.0.1:0"]
        proc = watch([*argv, "--data-dir", str(data_dir), "--audit-keep", "2d"], env)
        try:
            hub = RunningHub(proc, proc.wait_for(URL_LINE).group(1), admin_key, data_dir, env)
            said = proc.wait_for(RETENTION_LINE).group(1)
            assert any(words in said for words in DISK_WORDS), said
            with hub.client() as http:
                answer = degraded_for_a_while(http, "pruning the audit log (--audit-keep)")
                resource.prlimit(proc.popen.pid, resource.RLIMIT_FSIZE, (-1, -1))
                wait_until(lambda: http.get("/api/v1/health").status_code == 200, timeout=10)
                assert http.get("/api/v1/health").json() == {"status": "ok", "version": answer["version"]}
        finally:
            proc.stop()
    finally:
        reader.close()
    log = proc.output
    assert len(re.findall(r"ERROR +sonde\.hub\.store: the hub cannot write its database \(", log)) == 1, log
    assert len(re.findall(r"sonde\.hub\.store: the hub's database takes writes again", log)) == 1, log
    assert "Traceback" not in log
