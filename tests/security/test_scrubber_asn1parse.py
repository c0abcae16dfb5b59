"""Private keys printed by ``openssl asn1parse``: real keys made here, every form the CLI prints.

The corpus (`tests.security.scrub_corpus`) holds fixed samples; these tests make keys with the
openssl CLI (skipped without it) and check, against the key's own numbers (``openssl pkey
-text``), that no private number shows once scrubbed, in whole texts, in windows of a file's
lines and in a container's log cut anywhere, while certificates come out untouched.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sonde.agent.scrubber import Scrubber
from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.docker.probes import log_lines
from sonde.packs.executor import execute_probe
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK as SYSTEM
from tests.conftest import require


@pytest.fixture(autouse=True)
def openssl_cli() -> None:
    require(shutil.which("openssl") is not None, "needs the openssl CLI (Debian's openssl package)")


SCRUBBER = Scrubber()
REDACTED = "[REDACTED]"
CHUNK_DIGITS = 16  # a private number shows if any 8 of its bytes in a row do
PRIVATE_LABEL = re.compile(r"(?:privateExponent|prime\d|exponent\d|coefficient\d?|priv|private-key):")
ORDINARY = [f"2024-05-06 10:{i:02d}:00 worker {i} ok" for i in range(30)]

KEYS = {
    "rsa": ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
    "rsa_three_primes": ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-pkeyopt", "rsa_keygen_primes:3"],
    "ec_p256": ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
    "ec_p521": ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-521"],
    "ed25519": ["-algorithm", "ED25519"],
    "ed448": ["-algorithm", "ED448"],
    "x25519": ["-algorithm", "X25519"],
    "x448": ["-algorithm", "X448"],
    "dh": ["-algorithm", "DH", "-pkeyopt", "group:ffdhe2048"],
}  # fmt: skip
FORMS = {"plain": [], "indented": ["-i"], "dump": ["-dump"], "indented_dump": ["-i", "-dump"]}


def openssl(*args: str, stdin: str | None = None) -> str:
    return subprocess.run(["openssl", *args], input=stdin, capture_output=True, check=True, text=True).stdout


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """PEM keys: each of `KEYS` in PKCS#8, the traditional RSA, EC (SEC 1) and DSA ones, an
    encrypted PKCS#8 one."""
    pems = {name: openssl("genpkey", *args) for name, args in KEYS.items()}
    for name in ("rsa", "rsa_three_primes", "ec_p256"):
        pems[f"{name}_traditional"] = openssl("pkey", "-traditional", stdin=pems[name])
    params = tmp_path_factory.mktemp("dsa") / "dsa.pem"
    params.write_text(
        openssl("genpkey", "-genparam", "-algorithm", "DSA", "-pkeyopt", "dsa_paramgen_bits:2048")
    )
    pems["dsa"] = openssl("genpkey", "-paramfile", str(params))
    pems["dsa_traditional"] = openssl("pkey", "-traditional", stdin=pems["dsa"])
    pems["ec_sec1"] = openssl("ecparam", "-genkey", "-noout", "-name", "secp384r1")
    pems["rsa_encrypted"] = openssl("pkey", "-aes256", "-passout", "pass:x", stdin=pems["rsa"])
    return pems


def private_numbers(pem: str) -> list[str]:
    """The key's private numbers (``openssl pkey -text``), as asn1parse prints them (uppercase hex)."""
    numbers: list[str] = []
    private = False
    for line in openssl("pkey", "-text", "-noout", stdin=pem).splitlines():
        if not line.startswith(" "):
            private = PRIVATE_LABEL.fullmatch(line.strip()) is not None
            if private:
                numbers.append("")
        elif private and re.fullmatch(r"[0-9a-f:]+", line.strip()):
            numbers[-1] += line.strip().replace(":", "").upper()
    return [number.lstrip("0") for number in numbers]


