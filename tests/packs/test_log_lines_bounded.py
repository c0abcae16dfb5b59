"""A line probe does no more work than its answer can carry, and stops when its probe gives up.

A review's file (4,000 lines of 8 KB, each ending in ``password=abc``) tailed 2,000 lines: the
agent scrubbed every one of them three times over (24 MB), built an 8 MB answer and cut it to
256 KiB, 4.7 s and 84 MB a call; 16 such calls left 14 threads running past their deadlines.
A line cut at `LINE_MAX_CHARS` ends with a marker saying how many characters were left out.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from sonde.agent.scrubber import Scrubber
from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import DEFAULT_MAX_RESULT_BYTES, execute_probe
from sonde.packs.nginx import PACK as NGINX
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK
from sonde.packs.system.linescrub import LINE_MAX_CHARS
from tests.packs.given_up import cancel_once_entered, wait_threads_returned

REGISTRY = PackRegistry.of([PACK, NGINX])
SCRUBBER = Scrubber()
LONG_LINE_BYTES = 8 * 1024
LONG_LINES = 4000


class CountingRedact:
    """The agent's own redaction, counting the characters it is given (the work a probe does)."""

    def __init__(self, redact: Callable[[str], str] = SCRUBBER.redacted) -> None:
        self.redact = redact
        self.chars = self.calls = 0

    def __call__(self, text: str) -> str:
        self.chars += len(text)
        self.calls += 1
        return self.redact(text)


def cut_mark(omitted: int) -> str:
    return f"… [line cut: {omitted} more characters]"


def long_lines_log(directory: Path) -> Path:
    log = directory / "long.log"
    with log.open("w") as out:
        for number in range(LONG_LINES):
            head = f"{number:05d} "
            out.write(head + "x" * (LONG_LINE_BYTES - len(head) - len("password=abc") - 1) + "password=abc\n")
    return log


def context(directory: Path, redact: Callable[[str], str]) -> ProbeContext:
    return ProbeContext(ProbeSettings(allowed_paths=(str(directory),)), redact=redact)


@pytest.mark.parametrize(("probe", "first"), [("system.logs.tail", 2000), ("system.logs.head", 0)])
async def test_a_line_probe_scrubs_no_more_than_its_answer_can_carry(
    tmp_path: Path, probe: str, first: int
) -> None:
    log = long_lines_log(tmp_path)
    redact = CountingRedact()
    outcome = await execute_probe(
        REGISTRY,
        probe,
        {"path": str(log), "lines": 2000},
        context(tmp_path, redact),
        scrub=SCRUBBER.scrub_result,
    )
    lines = outcome.result["lines"]
    # 2,000 lines of 4 KiB sent would be 8 MiB: what fits in the answer is about 60 of them
    assert redact.chars < 8 * DEFAULT_MAX_RESULT_BYTES, redact.chars
    assert outcome.result["truncated"] is True  # the probe says it gave fewer than asked
    assert outcome.truncated is True  # and so does the answer's metadata
    assert outcome.output_bytes <= DEFAULT_MAX_RESULT_BYTES
    cut = cut_mark(LONG_LINE_BYTES - 1 - (LINE_MAX_CHARS - 1))  # 8,191 characters, 4,095 kept
    assert all(line.endswith(cut) and len(line) == LINE_MAX_CHARS - 1 + len(cut) for line in lines)
    numbers = [int(line[:5]) for line in lines]
    if probe == "system.logs.tail":  # the newest lines, oldest first, up to the file's last
        assert numbers == list(range(LONG_LINES - len(lines), LONG_LINES))
    else:
        assert numbers == list(range(first, first + len(lines)))
    assert len(lines) >= 50


