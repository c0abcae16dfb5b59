"""nginx's log probes do no more work than their answer can carry, and stop when they give up.

Before, `nginx.logs.access` and `nginx.logs.error` tailed 2,000 lines of a long-lined log by
scrubbing all of them (31 MiB, 5 s, 53 to 175 MiB a call), answered with entries the size cap
then cut, and 16 calls at a 0.5 s deadline left 8 threads running 30 to 40 s past it (the
reader's own stop at its flag is `tests.packs.test_log_lines_bounded`'s to test).
"""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from sonde.packs.context import ProbeContext
from sonde.packs.executor import DEFAULT_MAX_RESULT_BYTES, execute_probe, json_size
from sonde.packs.nginx import PACK, probes
from sonde.packs.registry import PackRegistry
from sonde.packs.system.abandon import Abandoned
from sonde.packs.system.textfile import Limits, Lines
from tests.packs.given_up import cancel_once_entered, wait_threads_returned
from tests.packs.test_log_lines_bounded import SCRUBBER, CountingRedact, context

REGISTRY = PackRegistry.of([PACK])
LINES = 2000  # the most either probe reads
PAD = "x" * 8000  # past the line cap (4,096 characters)


def access_line(number: int, agent: str = "curl/8.5") -> str:
    return f'10.0.0.1 - - [06/May/2024:10:11:12 +0000] "GET /a/{number:04d} HTTP/1.1" 200 5 "-" "{agent}"\n'


def error_line(number: int, message: str = "upstream timed out") -> str:
    request = f"GET /a/{number:04d} HTTP/1.1"
    return f'2024/05/06 10:11:12 [error] 12#12: *{number} {message}, client: 10.0.0.1, request: "{request}"\n'


LOGS = {"nginx.logs.access": access_line, "nginx.logs.error": error_line}


def numbers(probe: str, result: dict[str, Any]) -> list[int]:
    """The line numbers of the entries listed, from their paths or connections."""
    if probe == "nginx.logs.error":
        return [entry["connection"] for entry in result["entries"]]
    return [int(entry["path"].removeprefix("/a/")) for entry in result["entries"]]


def write_log(path: Path, probe: str, count: int, text: str) -> Path:
    with path.open("w") as out:
        for number in range(count):
            out.write(LOGS[probe](number, text))
    return path


async def run(ctx: ProbeContext, probe: str, log: Path, **options: Any) -> Any:
    params = {"path": str(log), "lines": LINES}
    return await execute_probe(REGISTRY, probe, params, ctx, scrub=SCRUBBER.scrub_result, **options)


@pytest.mark.parametrize("probe", sorted(LOGS))
async def test_a_nginx_log_probe_scrubs_no_more_than_its_answer_can_carry(tmp_path: Path, probe: str) -> None:
    log = write_log(tmp_path / "long.log", probe, 4000, f"ua {PAD} password=abc")
    redact = CountingRedact()
    outcome = await run(context(tmp_path, redact), probe, log)
    assert redact.chars < 8 * DEFAULT_MAX_RESULT_BYTES, redact.chars  # not 2,000 lines of 4 KiB
    assert outcome.result["truncated"] is True  # the probe says it read fewer than asked
    assert outcome.truncated is True
    assert outcome.output_bytes <= DEFAULT_MAX_RESULT_BYTES
    found = numbers(probe, outcome.result)
    assert found == list(range(4000 - len(found), 4000))  # the newest, oldest first
    assert len(found) >= 50


@pytest.mark.parametrize("probe", sorted(LOGS))
async def test_a_nginx_log_probe_keeps_its_entries_within_the_answer(tmp_path: Path, probe: str) -> None:
    """Short lines make entries bigger than the lines: 2,000 of them are more than the answer holds,
    though the lines themselves are not."""
    log = write_log(
        tmp_path / "short.log", probe, LINES, "upstream timed out" if "error" in probe else "curl/8.5"
    )
    assert log.stat().st_size < DEFAULT_MAX_RESULT_BYTES - 20 * 1024
    outcome = await run(context(tmp_path, SCRUBBER.redacted), probe, log, max_result_bytes=1 << 30)
    assert json_size(outcome.result) <= DEFAULT_MAX_RESULT_BYTES  # no cap had to cut it
    assert outcome.result["truncated"] is True
    found = numbers(probe, outcome.result)
    assert found == list(range(LINES - len(found), LINES))
    assert len(found) >= 1000


@pytest.mark.parametrize("probe", [*sorted(LOGS), "nginx.status.summary"])
async def test_a_nginx_log_probe_past_its_deadline_stops_its_thread(
    tmp_path: Path, probe: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader (a fake that behaves as `tail_lines` does, stopping at its flag) gets a flag the
    probe sets when it gives up, so its thread stops instead of running on past the deadline."""
    log = write_log(tmp_path / "any.log", "nginx.logs.access", 1, "curl/8.5")
    entered, stopped = threading.Event(), []

    def reader(path: Path, count: int, *args: Any) -> Lines:
        limits = args[3] if len(args) > 3 else Limits()
        entered.set()
        stopped.append(limits.stop is not None and limits.stop.wait(30))
        raise Abandoned("the probe gave up on these lines")

    monkeypatch.setattr(probes, "tail_lines", reader)
    ctx = context(tmp_path, SCRUBBER.redacted)
    await cancel_once_entered(partial(run, ctx, probe, log), entered)
    await wait_threads_returned(ctx)
    assert stopped == [True]


async def test_a_cut_value_in_an_error_entry_says_how_much_was_left_out(tmp_path: Path) -> None:
    log = tmp_path / "error.log"
    line = error_line(7).replace("HTTP/1.1", PAD).rstrip("\n").removesuffix('"')
    log.write_text(line + "\n")
    outcome = await run(context(tmp_path, SCRUBBER.redacted), "nginx.logs.error", log)
    [entry] = outcome.result["entries"]
    assert entry["request"].endswith(f"xx… [line cut: {len(line) - 4095} more characters]")
    assert outcome.result["truncated"] is False