def shown_hex(text: str) -> str:
    """Every hex byte ``text`` shows: asn1parse's values and its dumps' bytes."""
    values = re.findall(r":-?([0-9A-F]{2,})", text)
    dumps = [line.split(" - ", 1)[1][:48] for line in re.findall(r"(?m)^ +[0-9a-f]{4} - .*$", text)]
    return " ".join(values) + " " + "".join(dumps).replace("-", "").replace(" ", "").upper()


def shows_a_private_number(text: str, numbers: list[str]) -> bool:
    hexes = shown_hex(text)
    return any(
        number[i : i + CHUNK_DIGITS] in hexes
        for number in numbers
        for i in range(0, len(number) - CHUNK_DIGITS, 2)
    )


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    "name",
    [*KEYS, "rsa_traditional", "rsa_three_primes_traditional", "ec_p256_traditional", "dsa", "dsa_traditional",
     "ec_sec1"],
)  # fmt: skip
def test_no_private_number_shows_in_any_form(keys: dict[str, str], name: str, form: str) -> None:
    printed = openssl("asn1parse", *FORMS[form], stdin=keys[name])
    numbers = private_numbers(keys[name])
    assert numbers
    assert shows_a_private_number(printed, numbers)  # the check can see them
    scrubbed, count = SCRUBBER.scrub_text(printed)
    assert count >= 1
    assert not shows_a_private_number(scrubbed, numbers)
    # every element's line stays, with its tag; only values are hidden
    assert [line.split(":", 1)[0] for line in scrubbed.splitlines() if ":d=" in line] == [
        line.split(":", 1)[0] for line in printed.splitlines() if ":d=" in line
    ]


@pytest.mark.parametrize("name", ["rsa_traditional", "dsa_traditional"])
def test_a_traditional_keys_public_numbers_stay(keys: dict[str, str], name: str) -> None:
    printed = openssl("asn1parse", stdin=keys[name])
    integers = [line for line in printed.splitlines() if "INTEGER" in line]
    public = integers[:3] if name == "rsa_traditional" else integers[:5]  # version, n, e / p, q, g, y
    scrubbed = SCRUBBER.redacted(printed).splitlines()
    assert [line for line in scrubbed if "INTEGER" in line][: len(public)] == public
    assert sum(REDACTED in line for line in scrubbed) == len(integers) - len(public)


def test_the_inner_key_of_strparse_is_hidden(keys: dict[str, str]) -> None:
    for name in ("rsa", "ec_p256", "ed25519", "x448"):
        offset = re.search(r"(?m)^ *(\d+):d=1 .*OCTET STRING", openssl("asn1parse", stdin=keys[name]))
        assert offset is not None
        printed = openssl("asn1parse", "-strparse", offset[1], stdin=keys[name])
        assert not shows_a_private_number(SCRUBBER.redacted(printed), private_numbers(keys[name])), name


def test_an_encrypted_keys_ciphertext_is_hidden_its_parameters_stay(keys: dict[str, str]) -> None:
    printed = openssl("asn1parse", stdin=keys["rsa_encrypted"])
    scrubbed, count = SCRUBBER.scrub_text(printed)
    assert count == 1
    assert scrubbed.splitlines()[:-1] == printed.splitlines()[:-1]  # PBES2, salt, iterations, IV


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("certs")
    pems = []
    for algorithm in ("rsa:2048", "ec"):
        key, cert = folder / "key.pem", folder / "cert.pem"
        extra = ["-pkeyopt", "ec_paramgen_curve:P-256"] if algorithm == "ec" else []
        openssl(
            "req", "-x509", "-newkey", algorithm, *extra, "-nodes", "-keyout", str(key), "-out", str(cert),
            "-days", "30", "-subj", "/CN=db-1.example.internal/O=Example",
            "-addext", "subjectAltName=DNS:db-1.example.internal,IP:10.0.0.7",
            "-addext", "keyUsage=digitalSignature,keyEncipherment", "-addext", "extendedKeyUsage=serverAuth",
        )  # fmt: skip
        pems.append(cert.read_text())
    return pems


