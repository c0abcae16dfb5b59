"""The scrubber on credential files read by a probe, password hashes and multi-line keys.

The corpus (`tests.security.scrub_corpus`) holds these shapes as single texts; here they come as
a probe answers them: a file's path first, then its content (system.files.read) or its lines
(system.logs.head/tail), each a string of its own.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from sonde.agent.scrubber import Scrubber
from sonde.packs.system.linescrub import redact_lines
from tests.security.scrub_corpus import (
    LIBRESWAN_RSA_PRIVATE,
    LIBRESWAN_RSA_PUBLIC,
    RSA_TEXT,
    RSA_TEXT_PRIVATE,
)

REDACTED = "[REDACTED]"


@pytest.fixture(scope="module")
def scrubber() -> Scrubber:
    return Scrubber()


# Files whose lines hold a secret in a field only the file's name says is one.
CREDENTIAL_FILES = [
    (
        "/etc/ppp/chap-secrets",
        [
            "# client\tserver\tsecret\tIP addresses",
            "alice\t*\tpw1_chap\t*",
            '"bob" pptpd "pw2 chap" 10.0.0.2',
        ],
        [
            "# client\tserver\tsecret\tIP addresses",
            f"alice\t*\t{REDACTED}\t*",
            f'"bob" pptpd "{REDACTED}" 10.0.0.2',
        ],
    ),
    ("/etc/ppp/pap-secrets", ["", "carol * pw1_pap"], ["", f"carol * {REDACTED}"]),
    (
        "/etc/rsyncd.secrets",
        ["alice:pw1_rsync", "# a group", "@backup:pw2 rsync"],
        [f"alice:{REDACTED}", "# a group", f"@backup:{REDACTED}"],
    ),
    (
        "/etc/postfix/sasl_passwd",
        ["smtp.example.com alice:pw1_sasl", "[smtp.gmail.com]:587 bob@gmail.com:pw2_sasl"],
        [f"smtp.example.com alice:{REDACTED}", f"[smtp.gmail.com]:587 bob@gmail.com:{REDACTED}"],
    ),
]


@pytest.mark.parametrize("field", ["content", "lines"])
@pytest.mark.parametrize(("path", "lines", "expected"), CREDENTIAL_FILES)
def test_a_result_reading_a_credential_file_hides_each_secret(
    scrubber: Scrubber, field: str, path: str, lines: list[str], expected: list[str]
) -> None:
    body: Any = lines if field == "lines" else "\n".join(lines) + "\n"
    hidden: Any = expected if field == "lines" else "\n".join(expected) + "\n"
    scrubbed, count = scrubber.scrub({"path": path, field: body, "truncated": False})
    assert scrubbed == {"path": path, field: hidden, "truncated": False}
    assert count == sum(line.count(REDACTED) for line in expected)
    assert "pw1" not in json.dumps(scrubbed)
    assert "pw2" not in json.dumps(scrubbed)
    assert scrubber.scrub(scrubbed) == (scrubbed, 0)


@pytest.mark.parametrize("field", ["content", "lines"])
def test_the_same_lines_in_another_file_stay(scrubber: Scrubber, field: str) -> None:
    """ "alice:x" and "a b c" lines are no secrets in a file not named as a credential file."""
    lines = ["alice:x1_not", "carol * x2_not", "smtp.example.com alice:x3_not"]
    body: Any = lines if field == "lines" else "\n".join(lines) + "\n"
    result = {"path": "/srv/app/notes.txt", field: body}
    assert scrubber.scrub(result) == (result, 0)


# A note of another shape (no "#") before a secret's line: a probe's answer names the file by its
# path, so every line of its content (or of its lines, read on from the first) is the file's.
NOTED_CREDENTIAL_FILES = [
    (
        "/etc/rsyncd.secrets",
        ["managed by puppet", "alice:pw1_rsync"],
        ["managed by puppet", f"alice:{REDACTED}"],
    ),
    (
        "/etc/postfix/sasl_passwd",
        ["smtp.example.com", "smtp.example.com alice:pw1_sasl"],
        ["smtp.example.com", f"smtp.example.com alice:{REDACTED}"],
    ),
    (
        "/etc/ppp/pap-secrets",
        ["see the_wiki", "carol * pw1_pap"],
        ["see the_wiki", f"carol * {REDACTED}"],
    ),
]


@pytest.mark.parametrize("field", ["content", "lines"])
@pytest.mark.parametrize(("path", "lines", "expected"), NOTED_CREDENTIAL_FILES)
def test_a_note_in_a_credential_file_read_by_its_path_hides_nothing_less(
    scrubber: Scrubber, field: str, path: str, lines: list[str], expected: list[str]
) -> None:
    body: Any = lines if field == "lines" else "\n".join(lines) + "\n"
    hidden: Any = expected if field == "lines" else "\n".join(expected) + "\n"
    assert scrubber.scrub({"path": path, field: body}) == ({"path": path, field: hidden}, 1)


def test_a_credential_files_run_ends_at_a_line_of_another_shape(scrubber: Scrubber) -> None:
    text = "==> /etc/ppp/chap-secrets <==\nalice * pw1_chap *\nThis line is prose, not a line of the file.\nx y z\n"
    assert scrubber.scrub_text(text) == (
        f"==> /etc/ppp/chap-secrets <==\nalice * {REDACTED} *\nThis line is prose, not a line of the file.\nx y z\n",
        1,
    )


# crypt(3) hashes of every scheme: the "$ID$" stays, the rest goes.
CRYPT_HASHES = [
    "$1$abcdefgh$I5tZm9u0Vhfq2nbQG1Jf/1",
    "$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/",
    "$md5$rounds=904$Vc3VgyFx$JBnE9X0iHv0A3Lbde.8ZZ.",
    "$5$saltsalt$5B8vYYiY.CVt1RlTTf8KbXBH3hsxY/GNooZF3CBTK36",
    "$6$rounds=656000$saltsalt$Jb0ZlOqY8hE0t0pbjd8.nPIjqA3mGAn1g8GTdYMb7e4d3q8K8C8nXq7pDGx9C9",
    "$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy",
    "$2b$12$KIXQJ1Q8pY3Z0i8yJH1Xe.aCPqJxK1W6vUqQ0O1lqX3lF3b7Yb5G2",
    "$2y$05$c4WoMPo3SXsafkva.HHa6uXQZWr7oboPiC2bT/r7q1BB8I2s0BRqC",
    "$y$j9T$F5Jx5fExrKuJdx0pxV8gq1$D2oDyzVBcBq6c2Z5Ba7lvjHTPjIVAybqI5dBgQdsF89",
    "$gy$j9T$F5Jx5fExrKuJdx0pxV8gq1$D2oDyzVBcBq6c2Z5Ba7lvjHTPjIVAybqI5dBgQdsF89",
    "$7$CU..../....saltsaltsalt$kFQnXsOvDb1rQhVMhYb0hT6fZDGd5Q4j5tYp1w0xB10",
    "$sha1$40000$jtNX3nZ2$hBNaIXkt4wBI2o5rsi8KejSjNqIq",
    "$argon2id$v=19$m=65536,t=3,p=4$c29tZXNhbHQ$RdescudvJCsgt3ub+b+dWRWJTmaaJObG",
]


@pytest.mark.parametrize("hash_", CRYPT_HASHES)
@pytest.mark.parametrize(
    "line", ["bob:{}:19800:0:99999:7:::", "bob:{}", "user bob password {}", '"hash": "{}"']
)
def test_a_crypt_hash_is_hidden_but_its_scheme(scrubber: Scrubber, hash_: str, line: str) -> None:
    scheme = hash_[: hash_.index("$", 1) + 1]
    scrubbed, count = scrubber.scrub_text(line.format(hash_))
    assert count == 1
    assert hash_[len(scheme) :] not in scrubbed
    assert scheme + REDACTED in scrubbed or "password " + REDACTED in scrubbed  # haproxy's hides it whole


def test_yes_or_no_after_using_password_stays_and_a_password_does_not(scrubber: Scrubber) -> None:
    for answer in ("YES", "NO"):
        denied = f"Access denied for user 'root'@'localhost' (using password: {answer})"
        assert scrubber.scrub_text(denied) == (denied, 0)
    assert scrubber.scrub_text("password: YES") == (f"password: {REDACTED}", 1)
    assert scrubber.scrub_text("using password: Hunter2x") == (f"using password: {REDACTED}", 1)


@pytest.mark.parametrize(
    ("encoded", "expected"),
    [
        ("%26password%3Dpw1x", f"%26password%3D{REDACTED}"),
        ("%3Fpass%3Dpw1x%26a%3D1", f"%3Fpass%3D{REDACTED}%26a%3D1"),
        ("%253Fapi_key%253Dpw1x%2526a", f"%253Fapi_key%253D{REDACTED}%2526a"),
        ("%3Fpwd%3Dpw1x&next=1", f"%3Fpwd%3D{REDACTED}&next=1"),
        ("%22token%22%3A%20%22pw1x%22", f"%22token%22%3A%20%22{REDACTED}%22"),
    ],
)
def test_a_percent_encoded_assignment_is_hidden_to_its_encoded_end(
    scrubber: Scrubber, encoded: str, expected: str
) -> None:
    assert scrubber.scrub_text(f"GET /x?next={encoded} HTTP/1.1") == (f"GET /x?next={expected} HTTP/1.1", 1)


OPENVPN_KEY = [
    "#",
    "# 2048 bit OpenVPN static key",
    "#",
    "-----BEGIN OpenVPN Static key V1-----",
    *["5feceb66ffc86f38d952786c6d696c79"] * 16,
    "-----END OpenVPN Static key V1-----",
    "remote vpn.example.com 1194",
]


@pytest.mark.parametrize("start", [0, 4, 10])
def test_tailed_lines_of_an_openvpn_key_are_hidden(scrubber: Scrubber, start: int) -> None:
    """Lines of a key block are hidden whatever line a tail starts at (its BEGIN line left out too)."""
    sent = redact_lines(OPENVPN_KEY[start:], scrubber.redacted)
    assert not any("5feceb66" in line for line in sent)
    assert sent[-1] == "remote vpn.example.com 1194"
    assert sent[: max(0, 3 - start)] == OPENVPN_KEY[start:3]  # the comments before the key stay


def test_lines_of_an_rfc4716_private_key_are_hidden(scrubber: Scrubber) -> None:
    lines = [
        "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----",
        'Comment: "rsa-key-20240501"',
        "P2/56wAAAi4AAAA3aWYtbW9kbntzaWdue3JzYS1wa2NzMS1zaGExfSxlbmNyeXB0e3JzYS",
        "---- END SSH2 ENCRYPTED PRIVATE KEY ----",
    ]
    sent = redact_lines(lines, scrubber.redacted, context=1)
    assert sent == [REDACTED] * 3


def test_a_key_block_inside_an_element_named_secret_is_counted_once(scrubber: Scrubber) -> None:
    """OpenVPN's inline <tls-auth> and <secret>: the block is hidden, its element not again."""
    block = (
        "-----BEGIN OpenVPN Static key V1-----\n"
        + "\n".join(OPENVPN_KEY[4:20])
        + "\n-----END OpenVPN Static key V1-----"
    )
    for element in ("tls-auth", "secret"):
        text = f"<{element}>\n{block}\n</{element}>\nkey-direction 1"
        assert scrubber.scrub_text(text) == (f"<{element}>\n{REDACTED}\n</{element}>\nkey-direction 1", 1)


