"""Every `sonde` command the README shows exists, and so does every flag it gives one.

The README is where an operator copies commands from; a renamed flag or
command there is a broken first five minutes. Each command line in its code
blocks, and each inline `sonde ...` span, is resolved against the real CLI's
``--help`` (the usage line names the command it resolved to).
"""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.e2e.procs import SONDE

README = Path(__file__).resolve().parent.parent / "README.md"
USAGE = re.compile(r"Usage: sonde((?: [a-z][a-z0-9-]*)*)")
MENTIONED = re.compile(r"sonde(?: [a-z][a-z-]*| --[a-z][a-z-]*)+")  # in a comment: words and flags only
NOT_COMMANDS = ("sonde hub listening on",)  # the hub's own output, shown in a code block


def readme_commands() -> list[str]:
    """The command lines of the README's code blocks and its inline `sonde ...` spans."""
    text = README.read_text()
    found: list[str] = []
    in_block = False
    pending = ""
    for line in text.splitlines():
        if line.startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            line = pending + line.strip()
            pending = ""
            if line.endswith("\\"):
                pending = line[:-1] + " "
                continue
            line, _, comment = line.partition(" # ")
            if line.startswith("sonde "):
                found.append(line.strip())
            found += [match.group(0) for match in MENTIONED.finditer(comment)]
    found += [span for span in re.findall(r"`(sonde [^`]*)`", text) if ":" not in span]
    return [command for command in dict.fromkeys(found) if not command.startswith(NOT_COMMANDS)]


@functools.cache
def help_of(words: tuple[str, ...]) -> str:
    done = subprocess.run([*SONDE, *words, "--help"], capture_output=True, text=True, timeout=60, check=False)
    return done.stdout + done.stderr


def resolve(tokens: list[str]) -> tuple[tuple[str, ...], str]:
    """The command the tokens name (the longest prefix of words the CLI knows) and its help."""
    # Words: neither a flag nor a flag's value (the README puts no argument after a switch).
    words = [
        token
        for before, token in zip(["", *tokens], tokens, strict=False)
        if not token.startswith("-") and not (before.startswith("--") and "=" not in before)
    ]
    for end in range(len(words), 0, -1):
        text = help_of(tuple(words[:end]))
        usage = USAGE.search(text)
        if usage and usage.group(1).split() == words[:end] and "Unknown command" not in text:
            if end < len(words) and not takes_arguments(text, usage):
                raise AssertionError(f"`sonde {' '.join(words[:end])}` has no command {words[end]!r}")
            return tuple(words[:end]), text
    raise AssertionError(f"no sonde command matches {' '.join(tokens)!r}")


def takes_arguments(text: str, usage: re.Match[str]) -> bool:
    """Whether the usage line names a positional argument (KEY_ID), not only COMMAND and OPTIONS."""
    line = text[usage.end() :].split("\n", 1)[0]
    names = (word.strip("[].") for word in line.split())
    return any(name.isupper() and name not in ("COMMAND", "OPTIONS") for name in names)


def test_the_readme_shows_commands() -> None:
    commands = readme_commands()
    assert len(commands) >= 15, commands  # the parser still finds them
    assert "sonde hub key create --name ops --role admin" in commands


@pytest.mark.parametrize("line", readme_commands())
def test_each_readme_command_and_its_flags_exist(line: str) -> None:
    tokens = shlex.split(line.replace("[", " ").replace("]", " "))[1:]
    words, text = resolve(tokens)
    assert words, f"{line!r} names no sonde command"
    for flag in (token.split("=")[0] for token in tokens if token.startswith("--")):
        assert re.search(rf"{re.escape(flag)}(?![\w-])", text), (
            f"`sonde {' '.join(words)}` has no {flag}: {line!r}"
        )
