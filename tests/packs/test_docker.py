"""The docker pack. No dockerd runs here, so:

- the parsers run on hand-recorded Engine API documents (recorded/hand/docker-*, API 1.45 shapes);
- the probes run for real, over a real unix socket, against a small Engine API stand-in
  that serves those documents with chunked HTTP/1.1 (h11) and records every request;
- with no socket at all, every probe answers "not available" cleanly.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import h11
import pytest
import trio

from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.docker import PACK
from sonde.packs.docker.engine import FRAME_HEADER_BYTES, demultiplex
from sonde.packs.docker.logtail import FrameTail, RawTail
from sonde.packs.docker.parsers import container, daemon_info, details, health_from_status, image, rfc3339
from sonde.packs.docker.probes import log_lines
from sonde.packs.docker.runbook import RUNBOOK, THRESHOLDS, build_runbook
from sonde.packs.docker.stats import ContainerStats, container_stats
from sonde.packs.executor import ProbeExecutionError, execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.runbook import Threshold
from sonde.packs.system.linescrub import LINE_MAX_CHARS

HAND = Path(__file__).parent / "recorded" / "hand"
REGISTRY = PackRegistry.of([PACK])
NAMES = ("web", "worker", "api", "migrate", "backup")


def document(name: str) -> Any:
    return json.loads((HAND / name).read_text())


CONTAINERS = document("docker-containers.json")
INSPECT = {name: document(f"docker-inspect-{name}.json") for name in NAMES}


# parsers


def test_container_rows_joined_with_inspect() -> None:
    rows = {c.name: c for c in (container(s, INSPECT[s["Names"][0][1:]]) for s in CONTAINERS)}
    web = rows["web"]
    assert (web.id, web.state, web.health, web.restart_count) == ("3f4e5d6c7b8a", "running", "healthy", 0)
    assert web.started_at == "2024-05-05T09:06:41+00:00"
    assert web.finished_at is None
    assert [(p.private_port, p.public_port) for p in web.ports] == [(80, 8080), (80, 8080)]
    assert (rows["worker"].state, rows["worker"].restart_count) == ("restarting", 17)
    assert rows["api"].health == "unhealthy"
    assert (rows["migrate"].state, rows["migrate"].exit_code) == ("exited", 1)
    assert rows["api"].ports[0].public_port is None


def test_health_read_from_the_status_text_when_not_inspected() -> None:
    assert health_from_status("Up 25 hours (healthy)") == "healthy"
    assert health_from_status("Up 3 seconds (health: starting)") == "starting"
    assert health_from_status("Exited (0) 2 hours ago") is None
    assert container(CONTAINERS[2], None).health == "unhealthy"


def test_rfc3339_with_nanoseconds_and_zero_time() -> None:
    assert rfc3339("2024-05-05T09:06:41.000000001Z") == "2024-05-05T09:06:41+00:00"
    assert rfc3339("2024-05-16T10:33:34.000000000+02:00") == "2024-05-16T08:33:34+00:00"
    assert rfc3339("0001-01-01T00:00:00Z") is None
    assert rfc3339("9999-12-31T23:59:59-01:00") is None  # the year 10000 in UTC


def test_inspect_summary_never_copies_environment_values() -> None:
    web = details(INSPECT["web"])
    assert (web.health, web.failing_streak, web.restart_policy) == ("healthy", 0, "unless-stopped")
    assert web.command == ["/docker-entrypoint.sh", "nginx", "-g", "daemon off;"]
    assert (web.memory_limit_bytes, web.cpu_limit, web.env_var_count) == (268435456, 0.5, 3)
    assert web.networks == {"shop_default": "172.18.0.3"}
    assert (web.compose_project, web.compose_service) == ("shop", "web")
    assert web.mounts[0].read_write is False
    assert "s3cr3t" not in web.model_dump_json()
    api = details(INSPECT["api"])
    assert (api.health, api.failing_streak, len(api.health_log)) == ("unhealthy", 4, 2)
    assert "Connection refused" in api.health_log[0].output
    assert details(INSPECT["worker"]).tty is True


def test_a_creation_time_past_the_year_9999_is_null() -> None:
    """An image's creation time is whatever its builder wrote: it must not fail the listing."""
    far = 300_000_000_000
    assert image({"Id": "sha256:" + "a" * 64, "Created": far}).created is None
    assert container({"Id": "b" * 64, "Created": far}, None).created is None


