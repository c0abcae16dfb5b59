"""The nginx runbook judges a running nginx and its recent logs only.

Before, a stopped nginx gave no finding at all, and logs whose every line was 8 days old
(half 502s, 150 [error] lines) gave two critical ones; requests for missing files, which
nginx logs at [error], made a scanner alone a critical error-log finding. Here a real nginx
runs (then stops), writing after log lines the test put there dated 8 days ago.
"""

from __future__ import annotations

import datetime
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.nginx import process
from sonde.packs.nginx.logformat import judge_errors, parse_error_line
from sonde.packs.nginx.runbook import RUNBOOK
from sonde.packs.runbook import human_seconds
from tests.packs import test_nginx
from tests.packs.test_nginx import HAND, get, run, start_nginx

installed_nginx = test_nginx.nginx_binary  # its session fixture (installs nginx if missing), named here
OLD = datetime.timedelta(days=8, minutes=5)
OLD_ACCESS = 40  # half of them 502s
OLD_ERRORS = 150
MISSING = 12  # requests for files that do not exist, each an [error] line
REQUESTS = {"/ok": 22, "/broken": 3} | {f"/missing-{n}.png": 1 for n in range(MISSING)}


def access_line(when: datetime.datetime, path: str, status: int) -> str:
    stamp = when.astimezone().strftime("%d/%b/%Y:%H:%M:%S %z")
    return f'10.0.0.9 - - [{stamp}] "GET {path} HTTP/1.1" {status} 5 "-" "old-client"\n'


def error_line(when: datetime.datetime, number: int) -> str:
    stamp = when.astimezone().strftime("%Y/%m/%d %H:%M:%S")  # nginx writes its local time
    return (
        f"{stamp} [error] 77#77: *{number} upstream timed out (110: Connection timed out) while reading "
        'response header from upstream, client: 10.0.0.9, server: _, request: "GET /old HTTP/1.1", '
        'upstream: "http://10.0.0.1:9000/old"\n'
    )


def write_old_logs(logs: Path) -> None:
    when = datetime.datetime.now(datetime.UTC) - OLD
    with (logs / "access.log").open("w") as access:
        for number in range(OLD_ACCESS):
            access.write(access_line(when, "/old", 502 if number % 2 else 200))
    with (logs / "error.log").open("w") as errors:
        for number in range(OLD_ERRORS):
            errors.write(error_line(when, number))


@dataclass(frozen=True)
class Started:
    root: Path
    port: int
    process: subprocess.Popen[bytes]

    def context(self, **extra: str) -> ProbeContext:
        logs = self.root / "logs"
        settings = {
            "config": str(self.root / "nginx.conf"),
            "access_log": str(logs / "access.log"),
            "error_log": str(logs / "error.log"),
        }
        return ProbeContext(ProbeSettings(allowed_paths=(str(logs),), packs={"nginx": settings | extra}))