# A private key printed as numbers (`openssl rsa -text -noout`; the corpus's throwaway key), its
# lines as a line-based probe returns them from any line on, without the lines before.
RSA_TEXT_LINES = RSA_TEXT.splitlines()
RSA_PRIVATE_HEX = [value for _, value in RSA_TEXT_PRIVATE]


def private_hex_shown(lines: list[str]) -> list[str]:
    """The lines of ``lines`` showing a byte pair of a private number's hex lines."""
    pairs = {pair for value in RSA_PRIVATE_HEX for line in value.split("\n") for pair in _pairs(line)}
    return [line for line in lines if pairs & set(_pairs(line))]


def _pairs(line: str) -> list[str]:
    """The runs of two bytes ("33:46") in a hex line (a single byte is too short to tell)."""
    octets = line.strip().strip(":").split(":")
    return [f"{a}:{b}" for a, b in itertools.pairwise(octets) if len(a) == len(b) == 2]


@pytest.mark.parametrize("start", range(len(RSA_TEXT_LINES)))
def test_tailed_lines_of_a_key_printed_as_numbers_hide_its_private_numbers(
    scrubber: Scrubber, start: int
) -> None:
    """From any line on: the label before a private number's hex lines, or (its label cut off)
    the label after them, says it is private. A tail starting inside the last number
    (coefficient, nothing of the key after it) reads as any hex block's: it is not told."""
    tail = [*RSA_TEXT_LINES[start:], "2024-05-06 10:00:00 worker 1 ok"]
    sent, _ = scrubber.scrub(redact_lines(tail, scrubber.redacted))
    if start <= RSA_TEXT_LINES.index("coefficient:"):
        assert private_hex_shown(sent) == []
    public = [i for i, line in enumerate(tail) if not private_hex_shown([line])]
    assert [sent[i] for i in public] == [tail[i] for i in public]  # labels, modulus, the log line stay


# FreeS/WAN's inline RSA key in ipsec.secrets: each private field on its own line.
IPSEC_SECRETS = [
    *LIBRESWAN_RSA_PUBLIC.splitlines(),
    *(f"\t{name}: {value}" for name, value in LIBRESWAN_RSA_PRIVATE),
    "\t}",
    '%any : PSK "pw1_ipsec"',
]
IPSEC_SECRETS_SENT = [
    *LIBRESWAN_RSA_PUBLIC.splitlines(),
    *(f"\t{name}: {REDACTED}" for name, _ in LIBRESWAN_RSA_PRIVATE),
    "\t}",
    f'%any : PSK "{REDACTED}"',
]


@pytest.mark.parametrize("start", range(len(IPSEC_SECRETS)))
def test_tailed_lines_of_an_inline_rsa_key_in_ipsec_secrets_are_hidden(
    scrubber: Scrubber, start: int
) -> None:
    """Each field's line says on its own that it is private: a tail from any line on hides what
    the whole file hides (the public half, its comments and braces stay)."""
    sent, _ = scrubber.scrub(redact_lines(IPSEC_SECRETS[start:], scrubber.redacted))
    assert sent == IPSEC_SECRETS_SENT[start:]
