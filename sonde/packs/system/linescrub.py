"""How lines of a text are sent: scrubbed as one text, each as a line of its file.

`redact_lines` scrubs consecutive lines as ONE text, so a secret spanning lines (a key block,
a YAML block scalar) is hidden on each of them, then says line for line what is sent.
`as_lines_of` reads each text as lines of a named file, so a rule keyed by the file's name
(rsyncd's secrets, postfix's sasl_passwd) hides in every line what it hides in the file.
A line sent already redacted (the agent's last scrub then finds nothing more in it) has its
redactions counted with the probe's `RedactionTally`, so the answer's count says what was hidden.
A line cut short (`CutLine`) is sent scrubbed, then `marked` with how much of it was left out:
the marker comes after every scrub but the last, which finds nothing more in such a line, so it
never swallows the marker nor counts it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sonde.packs.context import unredacted
from sonde.packs.executor import RedactionTally
from sonde.protocol.names import REDACTED

# A key block's END line: a private key's (PEM, OpenSSH, PGP), RFC 4716's (SSH.com's "---- END
# SSH2 ENCRYPTED PRIVATE KEY ----") and OpenVPN's static and tls-crypt-v2 keys' ("-----END OpenVPN
# Static key V1-----"). Found without its BEGIN line, it hides every line up to it.
_KEY_END = re.compile(
    r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----|---- END[ A-Z0-9]{0,40}PRIVATE KEY ----"
    r"|-----END OpenVPN [A-Za-z0-9 -]{1,40}-----"
)


LINE_MAX_CHARS = 4096  # of a line sent: a longer one is cut (`decode_line`)
CUT_MARK = " [line cut: {} more characters]"  # after a cut line's "…"
UTF8_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))  # a character's bytes after its first


class CutLine(str):
    """A line cut to its start (ending in "…"): ``omitted`` counts the characters left out."""

    omitted: int

    def __new__(cls, text: str, omitted: int) -> CutLine:
        line = super().__new__(cls, text)
        line.omitted = omitted
        return line


def marked(line: str) -> str:
    """``line`` as sent: a `CutLine` (already scrubbed) ends with `CUT_MARK`, saying how much is left out."""
    return line + CUT_MARK.format(line.omitted) if isinstance(line, CutLine) else line


def decode_line(raw: bytes, dropped_chars: int = 0) -> str:
    """``raw`` as text, a `CutLine` (its first characters and "…") when longer than `LINE_MAX_CHARS`
    with the ``dropped_chars`` read past and not kept."""
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    if len(text) + dropped_chars <= LINE_MAX_CHARS:
        return text
    return CutLine(text[: LINE_MAX_CHARS - 1] + "…", len(text) + dropped_chars - LINE_MAX_CHARS + 1)


def utf8_chars(data: bytes, line_end: bool = False) -> int:
    """The characters in ``data`` (its bytes but UTF-8's continuation ones), a CR before the end of a
    line (``line_end``) aside."""
    if line_end:
        data = data.removesuffix(b"\r")
    return len(data.translate(None, UTF8_CONTINUATION_BYTES))


def as_lines_of(path: Path, redact: Callable[[str], str]) -> Callable[[str], str]:
    """``redact`` reading each text as lines of ``path``, as the agent's last scrub reads an
    answer that names its file before its lines: a rule keyed by the file (every value of
    debconf's passwords.dat, every line's secret in rsyncd's secrets or postfix's sasl_passwd)
    hides in the lines a filter judges what it hides in the lines sent, so a `contains` guess at
    such a value matches nothing. Each line scrubbed on its own (`_each`) is read as the file's
    line right after its name, whatever lines are sent before it."""
    if redact is unredacted:
        return redact
    return _FileLines(f"{path}\x00", redact)  # no rule hides across a NUL: the path is cut off after


@dataclass(frozen=True)
class _FileLines:
    """`as_lines_of`'s ``redact``: ``named`` (the path and a NUL) gives context, then is cut off."""

    named: str
    redact: Callable[[str], str]

    def __call__(self, text: str) -> str:
        return self.redact(self.named + text).partition("\x00")[2]

    def each(self, lines: list[str]) -> list[str]:
        """Each of ``lines`` as the file's line right after its name (the name before each)."""
        if "\x00" in "".join(lines):
            return [self(line) for line in lines]
        # the name before each line, and a NUL after it: one join, not a concatenation a line
        return self.redact(self.named + ("\x00" + self.named).join(lines) + "\x00").split("\x00")[1::2]


def redact_lines(lines: list[str], redact: Callable[[str], str], context: int = 0) -> list[str]:
    """``lines[context:]`` (consecutive lines of one text) as they will be sent, one for one.

    The lines are scrubbed as ONE text, so a secret spanning lines (a key block, a
    YAML block scalar) is hidden on each of them ("[REDACTED]" for a line it swallows
    whole); the first ``context`` lines only give context (the lines before a tail).
    A key's END line left (its BEGIN line was not among ``lines``) hides every line up to
    it. A line that scrubbed on its own shows the same, without its file's name too, is
    returned as it is (the agent's last scrub hides and counts its secrets); the others (a
    secret spanning lines, or one only its file's name tells, which the last scrub could miss
    after a line of another shape) come scrubbed on their own as well, so that last scrub finds
    nothing more in them: their redactions are counted with the probe's tally (`count_sent`).
    """
    sent = scrubbed_lines(lines, redact, context)[1]
    count_sent(redact, lines[context:], sent)
    return sent


def scrubbed_lines(
    lines: list[str], redact: Callable[[str], str], context: int, picked: Sequence[int] | None = None
) -> tuple[list[str], list[str]]:
    """``lines[context:]`` as they will be shown, and as `redact_lines` returns them; with
    ``picked`` (indexes into ``lines`` past ``context``, ascending), only the lines at those.

    All of ``lines`` are scrubbed as one text whatever ``picked``: the lines left out give the
    others their context. Each line is also scrubbed on its own (`_each`), and only there is a line
    left out not scrubbed: a filter's probe picks the lines it could keep, and a log of numbers has
    ~160,000 lines a batch for a few kept, each with its file's name before it."""
    if picked is None:
        picked = range(context, len(lines))
    if redact is unredacted or not lines:
        return [lines[i] for i in picked], [lines[i] for i in picked]
    text = "\n".join(lines)
    scrubbed = redact(text)
    sent = lines if scrubbed == text else _realign(lines, scrubbed.split("\n"))
    orphan = None
    if "END" in scrubbed:  # in every END line, so in the text whose pieces made any line sent with one
        orphan = next((i for i in range(len(sent) - 1, -1, -1) if _KEY_END.search(sent[i])), None)
    if orphan is not None:
        sent = [REDACTED] * (orphan + 1) + sent[orphan + 1 :]
    raw = [lines[i] for i in picked]
    alone = _each(raw, redact)
    shown = alone if sent is lines else _each([sent[i] for i in picked], redact)
    # what the agent's last scrub finds in a line without its file's name before it
    bare = _each(raw, redact.redact) if isinstance(redact, _FileLines) else alone
    return shown, [
        line if seen == by_itself == plain else seen
        for line, seen, by_itself, plain in zip(raw, shown, alone, bare, strict=True)
    ]


def _each(lines: list[str], redact: Callable[[str], str]) -> list[str]:
    """Each of ``lines`` scrubbed on its own, as the agent scrubs a result's strings (as its
    file's lines, each right after the file's name, for `as_lines_of`'s)."""
    if isinstance(redact, _FileLines):
        return redact.each(lines)
    if "\x00" in "".join(lines):
        return [redact(line) for line in lines]
    return redact("\x00".join(lines)).split("\x00")  # no rule crosses a NUL


def _realign(original: list[str], scrubbed: list[str]) -> list[str]:
    """``scrubbed`` (the lines of ``original``'s scrubbed text) one for one with ``original``.

    A redaction that swallowed line ends joined lines; the line it starts in keeps the
    redacted piece and each line it swallowed becomes "[REDACTED]". Every line returned
    is made of ``scrubbed`` alone, so a wrong guess at where a redaction ended can
    misplace a line, never show what was hidden.
    """
    if len(scrubbed) >= len(original):
        return [*scrubbed[: len(original) - 1], " ".join(scrubbed[len(original) - 1 :])]
    sent: list[str] = []
    i = 0
    for j, piece in enumerate(scrubbed):
        if piece == original[i] or i == len(original) - 1:
            sent.append(piece)
            i += 1
            continue
        spare = (len(original) - i) - (len(scrubbed) - j)  # line ends still to account for
        swallowed = next((s for s in range(spare + 1) if _ends_at(original, scrubbed, i + s, j)), 0)
        sent += [piece] + [REDACTED] * swallowed
        i += swallowed + 1
    return sent + [REDACTED] * (len(original) - len(sent))


def _ends_at(original: list[str], scrubbed: list[str], last: int, j: int) -> bool:
    """Could ``scrubbed[j]`` end with ``original[last]``, the next piece start the next line?"""
    if not original[last].endswith(scrubbed[j].rpartition(REDACTED)[2]):
        return False
    if j + 1 == len(scrubbed):
        return last + 1 == len(original)
    if last + 1 >= len(original):
        return False
    following = scrubbed[j + 1]
    return following == original[last + 1] or (
        REDACTED in following and original[last + 1].startswith(following.partition(REDACTED)[0])
    )


def count_sent(redact: Callable[[str], str], raw: list[str], sent: list[str]) -> None:
    """Count with the probe's `RedactionTally` (if ``redact`` has one) the redactions in ``sent``
    that its ``raw`` lines did not hold: lines sent redacted, which the last scrub cannot count."""
    tally = redact.redact if isinstance(redact, _FileLines) else redact
    if isinstance(tally, RedactionTally):
        tally.count(
            sum(
                max(s.count(REDACTED) - r.count(REDACTED), 0)
                for r, s in zip(raw, sent, strict=True)
                if s != r
            )
        )
