"""A secret spanning lines is hidden on every line a line-based probe returns.

The agent scrubs a result's strings one by one, and a log probe returns each line as
its own string: a private key's body (BEGIN on one line, base64 on the next ones) and
a YAML block scalar's value (``password: |`` then the value below) went out whole.
The probes now scrub the lines they return as one text, with the lines before them as
context, and a key whose END line is returned hides every line up to it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from sonde.agent.scrubber import Scrubber
from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.docker.probes import log_lines
from sonde.packs.executor import execute_probe
from sonde.packs.nginx import PACK as NGINX
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK as SYSTEM
from sonde.packs.system.linescrub import redact_lines
from tests.security.scrub_corpus import RSA_BODY, RSA_TEXT

REGISTRY = PackRegistry.of([SYSTEM, NGINX])
SCRUBBER = Scrubber()
BLOCK_VALUE = "Zq9-block-scalar-value-77"
ORDINARY = [f"2024-05-06 10:{i:02d}:00 worker {i} ok" for i in range(40)]


def generated_key() -> list[str]:
    """A real PEM private key (openssl), or the corpus's RSA body when openssl is missing."""
    try:
        pem = subprocess.run(["openssl", "genrsa", "2048"], capture_output=True, check=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pem = f"-----BEGIN RSA PRIVATE KEY-----\n{RSA_BODY}\n-----END RSA PRIVATE KEY-----\n"
    return pem.strip().splitlines()


KEY = generated_key()
BODY = KEY[1:-1]
YAML = ["config:", "  password: |", f"    {BLOCK_VALUE}", f"    {BLOCK_VALUE}-2", "  user: app"]
LOG = ORDINARY[:20] + KEY + ORDINARY[20:30] + YAML + ORDINARY[30:]


def leaks(lines: list[str]) -> list[str]:
    secrets = [line for line in BODY if len(line) > 8] + [BLOCK_VALUE]
    return [line for line in lines if any(secret in line for secret in secrets)]


async def probe(tmp_path: Path, name: str, **params: Any) -> dict[str, Any]:
    ctx = ProbeContext(settings=ProbeSettings(allowed_paths=(str(tmp_path),)), redact=SCRUBBER.redacted)
    result = await execute_probe(REGISTRY, name, params, ctx, scrub=SCRUBBER.scrub_result)
    return result.result


def write(tmp_path: Path, lines: list[str], name: str = "app.log") -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize("probe_name", ["system.logs.head", "system.logs.tail"])
@pytest.mark.parametrize("count", [1, 3, 5, 12, 20, 28, 40, 60, 500])
async def test_head_and_tail_hide_key_bodies_and_block_values(
    tmp_path: Path, probe_name: str, count: int
) -> None:
    """Every window size: some start or end inside the key block or the YAML block."""
    path = write(tmp_path, LOG)
    lines = (await probe(tmp_path, probe_name, path=str(path), lines=count))["lines"]
    assert leaks(lines) == []
    assert len(lines) == min(count, len(LOG))
    expected = LOG[:count] if probe_name == "system.logs.head" else LOG[-count:]
    for sent, line in zip(lines, expected, strict=True):
        if line in ORDINARY or line in ("config:", "  user: app", "  password: |"):
            assert sent == line  # ordinary lines untouched, in their place


@pytest.mark.parametrize("probe_name", ["system.logs.head", "system.logs.tail"])
async def test_a_filter_matches_the_lines_as_sent(tmp_path: Path, probe_name: str) -> None:
    path = write(tmp_path, LOG)
    for guess in (BODY[3][:12], BODY[-1][-10:], BLOCK_VALUE, BLOCK_VALUE[:6]):
        assert (await probe(tmp_path, probe_name, path=str(path), lines=10, contains=guess))["lines"] == []
    found = await probe(tmp_path, probe_name, path=str(path), lines=100, contains="worker")
    assert found["lines"] == ORDINARY


async def test_a_tail_starting_inside_a_key_hides_its_body(tmp_path: Path) -> None:
    """The key's BEGIN line is further back than the scrubber's context reaches: the lines
    up to its END line are hidden all the same."""
    path = write(tmp_path, KEY[:1] + ["filler"] * 300 + KEY[1:] + ORDINARY[:3])
    lines = (await probe(tmp_path, "system.logs.tail", path=str(path), lines=8))["lines"]
    assert leaks(lines) == []
    assert lines[-3:] == ORDINARY[:3]


@pytest.mark.parametrize("count", [15, 60])
async def test_nginx_unparsed_lines_hide_a_key_body(tmp_path: Path, count: int) -> None:
    path = write(tmp_path, LOG)
    answer = await probe(tmp_path, "nginx.logs.access", path=str(path), lines=count)
    assert answer["unparsed_lines"]
    assert leaks(answer["unparsed_lines"]) == []


def test_docker_log_lines_hide_a_key_body() -> None:
    payload = "".join(f"2024-05-06T10:10:58.{i:09d}Z {line}\n" for i, line in enumerate(LOG)).encode()
    texts = [line.text for line in log_lines(payload, multiplexed=False, redact=SCRUBBER.redacted)]
    assert len(texts) == len(LOG)
    assert leaks(texts) == []
    assert texts[:20] == ORDINARY[:20]
    cut = payload.split(b"\n", 25)[-1]  # the window starts inside the key
    assert leaks([line.text for line in log_lines(cut, multiplexed=False, redact=SCRUBBER.redacted)]) == []


# ldapsearch's output: a userPassword in base64 ("::"), folded at 76 columns onto a line that
# starts with a blank; each line is its own string in a line-based probe's answer.
LDIF_HEAD = "userPassword:: e1NTSEE1MTJ9aHVudGVyMlE3WnhGb2xkZWRTc2hhNTEyTGRpZlZhbHVlVGhhd"
LDIF_FOLD = " ElzTG9uZ0Vub3VnaFRvV3JhcEF0NzZDb2x1bW5zPT0="
LDIF = [
    "# bob, people, example.com",
    "dn: uid=bob,ou=people,dc=example,dc=com",
    LDIF_HEAD,
    LDIF_FOLD,
    "uid: bob",
]


async def window_around(tmp_path: Path, probe_name: str, block: list[str], count: int) -> list[str]:
    """The ``count`` lines ``probe_name`` answers of a file holding ``block`` among ordinary lines."""
    text = ORDINARY[:10] + block + ORDINARY[10:12]
    path = write(tmp_path, text)
    lines: list[str] = (await probe(tmp_path, probe_name, path=str(path), lines=count))["lines"]
    assert len(lines) == min(count, len(text))
    return lines


@pytest.mark.parametrize("probe_name", ["system.logs.head", "system.logs.tail"])
@pytest.mark.parametrize("count", [4, 5, 13, 14, 30])
async def test_a_folded_ldif_password_is_hidden_on_each_of_its_lines(
    tmp_path: Path, probe_name: str, count: int
) -> None:
    """Windows that start or end on either line of the value, or hold both."""
    lines = await window_around(tmp_path, probe_name, LDIF, count)
    assert [line for line in lines if LDIF_HEAD[16:40] in line or LDIF_FOLD[5:30] in line] == []


def test_redact_lines_keeps_the_count_and_is_idempotent() -> None:
    sent = redact_lines(LOG, SCRUBBER.redacted)
    assert len(sent) == len(LOG)
    assert leaks(sent) == []
    scrubbed, _ = SCRUBBER.scrub(sent)  # the agent's last scrub (the BEGIN line is left to it)
    assert SCRUBBER.scrub(scrubbed) == (scrubbed, 0)
    assert leaks(scrubbed) == []
    assert redact_lines(LOG, SCRUBBER.redacted, context=25) == sent[25:]


# debconf's passwords.dat: a record per question (a blank line between records), its value two
# lines below its name; each line is its own string in a line-based probe's answer.
DEBCONF_VALUE = "hunter2-" + "debconf-Q7Zx"
DEBCONF = [
    "Name: mysql-server/root_password",
    "Template: mysql-server/root_password",
    f"Value: {DEBCONF_VALUE}",
    "Owners: mysql-server-8.0",
    "Flags: seen",
    "",
    "Name: tzdata/Areas",
    "Template: tzdata/Areas",
    "Value: Europe",
    "Owners: tzdata",
]


@pytest.mark.parametrize("probe_name", ["system.logs.head", "system.logs.tail"])
@pytest.mark.parametrize("count", [10, 11, 12, 13, 22])
async def test_a_debconf_password_record_hides_its_value_on_its_own_line(
    tmp_path: Path, probe_name: str, count: int
) -> None:
    """Windows that start on the record's Value, Template or Name line (the lines before are
    context), or end on its Value line."""
    lines = await window_around(tmp_path, probe_name, DEBCONF, count)
    assert [line for line in lines if DEBCONF_VALUE[4:] in line] == []
    if probe_name == "system.logs.tail":
        assert "Value: Europe" in lines  # the next record's value is not the password's


# passwords.dat's records, one whose question holds no secret word: passwords.dat holds answers
# of type password only, so every value a probe reads from it is hidden (the probe's answer names
# the file before its lines); config.dat holds none.
GENERATED_VALUE = "hunter2-" + "generated-Q7Zx"
DEBCONF_DB = [
    "Name: exampled/admin-password",
    "Template: exampled/admin-password",
    "Value: hunter2-admin",
    "Owners: exampled",
    "Flags: seen",
    "",
    "Name: exampled/internal/generated",
    "Template: exampled/internal/generated",
    f"Value: {GENERATED_VALUE}",
    "Owners: exampled",
    "Flags: seen",
    "Variables:",
    " site = example",
    "",
]


@pytest.mark.parametrize("probe_name", ["system.logs.head", "system.logs.tail"])
@pytest.mark.parametrize(
    ("count", "contains"), [(1, None), (4, None), (6, None), (9, None), (14, None), (3, "Value")]
)
async def test_every_value_a_line_probe_reads_from_passwords_dat_is_hidden(
    tmp_path: Path, probe_name: str, count: int, contains: str | None
) -> None:
    """Windows that start or end in either record, or hold both; the Value lines alone."""
    kept = [line for line in DEBCONF_DB if contains is None or contains in line]
    window = kept[:count] if probe_name == "system.logs.head" else kept[-count:]
    for name, hidden in (("passwords.dat", True), ("config.dat", False)):
        path = write(tmp_path, DEBCONF_DB, name)
        params: dict[str, Any] = {"path": str(path), "lines": count}
        if contains is not None:
            params["contains"] = contains
        lines = (await probe(tmp_path, probe_name, **params))["lines"]
        shown = [line for line in lines if GENERATED_VALUE[4:] in line]
        assert shown == ([] if hidden else [line for line in window if GENERATED_VALUE in line]), name


@pytest.mark.parametrize("probe_name", ["system.logs.head", "system.logs.tail"])
async def test_a_filter_cannot_confirm_a_guess_at_a_passwords_dat_value(
    tmp_path: Path, probe_name: str
) -> None:
    """The filter judges the lines as they will be sent: as lines of passwords.dat, every value
    hidden, so a guess at one matches nothing, right or wrong (config.dat's values are shown)."""
    for name, hidden in (("passwords.dat", True), ("config.dat", False)):
        path = write(tmp_path, DEBCONF_DB, name)
        for guess in (GENERATED_VALUE, "hunter2-wrong"):
            found = await probe(tmp_path, probe_name, path=str(path), lines=5, contains=guess)
            matched = hidden is False and guess == GENERATED_VALUE
            assert found["lines"] == ([f"Value: {GENERATED_VALUE}"] if matched else []), (name, guess)


async def test_every_value_files_read_reads_from_passwords_dat_is_hidden(tmp_path: Path) -> None:
    for name, hidden in (("passwords.dat", True), ("config.dat", False)):
        path = write(tmp_path, DEBCONF_DB, name)
        content = (await probe(tmp_path, "system.files.read", path=str(path)))["content"]
        assert (GENERATED_VALUE not in content) == hidden, name
        assert "Value: hunter2-admin" not in content  # its question's name says password


# Key blocks of other kinds whose BEGIN line a tail may leave out of reach: RFC 4716's (SSH.com's,
# PuTTY's export), OpenVPN's static key (tls-auth, tls-crypt) and tls-crypt-v2 client key.
SSH2_KEY = [
    "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----",
    'Comment: "rsa-key-20240501"',
    *[f"P2/56wAAAi4AAAA3aWYtbW9kbntzaWdue3JzYS1wa2NzMS1zaGExfSxlbmNyeXB0e3JzYS{i:04d}" for i in range(12)],
    "---- END SSH2 ENCRYPTED PRIVATE KEY ----",
]
OPENVPN_STATIC_KEY = [
    "-----BEGIN OpenVPN Static key V1-----",
    *[f"5feceb66ffc86f38d952786c6d69{i:04x}" for i in range(16)],
    "-----END OpenVPN Static key V1-----",
]
OPENVPN_TLS_CRYPT_V2_KEY = [
    "-----BEGIN OpenVPN tls-crypt-v2 client key-----",
    *[f"YmFzZTY0dGxzY3J5cHR2MmNsaWVudGtleWJvZHlsaW5lZm9ydGVzdGluZ3Bh{i:04d}" for i in range(8)],
    "-----END OpenVPN tls-crypt-v2 client key-----",
]


@pytest.mark.parametrize(
    "key", [SSH2_KEY, OPENVPN_STATIC_KEY, OPENVPN_TLS_CRYPT_V2_KEY], ids=["ssh2", "static", "tls-crypt-v2"]
)
@pytest.mark.parametrize("count", [5, 8, 12])
async def test_a_tail_starting_inside_any_key_block_hides_its_body(
    tmp_path: Path, key: list[str], count: int
) -> None:
    """The BEGIN line is further back than the scrubber's context reaches: the END line, whatever
    kind of key it ends, hides every line up to it."""
    path = write(tmp_path, key[:1] + ["filler"] * 300 + key[1:] + ORDINARY[:3])
    lines = (await probe(tmp_path, "system.logs.tail", path=str(path), lines=count))["lines"]
    body = key[1:-1]
    assert [line for line in lines if any(secret[-20:] in line for secret in body)] == []
    assert lines[-3:] == ORDINARY[:3]
    # docker's log lines, cut inside the key, alike
    payload = "".join(
        f"2024-05-06T10:10:58.{i:09d}Z {line}\n" for i, line in enumerate([*key[2:], *ORDINARY[:3]])
    )
    texts = [line.text for line in log_lines(payload.encode(), multiplexed=False, redact=SCRUBBER.redacted)]
    assert [text for text in texts if any(secret[-20:] in text for secret in body)] == []
    assert texts[-3:] == ORDINARY[:3]


def key_as_numbers() -> list[str]:
    """`openssl rsa -text -noout` of the generated key, or the corpus's text when openssl is missing."""
    try:
        text = subprocess.run(
            ["openssl", "rsa", "-text", "-noout"],
            input="\n".join(KEY) + "\n",
            capture_output=True,
            check=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        text = RSA_TEXT
    return text.strip().splitlines()


KEY_NUMBERS = key_as_numbers()
PRIVATE_LABELS = ("privateExponent:", "prime1:", "prime2:", "exponent1:", "exponent2:", "coefficient:")


def _private_number_indexes() -> list[int]:
    """The indexes of the hex lines of the key's private numbers (after a private label, up to the next label)."""
    private, indexes = False, []
    for index, line in enumerate(KEY_NUMBERS):
        if not line.startswith(" "):
            private = line in PRIVATE_LABELS
        elif private:
            indexes.append(index)
    return indexes


PRIVATE_INDEXES = _private_number_indexes()
PRIVATE_NUMBERS = [KEY_NUMBERS[index].strip() for index in PRIVATE_INDEXES]
NUMBERS_LOG = ORDINARY[:20] + KEY_NUMBERS + ORDINARY[20:]
PUBLIC_IN_LOG = (
    [True] * 20 + [index not in PRIVATE_INDEXES for index in range(len(KEY_NUMBERS))] + [True] * 20
)


def numbers_shown(lines: list[str]) -> list[str]:
    """The private hex lines (longer than a byte or two) that ``lines`` show."""
    return [line for line in lines if any(len(secret) > 8 and secret in line for secret in PRIVATE_NUMBERS)]


@pytest.mark.parametrize("probe_name", ["system.logs.head", "system.logs.tail"])
@pytest.mark.parametrize("count", [1, 3, 8, 20, 25, 35, 40, 50, 60, 70, 80, 100, 500])
async def test_head_and_tail_hide_a_keys_private_numbers(tmp_path: Path, probe_name: str, count: int) -> None:
    """A window starting or ending inside any of the numbers: the label before them is context
    (256 lines, more than a key's number takes), so only the private numbers' lines go; the
    labels, the public modulus and the log's lines stay in their place."""
    path = write(tmp_path, NUMBERS_LOG)
    lines = (await probe(tmp_path, probe_name, path=str(path), lines=count))["lines"]
    assert numbers_shown(lines) == []
    window = slice(None, count) if probe_name == "system.logs.head" else slice(-count, None)
    expected, public = NUMBERS_LOG[window], PUBLIC_IN_LOG[window]
    assert len(lines) == len(expected)
    assert [sent for sent, kept in zip(lines, public, strict=True) if kept] == [
        line for line, kept in zip(expected, public, strict=True) if kept
    ]


def test_docker_log_lines_cut_inside_a_keys_private_numbers_hide_them() -> None:
    """A container's log has no lines before its window: cut inside a private number, its lines
    are hidden by the label after them (the last number's, coefficient's, cannot be told)."""
    last = KEY_NUMBERS.index("coefficient:")
    for start in range(last + 1):
        payload = "".join(
            f"2024-05-06T10:10:58.{i:09d}Z {line}\n"
            for i, line in enumerate([*KEY_NUMBERS[start:], *ORDINARY[:3]])
        )
        texts = [
            line.text for line in log_lines(payload.encode(), multiplexed=False, redact=SCRUBBER.redacted)
        ]
        assert numbers_shown(texts) == [], start
        assert texts[-3:] == ORDINARY[:3]
