"""A line probe counts the secrets it hid itself, judging a line as a line of its file.

Lines of a credential file whose secret only the file's name gives away (rsyncd.secrets,
sasl_passwd) come out of `system.logs.tail` already redacted, so the agent's last scrub finds
nothing more: the answer said ``"redactions": 0`` over ``"alice:[REDACTED]"`` while
`system.files.read` on the same file said 2. SECURITY.md: counts go in the metadata.
Only what is sent counts: `nginx.logs.error` counted the redactions of lines it never sends.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sonde.agent.scrubber import Scrubber
from sonde.packs.context import ProbeContext, ProbeSettings
from sonde.packs.executor import execute_probe
from sonde.packs.nginx import PACK as NGINX
from sonde.packs.registry import PackRegistry
from sonde.packs.system import PACK as SYSTEM

REGISTRY = PackRegistry.of([SYSTEM, NGINX])
REDACTED = "[REDACTED]"
CREDENTIAL_FILES = {
    "rsyncd.secrets": ["alice:S3cretRsyncPw", "bob:An0therRsyncPw"],
    "sasl_passwd": [
        "smtp.example.com alice:S3cretSaslPw",
        "[smtp.gmail.com]:587 bob@gmail.com:An0therSaslPw",
    ],
}
# nginx.logs.error sends no line it cannot parse (only how many), so nothing hidden to count there
LINE_PROBES = ["system.logs.tail", "system.logs.head", "nginx.logs.access"]


def sent_lines(probe: str, result: dict[str, object]) -> list[str]:
    if probe.startswith("system.logs."):
        return list(result["lines"])  # type: ignore[call-overload]
    return list(result["unparsed_lines"])  # type: ignore[call-overload]


@pytest.mark.parametrize("probe", LINE_PROBES)
@pytest.mark.parametrize("name", sorted(CREDENTIAL_FILES))
async def test_a_line_probe_counts_what_it_hid_as_files_read_does(
    tmp_path: Path, name: str, probe: str
) -> None:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in CREDENTIAL_FILES[name]))
    scrubber = Scrubber()
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(tmp_path),)), redact=scrubber.redacted)
    read = await execute_probe(
        REGISTRY, "system.files.read", {"path": str(path)}, ctx, scrub=scrubber.scrub_result
    )
    assert read.redactions == 2
    outcome = await execute_probe(REGISTRY, probe, {"path": str(path)}, ctx, scrub=scrubber.scrub_result)
    sent = json.dumps(outcome.result)
    assert "S3cret" not in sent
    assert "An0ther" not in sent
    hidden = sum(line.count(REDACTED) for line in sent_lines(probe, outcome.result))
    assert outcome.redactions == hidden == read.redactions, sent


async def test_lines_the_last_scrub_hides_are_counted_once(tmp_path: Path) -> None:
    """A line returned raw (the agent's last scrub hides it) is counted by that scrub alone."""
    path = tmp_path / "app.log"
    path.write_text("login password=hunter2x ok\nrsync alice:notasecret\n")
    scrubber = Scrubber()
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(tmp_path),)), redact=scrubber.redacted)
    outcome = await execute_probe(
        REGISTRY, "system.logs.tail", {"path": str(path)}, ctx, scrub=scrubber.scrub_result
    )
    assert outcome.result["lines"] == [f"login password={REDACTED} ok", "rsync alice:notasecret"]
    assert outcome.redactions == 1


KEY_BLOCK = [
    "-----BEGIN RSA PRIVATE KEY-----",
    "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun",
    "-----END RSA PRIVATE KEY-----",
]


@pytest.mark.parametrize(
    ("name", "lines"),
    [
        ("rsyncd.secrets", CREDENTIAL_FILES["rsyncd.secrets"]),  # no line an error entry
        ("error.log", ["2024/05/06 10:11:12 [error] 12#12: *1 loaded a key:", *KEY_BLOCK]),
    ],
)
async def test_the_error_log_counts_no_redaction_it_does_not_send(
    tmp_path: Path, name: str, lines: list[str]
) -> None:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    scrubber = Scrubber()
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(tmp_path),)), redact=scrubber.redacted)
    outcome = await execute_probe(
        REGISTRY, "nginx.logs.error", {"path": str(path)}, ctx, scrub=scrubber.scrub_result
    )
    sent = json.dumps(outcome.result)
    assert "MIIE" not in sent
    assert "S3cret" not in sent
    assert outcome.redactions == sent.count(REDACTED) == 0, sent


async def test_the_access_log_counts_the_unparsed_lines_it_sends_alone(tmp_path: Path) -> None:
    """25 lines of rsyncd.secrets: the access log sends 20 of them raw, each one secret hidden."""
    path = tmp_path / "rsyncd.secrets"
    path.write_text("".join(f"user{n}:S3cretRsyncPw{n}\n" for n in range(25)))
    scrubber = Scrubber()
    ctx = ProbeContext(ProbeSettings(allowed_paths=(str(tmp_path),)), redact=scrubber.redacted)
    outcome = await execute_probe(
        REGISTRY, "nginx.logs.access", {"path": str(path)}, ctx, scrub=scrubber.scrub_result
    )
    sent = json.dumps(outcome.result)
    assert len(outcome.result["unparsed_lines"]) == 20
    assert "S3cret" not in sent
    assert outcome.redactions == sent.count(REDACTED) == 20, sent
