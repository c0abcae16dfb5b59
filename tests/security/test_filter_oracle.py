"""A text filter cannot confirm a guess at a secret the answer redacts.

``contains`` (system.logs.*) and ``grep`` (systemd.journal.query) used to match
the raw text while the answer was scrubbed afterwards: asking for
``password=hunt`` returned the line (shown as ``password=[REDACTED]``) and
``password=hunx`` returned nothing, so a caller could read a redacted secret one
character at a time. Filters now match the text as it will be sent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from sonde.agent.daemon import AgentDaemon
from sonde.agent.scrubber import Scrubber
from sonde.packs.executor import execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK as SYSTEM
from sonde.packs.systemd.journal import grep_survives, parse_journal
from sonde.protocol.signing import new_private_key
from tests.agent.fakehub import agent_config

SECRET = "hunter2-" + "q7Zx"
LOG_LINES = [
    "boot ok",
    f"db login with password={SECRET} failed",
    "password rotation scheduled",
    f"fetch https://svc:{SECRET}@api.example/v1",
]
RIGHT_GUESSES = ("password=hunt", f"password={SECRET}", f"svc:{SECRET[:5]}", SECRET)
WRONG_GUESSES = ("password=hunx", f"svc:{SECRET[:4]}X")


def write_log(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "app.log"
    log.write_text("".join(line + "\n" for line in LOG_LINES))
    return log


def daemon_for(allowed: Path) -> AgentDaemon:
    config = agent_config("https://hub.example.com", new_private_key(), new_private_key())
    config = config.model_copy(update={"allowed_paths": [str(allowed)]})
    return AgentDaemon(config, PackRegistry.of([SYSTEM]), connect=None, rng=None, max_delay_s=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("probe", ["system.logs.tail", "system.logs.head"])
async def test_the_agents_log_filters_match_the_redacted_text(tmp_path: Path, probe: str) -> None:
    log = write_log(tmp_path / "logs")
    daemon = daemon_for(log.parent)

    async def lines(contains: str) -> list[str]:
        found = await execute_probe(
            daemon.registry, probe, {"path": str(log), "contains": contains}, daemon.ctx
        )
        return [str(line) for line in found.result["lines"]]

    for guess in (*RIGHT_GUESSES, *WRONG_GUESSES):
        assert await lines(guess) == [], guess  # right or wrong, a guess at the secret finds nothing
    # what the answer shows can still be searched for
    assert len(await lines("password")) == 2
    assert await lines("svc:") == [LOG_LINES[3]]  # the raw line; the runner scrubs it on the way out
    assert await lines("boot") == ["boot ok"]


async def test_serve_json_filters_match_the_redacted_text(tmp_path: Path) -> None:
    """The real `sonde serve --json`, with an agent config that allows the log's directory."""
    log = write_log(tmp_path / "applogs")
    home = tmp_path / "home"
    (home / ".sonde").mkdir(parents=True)
    config = home / ".sonde" / "config.json"
    config.write_text(json.dumps({"allowedPaths": [str(log.parent)]}))
    config.chmod(0o600)
    guesses = ("password=hunt", "password=hunx", "password")
    calls = [
        {
            "id": i,
            "method": "tools/call",
            "params": {"name": "system.logs.tail", "input": {"path": str(log), "contains": g}},
        }
        for i, g in enumerate(guesses)
    ]
    stdin = "".join(json.dumps(call) + "\n" for call in calls).encode()
    with trio.fail_after(20):
        done = await trio.run_process(
            [sys.executable, "-m", "sonde", "serve", "--json"],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "HOME": str(home)},
        )
    answers: dict[int, Any] = {}
    for line in done.stdout.decode().splitlines():
        answer = json.loads(line)
        if "id" in answer:
            answers[answer["id"]] = answer
    assert all(answers[i]["ok"] for i in range(len(guesses))), answers
    shown = [answers[i]["result"]["output"]["lines"] for i in range(len(guesses))]
    assert shown[0] == shown[1] == []
    assert shown[2] == ["db login with password=[REDACTED] failed", "password rotation scheduled"]
    assert SECRET not in done.stdout.decode()


def journal_output(*messages: str) -> str:
    return "".join(
        json.dumps({"__REALTIME_TIMESTAMP": str(1_700_000_000_000_000 + i), "MESSAGE": message}) + "\n"
        for i, message in enumerate(messages)
    )