@pytest.mark.parametrize("form", FORMS)
def test_certificates_come_out_untouched(certificates: list[str], form: str) -> None:
    for pem in certificates:
        printed = openssl("asn1parse", *FORMS[form], stdin=pem)
        assert SCRUBBER.scrub_text(printed) == (printed, 0)
        public_key = openssl("asn1parse", *FORMS[form], stdin=openssl("x509", "-pubkey", "-noout", stdin=pem))
        assert SCRUBBER.scrub_text(public_key) == (public_key, 0)


def test_a_certificates_lines_one_by_one_lose_only_their_long_values(certificates: list[str]) -> None:
    """A line scrubbed on its own has no context: its value is hidden when it holds 8 bytes or
    more (the serial, the key identifiers), as a cut key's would be. Names, OIDs, dates stay."""
    lines = openssl("asn1parse", stdin=certificates[1]).splitlines()
    scrubbed, _ = SCRUBBER.scrub(lines)
    for line, sent in zip(lines, scrubbed, strict=True):
        long_value = re.search(r"(?:INTEGER|OCTET STRING)\s+(?:\[HEX DUMP\])?:[0-9A-F]{16,}$", line)
        assert (sent != line) == (long_value is not None), line
    assert any("UTF8STRING        :db-1.example.internal" in line for line in scrubbed)


def key_log(pem: str) -> list[str]:
    return ORDINARY[:15] + openssl("asn1parse", stdin=pem).splitlines() + ORDINARY[15:]


async def probe(tmp_path: Path, name: str, **params: Any) -> dict[str, Any]:
    registry = PackRegistry.of([SYSTEM])
    ctx = ProbeContext(settings=ProbeSettings(allowed_paths=(str(tmp_path),)), redact=SCRUBBER.redacted)
    return (await execute_probe(registry, name, params, ctx, scrub=SCRUBBER.scrub_result)).result


@pytest.mark.parametrize("probe_name", ["system.logs.head", "system.logs.tail"])
async def test_windows_of_a_files_lines_hide_a_keys_private_values(
    tmp_path: Path, keys: dict[str, str], probe_name: str
) -> None:
    """Each line goes as a string of its own, scrubbed with the lines before it: cut anywhere,
    no private value shows; the short public exponent and the log's lines stay."""
    log = key_log(keys["rsa_traditional"])
    path = tmp_path / "keys.log"
    path.write_text("".join(line + "\n" for line in log))
    numbers = private_numbers(keys["rsa_traditional"])
    for count in range(1, 27):
        lines = (await probe(tmp_path, probe_name, path=str(path), lines=count))["lines"]
        assert not shows_a_private_number("\n".join(lines), numbers), count
        window = log[:count] if probe_name == "system.logs.head" else log[-count:]
        assert [line for line in lines if "worker" in line or ":010001" in line] == [
            line for line in window if "worker" in line or ":010001" in line
        ]


def test_a_containers_log_cut_inside_a_key_hides_its_private_values(keys: dict[str, str]) -> None:
    """A container's log has no lines before its window: cut anywhere, a private value shows
    nowhere (a line it cannot place is hidden when long, the public modulus too)."""
    log = openssl("asn1parse", "-i", stdin=keys["rsa_traditional"]).splitlines()
    numbers = private_numbers(keys["rsa_traditional"])
    for start in range(len(log)):
        payload = "".join(
            f"2024-05-06T10:10:58.{i:09d}Z {line}\n" for i, line in enumerate([*log[start:], *ORDINARY[:3]])
        )
        texts = [
            line.text for line in log_lines(payload.encode(), multiplexed=False, redact=SCRUBBER.redacted)
        ]
        sent, _ = SCRUBBER.scrub(texts)  # the agent's last scrub: each line on its own
        assert not shows_a_private_number("\n".join(sent), numbers), start
        assert sent[-3:] == ORDINARY[:3]