def test_images_and_daemon_info() -> None:
    images = [image(raw) for raw in document("docker-images.json")]
    assert images[1].tags == ["shop/api:5.0.0", "shop/api:latest"]
    assert images[2].tags == []
    assert images[2].containers == 2
    assert images[0].containers is None
    info = daemon_info(document("docker-info.json"), document("docker-version.json"))
    assert (info.server_version, info.api_version, info.cgroup_version) == ("26.1.3", "1.45", "2")
    assert (info.containers, info.running, info.stopped) == (5, 3, 2)


def test_stats_cgroup_v2() -> None:
    stats = container_stats(document("docker-stats-web.json"))
    assert stats.cpu_percent == 40.0  # 0.4 s of 4 s system time, times 4 CPUs
    assert stats.memory_used_bytes == 20971520 - 4194304
    assert stats.memory_percent == 6.25
    assert (stats.network_rx_bytes, stats.network_tx_bytes) == (1048576, 2097152)
    assert (stats.block_read_bytes, stats.block_write_bytes, stats.pids) == (4096000, 12288, 3)


def test_stats_cgroup_v1_without_a_previous_sample() -> None:
    stats = container_stats(document("docker-stats-api-cgroupv1.json"))
    assert stats.cpu_percent is None  # precpu is empty on the first sample
    assert stats.memory_used_bytes == 52428800 - 8388608
    assert (stats.block_read_bytes, stats.block_write_bytes) == (1000, 2000)
    assert stats.network_rx_bytes == 11


def test_stats_say_their_io_bytes_are_totals_since_the_container_started() -> None:
    """One stats answer has no previous network or block I/O reading: those counts are cumulative."""
    description = " ".join(PACK.probes["docker.containers.stats"].description.split())
    assert "totals since the container started, not rates" in description
    assert "one second of sampling" not in description
    for name in ("network_rx_bytes", "network_tx_bytes", "block_read_bytes", "block_write_bytes"):
        assert "since the container started" in str(ContainerStats.model_fields[name].description), name


def frame(stream: int, payload: bytes) -> bytes:
    return bytes((stream, 0, 0, 0)) + len(payload).to_bytes(4, "big") + payload


def feed_in_pieces(keeper: FrameTail | RawTail, data: bytes, size: int) -> bytes:
    for start in range(0, len(data), size):
        keeper.feed(data[start : start + size])
    return keeper.body()


@pytest.mark.parametrize("piece_bytes", [1, 7, 1000])
def test_frame_tail_keeps_the_newest_whole_frames(piece_bytes: int) -> None:
    stream = b"".join(frame(1 + n % 2, b"line %d\n" % n) for n in range(100))
    whole = FrameTail(10_000)
    assert feed_in_pieces(whole, stream, piece_bytes) == stream
    assert whole.truncated is False
    tail = FrameTail(100)
    kept = demultiplex(feed_in_pieces(tail, stream, piece_bytes))
    assert [payload for _, payload in kept] == [b"line %d\n" % n for n in range(94, 100)]
    assert (kept[0][0], kept[-1][0]) == ("stdout", "stderr")
    assert tail.truncated is True


def test_a_frame_larger_than_the_cap_keeps_its_last_whole_lines() -> None:
    tail = FrameTail(FRAME_HEADER_BYTES + 12)
    body = feed_in_pieces(tail, frame(1, b"first\nsecond\nthird\n") + frame(2, b""), 5)
    assert demultiplex(body) == [("stdout", b"third\n")]  # "cond\n" was half a line
    assert tail.truncated is True


def test_raw_tail_keeps_the_last_whole_lines() -> None:
    data = b"".join(b"line %d\n" % n for n in range(10))
    assert feed_in_pieces(RawTail(14), data, 3) == b"line 8\nline 9\n"  # cut at a line start
    assert feed_in_pieces(RawTail(16), data, 3) == b"line 8\nline 9\n"  # "7\n" was half a line
    assert feed_in_pieces(RawTail(100), data, 3) == data