def start(binary: str, root: Path) -> Started:
    _, port, process = start_nginx(binary, root)
    return Started(root, port, process)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def aged(installed_nginx: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    """A running nginx whose logs begin with 8-day-old lines, then its own real traffic."""
    root = tmp_path_factory.mktemp("nginx-aged")
    (root / "logs").mkdir()
    write_old_logs(root / "logs")
    started = start(installed_nginx, root)
    try:
        statuses = {path: get(started.port, path) for path, times in REQUESTS.items() for _ in range(times)}
        assert statuses["/ok"] == 200
        assert statuses["/broken"] == 502
        assert statuses["/missing-0.png"] == 404
        yield started
    finally:
        stop(started.process)


# whether nginx runs


async def test_a_running_nginx_is_its_master_with_workers_and_sockets(aged: Started) -> None:
    status = await run(aged.context(), "nginx.process.status")
    assert status["running"] is True
    master = status["master"]
    assert master["pid"] == aged.process.pid
    assert master["config"] == str(aged.root / "nginx.conf")
    assert master["workers"] == 1
    assert {"address": "127.0.0.1", "port": aged.port} in master["listening"]
    assert master["listening_note"] is None
    started = datetime.datetime.fromisoformat(master["started"])
    assert started <= datetime.datetime.now(datetime.UTC)
    assert (status["pid_file"], status["pid_file_pid"]) == (str(aged.root / "nginx.pid"), aged.process.pid)
    assert RUNBOOK.evaluate({"nginx.process.status": status}) == []


async def test_another_configs_nginx_is_not_this_one(aged: Started, tmp_path: Path) -> None:
    other = tmp_path / "other.conf"
    other.write_text(f"pid {tmp_path}/other.pid;\nevents {{}}\n")
    status = await run(aged.context(config=str(other)), "nginx.process.status")
    assert (status["running"], status["pid_file"]) == (False, f"{tmp_path}/other.pid")
    assert aged.process.pid in status["other_masters"]
    [finding] = RUNBOOK.evaluate({"nginx.process.status": {**status, "enabled_at_boot": True}})
    assert (finding.severity, finding.title) == ("critical", "nginx is not running")
    assert f"PIDs {', '.join(map(str, status['other_masters']))}" in finding.detail


async def test_a_stopped_nginx_is_a_critical_finding(installed_nginx: str, tmp_path: Path) -> None:
    started = start(installed_nginx, tmp_path)
    stop(started.process)
    status = await run(started.context(), "nginx.process.status")
    assert (status["running"], status["master"], status["pid_file_pid"]) == (False, None, None)
    assert "does not exist" in status["pid_file_note"]
    [finding] = RUNBOOK.evaluate({"nginx.process.status": {**status, "enabled_at_boot": True}})
    assert (finding.severity, finding.title) == ("critical", "nginx is not running")
    assert str(tmp_path / "nginx.pid") in finding.detail
    # the same, where nothing starts nginx at boot: installed, maybe on purpose not serving
    [only_installed] = RUNBOOK.evaluate({"nginx.process.status": {**status, "enabled_at_boot": False}})
    assert (only_installed.severity, only_installed.title) == (
        "warning",
        "nginx is installed but not running, nor started at boot",
    )
    assert "`enabledPacks`" in only_installed.detail


async def test_a_killed_nginx_leaves_a_stale_pid_file_and_is_critical(
    installed_nginx: str, tmp_path: Path
) -> None:
    # SIGKILLed (the OOM killer, kill -9), nginx leaves its pid file naming a PID no nginx has:
    # a crash, so critical even where nothing starts nginx at boot
    started = start(installed_nginx, tmp_path)
    workers = psutil.Process(started.process.pid).children()
    assert workers  # killed too: a worker outlives its master and keeps the sockets
    for worker in workers:
        worker.kill()
    started.process.kill()
    started.process.wait(timeout=10)
    psutil.wait_procs(workers, timeout=10)
    status = await run(started.context(), "nginx.process.status")
    pid_file = tmp_path / "nginx.pid"
    assert (status["running"], status["master"], status["pid_file_pid"]) == (False, None, started.process.pid)
    assert status["pid_file_note"] == (
        f"{pid_file} names PID {started.process.pid}, which is no nginx master: a stale pid file"
    )
    [finding] = RUNBOOK.evaluate({"nginx.process.status": {**status, "enabled_at_boot": False}})
    assert (finding.severity, finding.title) == ("critical", "nginx is not running")
    assert "a stale pid file" in finding.detail


def test_started_at_boot_is_an_enabled_unit_or_a_start_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wants, rc2 = tmp_path / "multi-user.target.wants", tmp_path / "rc2.d"
    wants.mkdir()
    rc2.mkdir()
    patterns = (f"{tmp_path}/*.target.wants/nginx.service", f"{tmp_path}/rc[2-5].d/S[0-9][0-9]nginx")
    monkeypatch.setattr(process, "BOOT_LINKS", patterns)
    assert process.enabled_at_boot() is False
    (rc2 / "K01nginx").symlink_to("/etc/init.d/nginx")  # a stop link starts nothing
    assert process.enabled_at_boot() is False
    (rc2 / "S01nginx").symlink_to("/etc/init.d/nginx")
    assert process.enabled_at_boot() is True
    (rc2 / "S01nginx").unlink()
    (wants / "nginx.service").symlink_to("/lib/systemd/system/nginx.service")
    assert process.enabled_at_boot() is True


# the recent window of the logs


async def test_the_traffic_judged_is_the_recent_requests(aged: Started) -> None:
    summary = await run(aged.context(), "nginx.status.summary", lines=1000)
    assert (summary["requests"], summary["old"], summary["recent_minutes"]) == (
        sum(REQUESTS.values()),
        OLD_ACCESS,
        15,
    )
    assert summary["by_status_class"] == {"1xx": 0, "2xx": 22, "3xx": 0, "4xx": MISSING, "5xx": 3}
    assert summary["first_time"] < summary["last_time"]
    assert summary["last_age_s"] < 15 * 60
    [finding] = RUNBOOK.evaluate({"nginx.status.summary": summary})
    assert finding.title.endswith("of nginx requests end in a 5xx error")
    assert f"3 of the {sum(REQUESTS.values())} requests of the last 15 minutes" in finding.detail
    everything = await run(aged.context(), "nginx.status.summary", lines=1000, recent_minutes=None)
    assert (everything["requests"], everything["old"]) == (sum(REQUESTS.values()) + OLD_ACCESS, 0)


async def test_the_errors_judged_are_recent_and_no_missing_files(aged: Started) -> None:
    log = await run(aged.context(), "nginx.logs.error", lines=1000)
    recent = log["recent"]
    assert recent["counts_by_level"]["error"] == MISSING + 3
    assert (recent["missing_files"], recent["old"]) == (MISSING, OLD_ERRORS)
    [refused] = recent["upstream_errors"]
    assert (refused["error"], refused["count"]) == ("connect() failed (111: Connection refused)", 3)
    assert log["counts_by_level"]["error"] == OLD_ERRORS + MISSING + 3  # every line read
    [missing] = RUNBOOK.evaluate({"nginx.logs.error": log})  # 3 errors: under the warning's 10
    assert (missing.severity, missing.title) == (
        "info",
        f"{MISSING} requests for missing files in the nginx error log of the last 15 minutes",
    )


async def test_logs_with_only_old_lines_are_not_judged(aged: Started, tmp_path: Path) -> None:
    write_old_logs(tmp_path)
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(tmp_path),)))
    summary = await run(ctx, "nginx.status.summary", path=str(tmp_path / "access.log"), lines=1000)
    errors = await run(ctx, "nginx.logs.error", path=str(tmp_path / "error.log"), lines=1000)
    assert (summary["requests"], summary["old"]) == (0, OLD_ACCESS)
    assert (sum(errors["recent"]["counts_by_level"].values()), errors["recent"]["old"]) == (0, OLD_ERRORS)
    [stale] = RUNBOOK.evaluate({"nginx.status.summary": summary, "nginx.logs.error": errors})
    assert (stale.severity, stale.title) == (
        "info",
        "the access log's newest entry is 8.0 days old: no traffic, or it logs elsewhere",
    )


# pure parts


def test_the_hand_error_log_sorts_its_errors() -> None:
    entries = [parse_error_line(line) for line in (HAND / "nginx-error.log").read_text().splitlines()]
    judged = judge_errors([entry for entry in entries if entry is not None], None)
    assert (judged.missing_files, judged.old) == (1, 0)
    assert judged.upstream_errors == [
        ("connect() failed (111: Connection refused)", "http://127.0.0.1:9000/api/orders", 1),
        ("upstream timed out (110: Connection timed out)", "http://127.0.0.1:9000/api/orders", 1),
    ]
    since = datetime.datetime(2024, 5, 6, 10, 12)
    assert judge_errors([entry for entry in entries if entry is not None], since).old == 3


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (694_800, "8.0 days"),
        (86_400, "24.0 hours"),
        (7_300, "2.0 hours"),
        (960, "16.0 minutes"),
        (42, "42 s"),
        (None, "?"),
    ],
)
def test_ages_read_as_a_person_says_them(seconds: int | None, shown: str) -> None:
    assert human_seconds(seconds) == shown
