"""The nginx pack: parsers on hand-recorded logs, then the probes against a real nginx.

nginx comes from Debian (nginx-light) and is installed by the session fixture when it
is missing and we are root; it is started on a free loopback port with a config in a
tmp directory that also holds its logs, which the tests add to the allowed paths. The
fixture sends real requests: successes, 404s, and 502s from a proxy to a closed port
(which also write upstream errors to the error log).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.nginx import PACK
from sonde.packs.nginx.configtest import permission_note
from sonde.packs.nginx.logformat import (
    parse_access_line,
    parse_config_test,
    parse_error_line,
    refused_files,
    summarize_access,
)
from sonde.packs.nginx.runbook import RUNBOOK, THRESHOLDS, build_runbook
from sonde.packs.registry import PackRegistry
from sonde.packs.runbook import Threshold, shown_number
from tests.conftest import require
from tests.packs.test_system_unprivileged import NOBODY, probe_as_nobody, unprivileged
from tests.ports import free_port

HAND = Path(__file__).parent / "recorded" / "hand"
REGISTRY = PackRegistry.of([PACK])
START_TIMEOUT_S = 10
REQUESTS = {"/ok": 22, "/missing.png": 2, "/broken": 3}


def hand(name: str) -> str:
    return (HAND / name).read_text()


# parsers


def test_combined_access_log() -> None:
    lines = hand("nginx-access-combined.log").splitlines()
    first = parse_access_line(lines[0])
    assert first is not None
    assert (first.address, first.method, first.path, first.status, first.bytes_sent) == (
        "127.0.0.1",
        "GET",
        "/",
        200,
        615,
    )
    assert first.time == "2024-05-06T08:11:12+00:00"
    assert first.user_agent == "curl/7.88.1"
    orders = parse_access_line(lines[1])
    assert orders is not None
    assert orders.path == "/api/orders"
    garbage = parse_access_line(lines[5])
    assert garbage is not None
    assert (garbage.method, garbage.status) == (None, 400)
    quoted = parse_access_line(lines[6])
    assert quoted is not None
    assert quoted.user_agent == 'agent with \\"quotes\\"'
    common = parse_access_line(lines[7])
    assert common is not None
    assert (common.status, common.user_agent) == (204, None)
    assert parse_access_line(lines[8]) is None
    no_bytes = parse_access_line(lines[9])
    assert no_bytes is not None
    assert no_bytes.bytes_sent == 0


@pytest.mark.parametrize("stamp", ["31/Dec/9999:23:59:59 -0100", "01/Jan/0001:00:00:00 +0100"])
def test_an_access_time_beyond_the_years_a_date_holds_is_null(stamp: str) -> None:
    line = f'10.0.0.1 - - [{stamp}] "GET / HTTP/1.1" 200 5 "-" "curl/8"'
    entry = parse_access_line(line)
    assert entry is not None
    assert (entry.time, entry.status) == (None, 200)


def test_access_summary() -> None:
    summary = summarize_access(hand("nginx-access-combined.log").splitlines(), top=3)
    assert (summary.lines, summary.requests, summary.unparsed) == (10, 9, 1)
    assert summary.by_status_class == {"1xx": 0, "2xx": 4, "3xx": 1, "4xx": 2, "5xx": 2}
    assert summary.server_error_percent == 22.22
    assert summary.top_paths[0] == ("/api/orders", 4, 2)
    assert summary.top_clients[0] == ("10.0.0.9", 3) or summary.top_clients[0] == ("10.0.0.7", 3)
    assert (summary.first_time, summary.last_time) == (
        "2024-05-06T08:11:12+00:00",
        "2024-05-06T08:11:20+00:00",
    )


def test_error_log() -> None:
    entries = [parse_error_line(line) for line in hand("nginx-error.log").splitlines()]
    refused = entries[0]
    assert refused is not None
    assert (refused.time, refused.level, refused.pid, refused.connection) == (
        "2024-05-06T10:11:14",
        "error",
        1234,
        5,
    )
    assert (refused.client, refused.request, refused.upstream) == (
        "10.0.0.7",
        "POST /api/orders HTTP/1.1",
        "http://127.0.0.1:9000/api/orders",
    )
    assert [e.level if e else None for e in entries] == [
        "error",
        "error",
        "error",
        "notice",
        "warn",
        "emerg",
        None,
    ]


def test_config_test_outputs() -> None:
    ok = parse_config_test(hand("nginx-t-ok.txt"))
    assert (ok.syntax_ok, ok.successful, ok.config_file, ok.messages) == (
        True,
        True,
        "/etc/nginx/nginx.conf",
        [],
    )
    failed = parse_config_test(hand("nginx-t-failed.txt"))
    assert (failed.syntax_ok, failed.successful) == (False, False)
    [message] = failed.messages
    assert (message.level, message.file, message.line) == ("emerg", "/etc/nginx/sites-enabled/shop", 3)
    assert message.text == 'unknown directive "sever"'
    real = parse_config_test((HAND.parent / "nginx-t-e-stderr-failed.txt").read_text())  # -e stderr style
    [emerg] = real.messages
    assert (emerg.level, emerg.text, emerg.file, emerg.line) == (
        "emerg",
        'unknown directive "sever_tokens"',
        "/tmp/b.conf",
        2,
    )
    unprivileged = parse_config_test(hand("nginx-t-unprivileged.txt"))
    assert (unprivileged.syntax_ok, unprivileged.successful) == (True, False)
    assert [m.level for m in unprivileged.messages] == ["warn", "emerg"]


def test_runbook_on_readings() -> None:
    failing = {
        "ok": False,
        "syntax_ok": False,
        "messages": [{"level": "emerg", "text": "unknown directive", "file": "/x", "line": 3}],
        "permission_problem": False,
    }
    [finding] = RUNBOOK.evaluate({"nginx.config.test": failing})
    assert (finding.severity, finding.title) == ("critical", "nginx config test fails")
    assert "unknown directive (/x:3)" in finding.detail
    denied = {**failing, "syntax_ok": True, "permission_problem": True, "note": "check it with sudo"}
    [refused] = RUNBOOK.evaluate({"nginx.config.test": denied})
    assert (refused.severity, refused.title) == ("info", "nginx config test cannot run as the agent's user")
    assert refused.detail == "check it with sudo"
    quiet = {"requests": 5, "server_error_percent": 80.0, "by_status_class": {"5xx": 4}, "top_paths": []}
    assert RUNBOOK.evaluate({"nginx.status.summary": quiet}) == []  # too few requests to judge


@pytest.mark.parametrize(
    ("recorded", "refused"),
    [
        ("nginx-t-unprivileged-pid.txt", ["/run/nginx.pid"]),  # nobody, Debian's nginx.conf
        ("nginx-t-unprivileged-logs.txt", ["/var/log/nginx/error.log"]),  # in adm: may read, not write
        ("nginx-t-read-only-run.txt", ["/run/nginx.pid"]),  # root under a read-only /run
        ("nginx-t-unprivileged-key.txt", ["/tmp/ngx/key.pem"]),
        ("nginx-t-unprivileged-include.txt", ["/tmp/ngx/secret.conf"]),
        ("nginx-t-unprivileged-broken.txt", []),  # a real error stays one, whoever runs the test
        ("nginx-t-e-stderr-failed.txt", []),
        ("hand/nginx-t-unprivileged.txt", ["/run/nginx.pid"]),
        ("hand/nginx-t-failed.txt", []),
        ("hand/nginx-t-ok.txt", []),
    ],
)
def test_a_test_failed_only_by_refused_files(recorded: str, refused: list[str]) -> None:
    assert refused_files(parse_config_test((HAND.parent / recorded).read_text())) == refused


def test_the_permission_note_says_how_to_check_instead() -> None:
    written = parse_config_test((HAND.parent / "nginx-t-unprivileged-pid.txt").read_text())
    note = permission_note(written, ["/run/nginx.pid"], "sonde")
    assert note is not None
    assert "could not open /run/nginx.pid for writing as user 'sonde'" in note
    assert "needs to write its pid file and open its log files" in note
    assert "`sudo nginx -t`" in note
    assert "adm" not in note
    read = parse_config_test((HAND.parent / "nginx-t-unprivileged-key.txt").read_text())
    note = permission_note(read, ["/tmp/ngx/key.pem"], "sonde")
    assert note is not None
    assert "could not read /tmp/ngx/key.pem as user 'sonde'" in note
    assert "`sudo nginx -t`" in note
    assert permission_note(written, [], "sonde") is None


# the real nginx


@pytest.fixture(scope="session")
def nginx_binary() -> str:
    if shutil.which("nginx") is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-q", "nginx-light"]
        if subprocess.run(install, env=env, capture_output=True, timeout=600, check=False).returncode != 0:
            subprocess.run(
                ["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600, check=False
            )
            subprocess.run(install, env=env, capture_output=True, timeout=600, check=False)
    found = shutil.which("nginx")
    require(found is not None, "nginx is not installed: apt-get install nginx-light")
    assert found is not None
    return found


def config(root: Path, port: int, closed_port: int) -> str:
    temp = root / "tmp"
    return f"""
{"user root;" if os.geteuid() == 0 else ""}
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/logs/error.log error;
events {{ worker_connections 64; }}
http {{
    access_log {root}/logs/access.log combined;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root}/www;
        location = /ok {{ return 200 "ok\\n"; }}
        location /broken {{ proxy_pass http://127.0.0.1:{closed_port}; }}
    }}
}}
"""


def get(port: int, path: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(f"GET {path} HTTP/1.0\r\nHost: sonde.test\r\nUser-Agent: sonde-tests\r\n\r\n".encode())
        response = b""
        while chunk := conn.recv(4096):
            response += chunk
    return int(response.split(b" ", 2)[1])


def wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert process.poll() is None, "nginx exited at start"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)  # a real process starting: nothing to wait on but its port
    raise AssertionError(f"nginx did not listen on {port} within {START_TIMEOUT_S}s")


@dataclass(frozen=True)
class Nginx:
    root: Path
    config: Path
    port: int
    statuses: dict[str, int]

    def context(self, **extra: Any) -> ProbeContext:
        logs = self.root / "logs"
        settings = {
            "config": str(self.config),
            "access_log": str(logs / "access.log"),
            "error_log": str(logs / "error.log"),
        }
        return ProbeContext(ProbeSettings(allowed_paths=(str(logs),), packs={"nginx": {**settings, **extra}}))


def start_nginx(binary: str, root: Path) -> tuple[Path, int, subprocess.Popen[bytes]]:
    """nginx on a free port with its files under ``root``, listening: its config, port and process."""
    for sub in ("logs", "tmp", "www"):
        (root / sub).mkdir(exist_ok=True)
    port = free_port()
    conf = root / "nginx.conf"
    conf.write_text(config(root, port, free_port()))
    with (root / "stderr.txt").open("wb") as stderr:
        process = subprocess.Popen([binary, "-c", str(conf), "-e", "stderr"], stderr=stderr)
    try:
        wait_listening(port, process)
    except BaseException:
        process.terminate()
        process.wait(timeout=10)
        raise
    return conf, port, process


@pytest.fixture(scope="module")
def nginx(nginx_binary: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    root = tmp_path_factory.mktemp("nginx")
    conf, port, process = start_nginx(nginx_binary, root)
    try:
        statuses = {path: get(port, path) for path, times in REQUESTS.items() for _ in range(times)}
        yield Nginx(root, conf, port, statuses)
    finally:
        process.terminate()
        process.wait(timeout=10)


async def run(ctx: ProbeContext, name: str, **params: Any) -> dict[str, Any]:
    return (await execute_probe(REGISTRY, name, params, ctx)).result


def test_the_traffic_got_the_expected_answers(nginx: Nginx) -> None:
    assert nginx.statuses == {"/ok": 200, "/missing.png": 404, "/broken": 502}


async def test_config_test_passes(nginx: Nginx) -> None:
    tested = await run(nginx.context(), "nginx.config.test")
    assert (tested["ok"], tested["syntax_ok"], tested["config_file"]) == (True, True, str(nginx.config))
    assert tested["version"]
    assert RUNBOOK.evaluate({"nginx.config.test": tested}) == []


async def test_config_test_failing_is_a_finding(nginx: Nginx) -> None:
    broken = nginx.root / "broken.conf"
    broken.write_text(
        nginx.config.read_text().replace("worker_processes 1;", "worker_processes 1;\nsever_tokens off;")
    )
    tested = await run(nginx.context(config=str(broken)), "nginx.config.test")
    assert (tested["ok"], tested["syntax_ok"]) == (False, False)
    [message] = [m for m in tested["messages"] if m["level"] == "emerg"]
    assert (message["file"], message["line"]) == (str(broken), 4)
    [finding] = RUNBOOK.evaluate({"nginx.config.test": tested})
    assert (finding.severity, finding.title) == ("critical", "nginx config test fails")
    assert 'unknown directive "sever_tokens"' in finding.detail


@unprivileged
def test_config_test_as_an_unprivileged_user_is_no_config_error(nginx_binary: str) -> None:
    root = Path(tempfile.mkdtemp(prefix="sonde-nginx-"))
    try:
        root.chmod(0o755)  # nobody may read the config, not write the pid or log files beside it
        for sub in ("logs", "tmp", "www"):
            (root / sub).mkdir()
        conf = root / "nginx.conf"
        conf.write_text(config(root, free_port(), free_port()).replace("user root;", ""))
        conf.chmod(0o644)
        found = probe_as_nobody("nginx.config.test", packs={"nginx": {"config": str(conf)}})
    finally:
        shutil.rmtree(root)
    tested = found["result"]
    assert (tested["ok"], tested["syntax_ok"], tested["permission_problem"]) == (False, True, True)
    assert f"as user '{NOBODY}'" in tested["note"]
    assert "`sudo nginx -t`" in tested["note"]
    [finding] = RUNBOOK.evaluate({"nginx.config.test": tested})
    assert (finding.severity, finding.detail) == ("info", tested["note"])


async def test_status_summary_and_the_5xx_finding(nginx: Nginx) -> None:
    summary = await run(nginx.context(), "nginx.status.summary", lines=1000)
    total = sum(REQUESTS.values())
    assert summary["requests"] == total
    assert summary["unparsed"] == 0
    assert summary["by_status_class"] == {"1xx": 0, "2xx": 22, "3xx": 0, "4xx": 2, "5xx": 3}
    assert summary["server_error_percent"] == round(3 * 100 / total, 2)
    assert summary["top_paths"][0] == {"path": "/ok", "requests": 22, "server_errors": 0}
    assert {"path": "/broken", "requests": 3, "server_errors": 3} in summary["top_paths"]
    assert summary["top_clients"] == [{"address": "127.0.0.1", "requests": total}]
    [finding] = RUNBOOK.evaluate({"nginx.status.summary": summary})
    assert finding.severity == "critical"
    assert (
        finding.title
        == f"{shown_number(summary['server_error_percent'])}% of nginx requests end in a 5xx error"
    )
    assert "/broken (3)" in finding.detail
    lenient = build_runbook(
        {**THRESHOLDS, "server_error_percent": Threshold(warning=20, critical=50, unit="%")}
    )
    assert lenient.evaluate({"nginx.status.summary": summary}) == []


async def test_error_log_names_the_upstream(nginx: Nginx) -> None:
    log = await run(nginx.context(), "nginx.logs.error", lines=100, min_level="error")
    upstream = [e for e in log["entries"] if e["upstream"]]
    assert len(upstream) == 3
    assert all(
        "Connection refused" in e["message"] and e["request"] == "GET /broken HTTP/1.0" for e in upstream
    )
    assert log["counts_by_level"]["error"] == 5  # 3 refused upstreams, 2 missing files
    assert log["recent"]["missing_files"] == 2
    [refused] = log["recent"]["upstream_errors"]
    assert (refused["error"], refused["count"]) == ("connect() failed (111: Connection refused)", 3)
    lower = build_runbook({**THRESHOLDS, "error_log_errors": Threshold(warning=3, critical=50)})
    [finding] = lower.evaluate({"nginx.logs.error": log})  # the missing files are no nginx error
    assert finding.title == "3 errors in the nginx error log of the last 15 minutes"
    assert "not counted: 2 requests for missing files" in finding.detail
    assert f"connect() failed (111: Connection refused) x3 ({refused['upstream']})" in finding.detail


async def test_access_log_tail(nginx: Nginx) -> None:
    log = await run(nginx.context(), "nginx.logs.access", lines=3)
    assert [e["path"] for e in log["entries"]] == ["/broken"] * 3
    assert all(e["status"] == 502 and e["user_agent"] == "sonde-tests" for e in log["entries"])


async def test_logs_outside_the_allow_list_are_refused(nginx: Nginx) -> None:
    with pytest.raises(ProbeExecutionError) as caught:
        await run(nginx.context(), "nginx.logs.access", path=str(nginx.config))
    assert caught.value.code == "refused"


async def test_without_nginx_the_config_test_names_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """As ping's answer does, and the README's "Optional commands" table says."""
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing installed
    with pytest.raises(ProbeExecutionError) as caught:
        await execute_probe(REGISTRY, "nginx.config.test", {}, ProbeContext())
    assert caught.value.code == "unavailable"
    assert caught.value.message == (
        "command 'nginx' is not installed on this machine (Debian and Ubuntu: apt install nginx)"
    )