def test_demultiplex_and_log_lines() -> None:
    payload = (HAND / "docker-logs-web.multiplexed.bin").read_bytes()
    assert [stream for stream, _ in demultiplex(payload)] == ["stdout", "stderr", "stdout"]
    lines = log_lines(payload, multiplexed=True)
    assert [(line.stream, line.text[:9]) for line in lines] == [
        ("stdout", "127.0.0.1"),
        ("stderr", "2024/05/0"),
        ("stdout", "line one"),
        ("stdout", "line two"),
    ]
    assert lines[0].time == "2024-05-06T10:10:58.100000000Z"
    assert demultiplex(payload[:-5])[-1][1].endswith(b"line")  # a cut frame is kept as far as it goes
    tty = log_lines((HAND / "docker-logs-worker.tty.txt").read_bytes(), multiplexed=False)
    assert [line.text for line in tty] == [
        "Traceback (most recent call last):",
        "ConnectionError: cache:6379 refused",
    ]


# runbook


def reading() -> dict[str, Any]:
    rows = [container(s, INSPECT[s["Names"][0][1:]]).model_dump() for s in CONTAINERS]
    return {"total": len(rows), "counts_by_state": {}, "containers": rows, "truncated": False}


def test_runbook_findings() -> None:
    found = [(f.severity, f.title) for f in RUNBOOK.evaluate({"docker.containers.list": reading()})]
    assert found == [
        ("critical", "Container api is unhealthy"),
        ("critical", "Container worker is restarting"),
        ("warning", "Container migrate exited with code 1"),
    ]


def test_runbook_restart_count_and_oom() -> None:
    rows = reading()
    web = next(r for r in rows["containers"] if r["name"] == "web")
    web["restart_count"] = 12
    backup = next(r for r in rows["containers"] if r["name"] == "backup")
    backup["oom_killed"] = True
    found = {(f.severity, f.title) for f in RUNBOOK.evaluate({"docker.containers.list": rows})}
    assert ("critical", "Container web has restarted 12 times") in found
    assert ("critical", "Container backup was killed for lack of memory") in found
    lenient = build_runbook({**THRESHOLDS, "restart_count": Threshold(warning=20, critical=50)})
    assert not any("web" in f.title for f in lenient.evaluate({"docker.containers.list": rows}))


# the probes, over a real unix socket


LONG_LOG_MESSAGES = 1200


def test_a_cut_log_line_says_how_much_was_left_out() -> None:
    stamp = b"2026-11-26T10:00:00.000000000Z "
    payload = stamp + b"x" * 5000 + b"\n" + stamp + b"short\n"
    cut, whole = log_lines(payload, multiplexed=False)
    left_out = len(stamp) + 5000 - (LINE_MAX_CHARS - 1)  # the stamp counts in the line's 4,096
    assert cut.text == "x" * (LINE_MAX_CHARS - 1 - len(stamp)) + f"… [line cut: {left_out} more characters]"
    assert whole.text == "short"


def long_log_lines(tail: int) -> list[bytes]:
    """The last ``tail`` of a log whose lines are ~5 KB each: 1000 of them are more than 4 MiB."""
    return [
        b"2024-05-06T10:00:00.%09dZ message %d %s\n" % (n, n, b"x" * 5000) for n in range(LONG_LOG_MESSAGES)
    ][-tail:]