@pytest.mark.parametrize("probe", ["system.logs.tail", "system.logs.head"])
async def test_a_line_probe_past_its_deadline_stops_its_thread(tmp_path: Path, probe: str) -> None:
    """The worst case the budget leaves: a `contains` that every line matches until it is scrubbed
    (a guess at a secret), so 16 MiB are judged and nothing is kept."""
    log = tmp_path / "guesses.log"
    line = "y" * 1000 + " password=needle\n"
    log.write_text(line * (16 * 1024 * 1024 // len(line)))
    entered, release = threading.Event(), threading.Event()

    def held(text: str) -> str:
        entered.set()
        release.wait(30)
        return SCRUBBER.redacted(text)

    redact = CountingRedact(held)
    ctx = context(tmp_path, redact)
    params = {"path": str(log), "contains": "needle"}
    await cancel_once_entered(
        partial(execute_probe, REGISTRY, probe, params, ctx, scrub=SCRUBBER.scrub_result), entered
    )
    assert ctx.threads.stuck == 1
    calls = redact.calls
    release.set()
    await wait_threads_returned(ctx)
    assert redact.calls - calls <= 3  # it finished the judgement under way, then stopped


CUT_SECRETS = [
    ('password="{}"', "quoted secret that the cap cuts"),
    ("https://svc:{}@db.example", "UrlPasswordCutByTheCap"),
    ("password={}", "BareSecretCutByTheCap"),
]


@pytest.mark.parametrize("probe", ["system.logs.tail", "system.logs.head", "nginx.logs.access"])
@pytest.mark.parametrize(("shape", "secret"), CUT_SECRETS)
async def test_a_secret_cut_by_the_line_cap_is_hidden(
    tmp_path: Path, probe: str, shape: str, secret: str
) -> None:
    """The marker follows the scrubbed line: the secret stays hidden, the marker whole, and the
    redactions counted are those the answer shows."""
    log = tmp_path / "cut.log"
    text = " " + shape.format(secret)  # a word of its own: "zzzpassword=" names no password
    start = text.index(secret[0]) + 6  # the cap falls six characters into the secret
    line = "z" * (LINE_MAX_CHARS - 1 - start) + text
    log.write_text("ok\n" + line + "\nok\n")
    scrubber = Scrubber()
    outcome = await execute_probe(
        REGISTRY, probe, {"path": str(log)}, context(tmp_path, scrubber.redacted), scrub=scrubber.scrub_result
    )
    sent = json.dumps(outcome.result)
    assert secret[:6] not in sent
    cut = outcome.result["unparsed_lines" if probe.startswith("nginx") else "lines"][1]
    assert "[REDACTED]" in cut
    assert cut.endswith(cut_mark(len(line) - (LINE_MAX_CHARS - 1))[1:])
    assert outcome.redactions == sent.count("[REDACTED]") == 1


@pytest.mark.parametrize("probe", ["system.logs.tail", "system.logs.head"])
async def test_a_line_longer_than_the_scan_is_cut_alike_from_either_end(tmp_path: Path, probe: str) -> None:
    log = tmp_path / "one.log"
    log.write_text("é" * (6 * 1024 * 1024) + "\nlast\n")
    outcome = await execute_probe(REGISTRY, probe, {"path": str(log)}, context(tmp_path, SCRUBBER.redacted))
    lines = outcome.result["lines"]
    cut = "é" * (LINE_MAX_CHARS - 1) + cut_mark(6 * 1024 * 1024 - (LINE_MAX_CHARS - 1))
    assert lines[-2 if probe == "system.logs.tail" else 0] == cut


# Characters of three bytes, then of one: kept whole by either reader, then read past in part
# (past a tail's 16 KiB of a line, past a head's 64 KiB block); Windows line ends.
CUT_LINES = ["€" * 10_000, "ab" * 50_000, "€" * (LINE_MAX_CHARS + 1), "x" * LINE_MAX_CHARS]


@pytest.mark.parametrize("probe", ["system.logs.tail", "system.logs.head"])
async def test_a_cut_line_says_how_many_characters_were_left_out(tmp_path: Path, probe: str) -> None:
    log = tmp_path / "crlf.log"
    log.write_bytes("".join(line + "\r\n" for line in CUT_LINES).encode())
    outcome = await execute_probe(REGISTRY, probe, {"path": str(log)}, context(tmp_path, SCRUBBER.redacted))
    assert outcome.result["lines"] == [
        line[: LINE_MAX_CHARS - 1] + cut_mark(len(line) - (LINE_MAX_CHARS - 1)) for line in CUT_LINES[:3]
    ] + [CUT_LINES[3]]  # a line of exactly `LINE_MAX_CHARS` is whole
