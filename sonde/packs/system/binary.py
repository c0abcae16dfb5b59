"""Whether a file is text: a sniff of its first (or last) bytes, as ``file`` guesses.

`system.files.read` and the log probes refuse a file whose start holds a NUL or is mostly
control characters, a run of NULs it starts or ends with aside (`looks_binary_past_holes`): a
log truncated while its writer held it open (logrotate's copytruncate) starts with one, and is
text after it; a file grown with ``truncate`` has one after its text. They read such files'
NULs as no text (`sonde.packs.system.rawlines`).
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

BINARY_SNIFF_BYTES = 8192
TEXT_CONTROL_BYTES = frozenset(b"\t\n\r\f\b\x1b")


def looks_binary(sample: bytes) -> bool:
    """True when ``sample`` holds a NUL byte or is mostly control characters (``file``-like)."""
    return b"\x00" in sample or mostly_control(sample)


def mostly_control(sample: bytes) -> bool:
    """More than 10 % of ``sample`` is control characters text does not hold."""
    control = sum(1 for byte in sample if byte < 0x20 and byte not in TEXT_CONTROL_BYTES)
    return control * 10 > len(sample)


def looks_binary_past_holes(sample: bytes) -> bool:
    """`looks_binary` of ``sample`` without the runs of NULs it starts and ends with."""
    return looks_binary(sample.strip(b"\x00"))


def refuse_binary_log(handle: BinaryIO, path: Path, size: int, at_end: bool) -> None:
    """ValueError when the `BINARY_SNIFF_BYTES` a line probe starts from (the file's last ones
    for a tail) `looks_binary_past_holes`: its lines would be noise (a wtmp, a journal file, an image)."""
    handle.seek(max(0, size - BINARY_SNIFF_BYTES) if at_end else 0)
    if looks_binary_past_holes(handle.read(BINARY_SNIFF_BYTES)):
        where = "its last" if at_end else "its first"
        raise ValueError(
            f"{path} looks like a binary file ({where} {BINARY_SNIFF_BYTES // 1024} KiB); only text logs are read"
        )
    handle.seek(0)