def route(target: str) -> tuple[int, str, bytes]:
    """What the Engine API stand-in answers to ``target``."""
    parts = urlsplit(target)
    query = parse_qs(parts.query)
    segments = parts.path.strip("/").split("/")
    by_ref = {name: doc for name, doc in INSPECT.items()} | {doc["Id"]: doc for doc in INSPECT.values()}
    if parts.path == "/containers/json":
        rows = CONTAINERS if query.get("all") == ["1"] else [c for c in CONTAINERS if c["State"] == "running"]
        return 200, "application/json", json.dumps(rows).encode()
    if segments[0] == "containers" and len(segments) == 3 and segments[1] in by_ref:
        name = by_ref[segments[1]]["Name"].lstrip("/")
        if segments[2] == "json":
            return 200, "application/json", json.dumps(by_ref[segments[1]]).encode()
        if segments[2] == "logs" and name in ("api", "worker") and query["tail"] == ["1000"]:
            lines = long_log_lines(1000)
            if name == "worker":  # a TTY: the raw stream
                return 200, "application/vnd.docker.raw-stream", b"".join(lines)
            body = b"".join(frame(1 + n % 2, line) for n, line in enumerate(lines))
            return 200, "application/vnd.docker.multiplexed-stream", body
        if segments[2] == "logs" and name == "web":
            assert query["timestamps"] == ["1"]
            assert query["tail"] == ["50"]
            body = (HAND / "docker-logs-web.multiplexed.bin").read_bytes()
            return 200, "application/vnd.docker.multiplexed-stream", body
        if segments[2] == "logs" and name == "worker":
            return (
                200,
                "application/vnd.docker.raw-stream",
                (HAND / "docker-logs-worker.tty.txt").read_bytes(),
            )
        if segments[2] == "stats" and name in ("web", "api"):
            assert query["stream"] == ["false"]
            stats = {"web": "docker-stats-web.json", "api": "docker-stats-api-cgroupv1.json"}[name]
            return 200, "application/json", (HAND / stats).read_bytes()
    simple = {
        "/images/json": "docker-images.json",
        "/info": "docker-info.json",
        "/version": "docker-version.json",
    }
    if parts.path in simple:
        return 200, "application/json", (HAND / simple[parts.path]).read_bytes()
    return 404, "application/json", json.dumps({"message": f"No such container: {segments[-2]}"}).encode()


async def serve_engine(
    stream: trio.SocketStream,
    requests: list[tuple[str, str]],
    route: Callable[[str], tuple[int, str, bytes]] = route,
) -> None:
    connection = h11.Connection(h11.SERVER)
    async with stream:
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await stream.receive_some(65536))
                continue
            assert isinstance(event, h11.Request)
            requests.append((event.method.decode(), event.target.decode()))
            status, content_type, body = route(event.target.decode())
            response = h11.Response(status_code=status, headers=[("Content-Type", content_type)])
            data = bytearray(connection.send(response) or b"")
            for start in range(0, len(body), 1000):  # several chunks, to exercise chunked decoding
                data += connection.send(h11.Data(data=body[start : start + 1000])) or b""
            await stream.send_all(data + (connection.send(h11.EndOfMessage()) or b""))
            return


async def serve_socket(
    path: str, handler: Callable[[trio.SocketStream], Awaitable[None]], nursery: trio.Nursery
) -> ProbeContext:
    """Serve ``handler`` on a unix socket at ``path``; a context whose docker pack uses it."""
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind(path)
    sock.listen()
    await nursery.start(trio.serve_listeners, handler, [trio.SocketListener(sock)])
    return ProbeContext(ProbeSettings(packs={"docker": {"socket": path}}))


@pytest.fixture
async def engine(
    tmp_path: Path, nursery: trio.Nursery
) -> AsyncIterator[tuple[ProbeContext, list[tuple[str, str]]]]:
    requests: list[tuple[str, str]] = []

    async def handler(stream: trio.SocketStream) -> None:
        await serve_engine(stream, requests)

    return await serve_socket(str(tmp_path / "docker.sock"), handler, nursery), requests


async def run(ctx: ProbeContext, name: str, **params: Any) -> dict[str, Any]:
    return (await execute_probe(REGISTRY, name, params, ctx)).result


async def test_containers_list_over_the_socket(engine: tuple[ProbeContext, list[tuple[str, str]]]) -> None:
    ctx, requests = engine
    listed = await run(ctx, "docker.containers.list")
    assert listed["counts_by_state"] == {"exited": 2, "restarting": 1, "running": 2}
    assert [c["name"] for c in listed["containers"]] == list(NAMES)
    assert listed["containers"][1]["restart_count"] == 17
    assert {method for method, _ in requests} == {"GET"}
    findings = RUNBOOK.evaluate({"docker.containers.list": listed})
    assert {f.title for f in findings} >= {"Container worker is restarting", "Container api is unhealthy"}
    running = await run(ctx, "docker.containers.list", all=False, limit=1)
    assert (running["total"], len(running["containers"]), running["truncated"]) == (2, 1, True)


