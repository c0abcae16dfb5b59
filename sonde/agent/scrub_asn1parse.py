"""The scrubber's rule for private keys printed by ``openssl asn1parse``.

``openssl asn1parse`` prints a DER structure one element a line, in preorder: the offset, the
depth ``d=``, the header and content lengths, ``prim:`` or ``cons:``, the tag (indented by the
depth with ``-i``) and a primitive's value: an INTEGER's hex (``:5F2B...``), an OCTET STRING's
(``[HEX DUMP]:3082...``), or with ``-dump`` the OCTET STRING's hex dump on the lines after it
(``      0000 - 30 82 01 3a ...   0..:``). A key's private numbers are such values; which ones is
told by the elements before them, read line by line with the stack of their ancestors:

- RSA's and DSA's traditional keys: a SEQUENCE of a version INTEGER (0, or 1 for RSA's multi-prime
  keys) and INTEGERs. RSA's third INTEGER is the short public exponent: every value from the fourth
  on is private (d, p, q, dp, dq, qinv and the other primes'); DSA's is the subprime q: its sixth
  INTEGER (x) is private, p, q, g and y are public.
- PKCS#8 (RFC 5958's v2 too): version, the algorithm's SEQUENCE, then the OCTET STRING holding
  the private key, whatever the algorithm (RSA, EC, Ed25519, X25519, DH, ML-DSA ...).
- SEC 1's EC key: version 1, then the private key's OCTET STRING (the curve and the public point,
  a BIT STRING, stay).
- An encrypted PKCS#8 key (PBES2, PBES1, PKCS#12's PBEs): the encrypted key's OCTET STRING, hidden
  as its PEM block is.

A certificate's elements (serial, OIDs, names, dates, extensions' OCTET STRINGs), a public key's
and parameters' (an explicit curve's base point and order) fit none of these and stay.

A line-based text may not hold a value's context: a log tail cut inside a key, a line of a
result's list scrubbed on its own, ``-strparse`` printing a key's inner OCTET STRING at depth 0.
An element is read in context only when every line from its depth-0 root down to it is in the
text, each line right after the one before (a ``-dump``'s lines between them); otherwise its
value is hidden when it holds 8 bytes or more, whatever it is: a certificate's serial or key
identifier cut from its root goes with the private numbers. Every repetition is bounded and
possessive and each line is read once: hostile text scrubs in linear time.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from sonde.agent.scrub_gates import contains
from sonde.agent.scrub_shapes import ShapeRule

MAX_HEX_DIGITS = 1 << 20  # of a value on one line: more than any key's (ML-DSA-87's is 9 792)
MAX_DUMP_LINES = 1 << 16  # of a ``-dump`` (16 bytes a line)
UNKNOWN_MIN_BYTES = 8  # a value read out of context is hidden from this size on
KEPT_CHILDREN = 3  # the children of an element kept to tell what it is
VERSIONS = frozenset({"00", "01"})
SHORT_EXPONENT_DIGITS = 16  # RSA's public exponent (65537: "010001") is at most 8 bytes
_PBE = re.compile(r"PBES[12]|pbeWith|PBE-")  # the encryption schemes of an encrypted PKCS#8 key

# A line of BIO_dump_indent: its offset, then up to 16 bytes in hex and as characters.
_DUMP_LINE = r"[0-9a-f]{4,8}+ - [^\n\x00]{1,128}+"
_HEX = r"[0-9A-F]{2," + str(MAX_HEX_DIGITS) + "}+"
_ELEMENT = re.compile(
    r"(?<![^\n\x00])[ \t]{0,16}+\d{1,10}+:d=(\d{1,3}+)[ \t]{1,8}+hl=\d{1,2}+[ \t]{1,8}+"
    r"l=[ \t]{0,8}+(\d{1,10}+|inf)[ \t]{1,8}+(prim|cons):[ \t]{1,160}+(?:"
    r"INTEGER[ \t]{0,16}+:-?(?P<value>" + _HEX + ")"
    r"|OCTET STRING[ \t]{0,16}+(?:\[HEX DUMP\]:(?P<v2>" + _HEX + ")"
    r"|\r?\n[ \t]{1,16}+(?P<v3>"
    + _DUMP_LINE
    + r"(?:\r?\n[ \t]{1,16}+"
    + _DUMP_LINE
    + "){0,"
    + str(MAX_DUMP_LINES)
    + r"}+))"
    r"|([^\n\x00]{0,4096}+))"
)
# The unnamed groups (only the values are named): the depth, the length, the form, and (the
# last) the tag and value of an element with no value to hide.
_DEPTH, _LENGTH, _FORM, _OTHER = 1, 2, 3, _ELEMENT.groups
# What may come between two elements' lines: a line end, and another primitive's -dump lines.
_BETWEEN = re.compile(
    r"[ \t]{0,16}+(?:\r?\n[ \t]{1,16}+" + _DUMP_LINE + "){0," + str(MAX_DUMP_LINES) + r"}+\r?\n"
)
_TAG_WIDTH = 18  # asn1parse pads the tag to 18 characters ("%-18s")


@dataclass
class _Element:
    """An element as its line tells it, and the first of its children (a cons one's)."""

    depth: int
    tag: str
    value: str
    children: list[_Element] = field(default_factory=list)
    count: int = 0  # of its children read so far
    inside_private: bool = False  # it lies in a private key's private part (an ancestor's)

    def adopt(self, child: _Element) -> None:
        self.count += 1
        if len(self.children) < KEPT_CHILDREN:
            self.children.append(child)

    def is_a(self, tag: str, index: int) -> bool:
        """Its child number ``index`` (from 0) is a ``tag``."""
        return len(self.children) > index and self.children[index].tag == tag


def _private_branch(key: _Element) -> bool:
    """Its last child (the branch being read) is a private key's private part, by its siblings."""
    branch, first = key.count - 1, key.children
    versioned = key.is_a("INTEGER", 0) and first[0].value in VERSIONS
    if versioned and key.is_a("SEQUENCE", 1) and key.is_a("OCTET STRING", 2):
        return branch == 2  # PKCS#8: the private key
    if versioned and first[0].value == "01" and key.is_a("OCTET STRING", 1):
        return branch == 1  # SEC 1's EC key
    if versioned and key.is_a("INTEGER", 1) and key.is_a("INTEGER", 2):
        exponent = first[2].value
        rsa = len(exponent) <= SHORT_EXPONENT_DIGITS and exponent.isalnum()
        return branch >= (3 if rsa else 5)  # RSA's d, p, q ...; DSA's x
    if key.is_a("SEQUENCE", 0) and key.is_a("OCTET STRING", 1) and first[0].is_a("OBJECT", 0):
        return branch == 1 and _PBE.match(first[0].children[0].value) is not None
    return False


def _element(match: re.Match[str]) -> _Element:
    depth = int(match[_DEPTH])
    if match["value"] is not None:
        return _Element(depth, "INTEGER", match["value"])
    if match[_OTHER] is None:
        return _Element(depth, "OCTET STRING", match["v2"] or "")
    other = match[_OTHER]
    return _Element(depth, other[:_TAG_WIDTH].rstrip(), other[_TAG_WIDTH:].lstrip(":"))


def _long(match: re.Match[str]) -> bool:
    """The value holds `UNKNOWN_MIN_BYTES` or more."""
    if match["v3"] is not None:
        return match[_LENGTH].isdigit() and int(match[_LENGTH]) >= UNKNOWN_MIN_BYTES
    return len(match["value"] or match["v2"] or "") >= 2 * UNKNOWN_MIN_BYTES


def private_values(elements: Iterator[re.Match[str]]) -> Iterator[re.Match[str]]:
    """The elements' lines (`_ELEMENT`'s matches, in order) whose value is to be hidden: read in
    context, a private key's private part; out of it, a long value."""
    ancestors: list[_Element] = []  # of the element read, from the outermost in
    rooted = False  # the ancestors go back to a depth-0 root, every line from it in the text
    end = -1
    for match in elements:
        if end < 0 or _BETWEEN.fullmatch(match.string, end, match.start()) is None:
            ancestors, rooted = [], False
        end = match.end()
        element = _element(match)
        while ancestors and ancestors[-1].depth >= element.depth:
            ancestors.pop()
        if element.depth == 0:
            rooted = True
        elif not ancestors or ancestors[-1].depth != element.depth - 1:
            ancestors, rooted = [], False  # its parent's line is not in the text
        if ancestors:
            parent = ancestors[-1]
            parent.adopt(element)
            element.inside_private = parent.inside_private or _private_branch(parent)
        known = rooted and (bool(ancestors) or match[_FORM] == "cons")
        if match[_FORM] == "cons":
            ancestors.append(element)
        if match[_OTHER] is None and (element.inside_private or (not known and _long(match))):
            yield match


@dataclass(frozen=True)
class StructureRule(ShapeRule):
    """A `ShapeRule` whose pattern finds every element's line; `matches` keeps those whose
    value `private_values` hides."""

    def matches(self, text: str, lower: str) -> Iterator[re.Match[str]]:
        """The values to hide in ``text``."""
        if self.gate(text, lower):
            yield from private_values(self.pattern.finditer(text))


# A private key's values in asn1parse's output: the value, its line and the others left.
ASN1PARSE_PRIVATE_VALUES = StructureRule("asn1parse_private_values", _ELEMENT, contains("prim:"))