@pytest.mark.parametrize(
    ("grep", "redacted_kept"),
    [
        ("password=hunt", []),  # journalctl matched the raw message; the answer would hide why
        ("password=h.*", []),
        (f"svc:{SECRET}", []),
        ("password", [1]),  # still true of the redacted text (all lower case: any case, as journalctl)
        ("PASSWORD", []),  # an upper-case pattern is case-sensitive, as journalctl has it
        ("svc:", [3]),
        ("boot[", []),  # regex syntax: only messages with nothing redacted are kept
        ("pass(word)? ", []),  # a regex, never run by the agent: the same
        ("login with password", [1]),  # a plain text containing a space is still a literal
    ],
)
def test_journal_grep_counts_only_matches_on_the_redacted_message(
    grep: str, redacted_kept: list[int]
) -> None:
    """Every message here stands for one journalctl's ``--grep`` picked; the agent judges them again."""
    messages = [LOG_LINES[0], LOG_LINES[1], "PASSWORD rotation scheduled", LOG_LINES[3]]
    nothing_redacted = [0, 2]  # journalctl's word on these stands: they are sent as they are
    entries, _ = parse_journal(
        journal_output(*messages), 10, "last", grep_survives(grep, Scrubber().redacted)
    )
    assert [messages.index(entry.message) for entry in entries] == sorted(nothing_redacted + redacted_kept)


def test_a_grep_built_to_backtrack_does_not_freeze_the_agent() -> None:
    """``^(?!.*\\[REDACTED)|(\\w+\\s?)*!`` matches any raw message at once in PCRE2 (its first
    branch), and in Python's ``re`` backtracks exponentially over the redacted one's long word:
    run there, it held the agent's event loop for minutes. It is never run there now."""
    grep = r"^(?!.*\[REDACTED)|(\w+\s?)*!"
    message = "db connect failed password=hunter2 request 4bf92f3577b34da6a3ce92aa1b2c3d4e"
    script = (
        "from sonde.agent.scrubber import Scrubber\n"
        "from sonde.packs.systemd.journal import grep_survives\n"
        f"print(grep_survives({grep!r}, Scrubber().redacted)({message!r}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr


# Credential files whose lines' secrets only the file's name tells: a note of another shape
# before them ended the run of the file's lines, so a filter judging them (the probe's other lines
# left out) matched a right guess at the secret, and the lines sent (that note among them) showed it.
CREDENTIAL_FILES = {
    "rsyncd.secrets": ["# rsync users", "managed by puppet", f"alice:{SECRET}", "@backup:other-pw1"],
    "sasl_passwd": ["smtp.example.com", f"smtp.example.com alice:{SECRET}"],
    "chap-secrets": ["# client server secret IP", "managed by puppet: do not edit", f"alice * {SECRET} *"],
    "pap-secrets": ["managed by puppet: do not edit", f'"alice" pptpd "{SECRET}" 10.0.0.2'],
}
CREDENTIAL_GUESSES = (SECRET, SECRET[:5], f"alice:{SECRET[:3]}", "hunx", "alice:hunx", f"* {SECRET[:4]}")


@pytest.mark.parametrize("probe", ["system.logs.tail", "system.logs.head"])
@pytest.mark.parametrize("name", CREDENTIAL_FILES)
async def test_a_filter_cannot_confirm_a_guess_at_a_credential_files_secret(
    tmp_path: Path, probe: str, name: str
) -> None:
    directory = tmp_path / "etc"
    directory.mkdir()
    path = directory / name
    path.write_text("".join(line + "\n" for line in CREDENTIAL_FILES[name]))
    daemon = daemon_for(directory)
    scrubber = Scrubber()

    async def lines(contains: str | None) -> list[str]:
        params: dict[str, Any] = {"path": str(path)}
        if contains is not None:
            params["contains"] = contains
        found = await execute_probe(daemon.registry, probe, params, daemon.ctx)
        sent, _ = scrubber.scrub(found.result)  # as the runner sends it
        return [str(line) for line in sent["lines"]]

    for guess in CREDENTIAL_GUESSES:
        assert await lines(guess) == [], guess  # right or wrong, a guess at the secret finds nothing
    everything = await lines(None)
    assert len(everything) == len(CREDENTIAL_FILES[name])
    assert not any(SECRET[:6] in line or "other-pw1" in line for line in everything), everything
    assert [line for line in everything if "alice" in line] == await lines("alice")
    assert all("[REDACTED]" in line for line in await lines("alice"))