async def test_inspect_logs_images_info_stats(engine: tuple[ProbeContext, list[tuple[str, str]]]) -> None:
    ctx, requests = engine
    assert (await run(ctx, "docker.container.inspect", container="api"))["failing_streak"] == 4
    logs = await run(ctx, "docker.container.logs", container="web", lines=50)
    assert [line["stream"] for line in logs["lines"]] == ["stdout", "stderr", "stdout", "stdout"]
    tty_logs = await run(ctx, "docker.container.logs", container="worker", lines=50)
    assert tty_logs["lines"][-1]["text"] == "ConnectionError: cache:6379 refused"
    images = await run(ctx, "docker.images.list", limit=2)
    assert [i["size_bytes"] for i in images["images"]] == [412345678, 187694648]
    assert images["truncated"]
    assert (await run(ctx, "docker.daemon.info"))["server_version"] == "26.1.3"
    stats = await run(ctx, "docker.containers.stats")
    assert [s["name"] for s in stats["containers"]] == ["web", "api"]
    one = await run(ctx, "docker.containers.stats", container="web")
    assert one["containers"][0]["cpu_percent"] == 40.0
    assert all(method == "GET" for method, _ in requests)


@pytest.mark.parametrize("name", ["api", "worker"])
async def test_logs_past_the_size_cap_keep_the_newest_lines(
    engine: tuple[ProbeContext, list[tuple[str, str]]], name: str
) -> None:
    """The last 1000 lines are ~5 MB here: the newest that fit in 4 MiB come back, whole."""
    ctx, _ = engine
    params = {"container": name, "lines": 1000}
    # the probe's own answer, before the agent's 256 KiB result cap (which shortens lists its own way)
    outcome = await execute_probe(REGISTRY, "docker.container.logs", params, ctx, max_result_bytes=2**24)
    logs = outcome.result
    numbers = [int(line["text"].split()[1]) for line in logs["lines"]]
    assert numbers[-1] == LONG_LOG_MESSAGES - 1
    assert numbers == list(range(numbers[0], LONG_LOG_MESSAGES))
    assert 700 < len(numbers) < 1000
    assert all(line["time"] is not None and line["text"].startswith("message ") for line in logs["lines"])
    assert logs["truncated"] is True


async def test_unknown_container_is_refused_by_name(
    engine: tuple[ProbeContext, list[tuple[str, str]]],
) -> None:
    ctx, _ = engine
    with pytest.raises(ProbeExecutionError) as caught:
        await run(ctx, "docker.container.inspect", container="nosuch")
    assert caught.value.code == "refused"
    assert "No such container: nosuch" in caught.value.message


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("docker.containers.list", {}),
        ("docker.container.inspect", {"container": "web"}),
        ("docker.container.logs", {"container": "web"}),
        ("docker.images.list", {}),
        ("docker.daemon.info", {}),
        ("docker.containers.stats", {}),
    ],
)
async def test_without_docker_every_probe_is_unavailable(
    tmp_path: Path, name: str, params: dict[str, Any]
) -> None:
    ctx = ProbeContext(ProbeSettings(packs={"docker": {"socket": str(tmp_path / "absent.sock")}}))
    with pytest.raises(ProbeExecutionError) as caught:
        await run(ctx, name, **params)
    assert caught.value.code == "unavailable"
    assert "Docker is not available on this machine" in caught.value.message


async def test_a_dead_socket_file_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "stale.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # the file stays, nothing listens: a dockerd that died
    ctx = ProbeContext(ProbeSettings(packs={"docker": {"socket": str(path)}}))
    with pytest.raises(ProbeExecutionError) as caught:
        await run(ctx, "docker.daemon.info")
    assert caught.value.code == "unavailable"


def test_detection_follows_the_default_socket() -> None:
    detection = PACK.detection()
    assert detection.detected == Path("/var/run/docker.sock").exists()
    assert "docker.sock" in detection.reason


# sockets that are not a working Engine API


async def hang_up_at_once(stream: trio.SocketStream) -> None:
    await stream.aclose()  # the request is refused (EPIPE) or reset (ECONNRESET), as the race goes


async def hang_up_after_the_request(stream: trio.SocketStream) -> None:
    async with stream:
        await stream.receive_some(65536)  # the client sends its one request in one piece


async def greet_in_ssh(stream: trio.SocketStream) -> None:
    async with stream:
        await stream.receive_some(65536)
        await stream.send_all(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")


async def answer_garbage_lines(stream: trio.SocketStream) -> None:
    async with stream:
        await stream.receive_some(65536)
        await stream.send_all(b"hello there\r\n\r\n")


async def answer_html(stream: trio.SocketStream) -> None:
    connection = h11.Connection(h11.SERVER)
    async with stream:
        connection.receive_data(await stream.receive_some(65536))
        assert isinstance(connection.next_event(), h11.Request)
        body = b"<!doctype html><html><body>It works!</body></html>"
        data = connection.send(h11.Response(status_code=200, headers=[("Content-Type", "text/html")]))
        data = (data or b"") + (connection.send(h11.Data(data=body)) or b"")
        await stream.send_all(data + (connection.send(h11.EndOfMessage()) or b""))


@pytest.mark.parametrize(
    ("handler", "what"),
    [
        (hang_up_at_once, "closed the connection without answering"),
        (hang_up_after_the_request, "closed the connection without answering"),
        (greet_in_ssh, "answered something other than HTTP"),
        (answer_garbage_lines, "answered something other than HTTP"),
        (answer_html, "answered /info with something other than JSON (Content-Type text/html)"),
    ],
)
async def test_a_socket_that_is_no_engine_api_is_named_with_what_went_wrong(
    tmp_path: Path,
    nursery: trio.Nursery,
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    what: str,
) -> None:
    path = str(tmp_path / "odd.sock")
    ctx = await serve_socket(path, handler, nursery)
    with trio.fail_after(5), pytest.raises(ProbeExecutionError) as caught:
        await run(ctx, "docker.daemon.info")
    assert caught.value.code == "unavailable"
    assert caught.value.message.startswith(f"the socket {path} is not a working Docker Engine API: it {what}")


async def test_a_socket_path_that_cannot_be_connected_to_says_why(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    path = str(tmp_path / "file" / "docker.sock")  # configured through a regular file
    ctx = ProbeContext(ProbeSettings(packs={"docker": {"socket": path}}))
    with pytest.raises(ProbeExecutionError) as caught:
        await run(ctx, "docker.daemon.info")
    assert caught.value.code == "unavailable"
    assert caught.value.message == f"cannot connect to the Docker Engine API socket {path}: Not a directory"


async def test_stats_of_an_unknown_container_is_refused_by_name(
    engine: tuple[ProbeContext, list[tuple[str, str]]],
) -> None:
    """Not an ExceptionGroup from the sampling nursery: the Engine's own words."""
    ctx, _ = engine
    with pytest.raises(ProbeExecutionError) as caught:
        await run(ctx, "docker.containers.stats", container="nosuch")
    assert (caught.value.code, caught.value.message) == ("refused", "No such container: nosuch")


async def test_stats_on_a_socket_that_hangs_up_names_the_socket(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    path = str(tmp_path / "odd.sock")
    ctx = await serve_socket(path, hang_up_after_the_request, nursery)
    for params in ({"container": "web"}, {}):
        with pytest.raises(ProbeExecutionError) as caught:
            await run(ctx, "docker.containers.stats", **params)
        assert caught.value.code == "unavailable"
        assert caught.value.message.startswith(f"the socket {path} is not a working Docker Engine API")


async def test_stats_skip_a_container_removed_after_the_listing(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """As docker.containers.list does: the others' stats still come back."""
    listing = [*(c for c in CONTAINERS if c["State"] == "running"), {"Id": "9" * 64, "State": "running"}]

    def route_with_a_ghost(request_target: str) -> tuple[int, str, bytes]:
        if request_target == "/containers/json":
            return 200, "application/json", json.dumps(listing).encode()
        return route(request_target)

    async def handler(stream: trio.SocketStream) -> None:
        await serve_engine(stream, [], route_with_a_ghost)

    ctx = await serve_socket(str(tmp_path / "docker.sock"), handler, nursery)
    stats = await run(ctx, "docker.containers.stats")
    assert [s["name"] for s in stats["containers"]] == ["web", "api"]
