"""The scrubber's rules for private keys printed as numbers rather than as a key block.

Each is a `ShapeRule` (see `sonde.agent.scrub_shapes`) that `sonde.agent.scrub_rules` runs in
its place among the others. ``openssl rsa|pkey|ec|dsa -text`` (``genpkey -text`` too) prints a
key's numbers, each after its label on a line of its own, as indented lines of hex bytes
(``    00:c3:5a:...``), and GnuTLS's ``certtool -k`` alike. The private numbers' lines are hidden,
one redaction a number; their labels and the public numbers (``modulus``, ``publicExponent``,
``pub``, a certificate's ``Modulus``) stay: RSA's ``privateExponent``, ``prime1``, ``prime2``,
``exponent1``, ``exponent2``, ``coefficient`` (``prime3``, ``exponent3``, ``coefficient3`` ...
of a key with more primes), EC's, DSA's, Ed25519's and X25519's ``priv``, DH's
``private-key``, GnuTLS's ``private exponent``, ``exp1``, ``exp2`` and ``private key``, and
OpenSSL 3.5's post-quantum keys': ML-DSA's ``seed`` and ``priv`` (its ``pub`` stays), ML-KEM's and
the hybrid KEMs' ``seed`` and ``dk`` (their ``ek`` stays), SLH-DSA's ``priv``. (An EC curve's
``Seed:`` and DH parameters' ``SEED:``, public, are no label of these.)

A line-based probe may return a key's hex lines without the label before them: a file's probe
reads 256 lines before the first it returns (a key's number takes at most ~140 lines, for
16384 bits), a container's log does not. So at a text's start, hex lines right before the label
of a number that openssl prints after a private one (``prime1:`` ... ``pub:``,
``public-key:``, ML-DSA's ``priv:`` after its seed, ML-KEM's ``dk:`` and ``ek:``) are hidden too;
only the last private number's (``coefficient``) cannot be told from a certificate's signature
there. (ML-DSA-87's ``priv`` takes 327 lines, more than the 256 before a file's window: a window
starting deep inside it is hidden by the ``pub:`` after it.)

FreeS/WAN's (Openswan's, older libreswan's) ipsec.secrets holds an RSA key inline (``: RSA {``,
then ``Modulus: 0x...``, ``PublicExponent: 0x03``, ``PrivateExponent: 0x...`` ... ``}``): each
private field's value (0x hex or 0s base64) is hidden on its own line, so a tail of the file
starting inside the key hides it too. Every repetition is bounded and most are possessive:
hostile text scrubs in linear time. A key's numbers printed by ``openssl asn1parse`` are
`sonde.agent.scrub_asn1parse`'s.
"""

from __future__ import annotations

import re

from sonde.agent.scrub_asn1parse import ASN1PARSE_PRIVATE_VALUES
from sonde.agent.scrub_gates import contains
from sonde.agent.scrub_shapes import FRESH, ShapeRule

# The labels of a private number, as openssl and GnuTLS print them (case and all).
_PRIVATE_LABEL = (
    r"(?:privateExponent|prime\d{1,2}|exponent\d{1,2}|coefficient\d{0,2}|priv|private-key"
    r"|private exponent|private key|exp\d|seed|dk)"
)
# The labels openssl and GnuTLS print right after a private number: a private number's own, or
# the public half's after the private half (EC's, DSA's, Ed25519's and ML-DSA's pub, DH's
# public-key, ML-KEM's ek), or the private key after its seed (ML-DSA's priv, ML-KEM's dk).
_AFTER_PRIVATE_LABEL = r"(?:prime\d{1,2}|exponent\d{1,2}|coefficient\d{0,2}|exp\d|pub|public-key|priv|dk|ek)"
_LINE_END = r"(?=[ \t]{0,16}+(?:\r?\n|\x00|\Z))"
# A line of a number's hex bytes after its indent: "00:c3:5a:...:" (the last one without the
# final colon); the first holds two bytes at least (a shorter number is printed after its label).
_FIRST_HEX_LINE = r"[0-9A-Fa-f]{2}:[0-9A-Fa-f:]{0,256}+" + _LINE_END
_HEX_LINES = (
    _FIRST_HEX_LINE + r"(?:\r?\n[ \t]{1,64}+[0-9A-Fa-f]{2}[0-9A-Fa-f:]{0,256}+" + _LINE_END + r"){0,1024}+"
)
_PRIVATE_GATE = ("priv", "prime", "exponent", "coefficient", "exp1", "exp2", "seed", "dk")

# A private number's hex lines after its label (a line of its own, maybe indented: DH's in
# OpenSSL 1.1, GnuTLS's): every line of the number, the label left.
PRIVATE_KEY_NUMBER = ShapeRule(
    "private_key_number",
    re.compile(
        r"(?<![^\n\x00])[ \t]{0,32}+"
        + _PRIVATE_LABEL
        + r"[ \t]{0,16}+:[ \t]{0,16}+\r?\n[ \t]{1,64}+(?P<value>"
        + _HEX_LINES
        + ")"
    ),
    contains(*_PRIVATE_GATE),
)

# A private number's hex lines at a text's start (its label left out of a tail), right before
# the label of a number printed after a private one.
PRIVATE_KEY_NUMBER_TAIL = ShapeRule(
    "private_key_number_tail",
    re.compile(
        r"(?<![^\x00])[ \t]{1,64}+(?P<value>"
        + _HEX_LINES
        + r")(?=\r?\n[ \t]{0,32}+"
        + _AFTER_PRIVATE_LABEL
        + r"[ \t]{0,16}+:[ \t]{0,16}+(?:\r?\n|\x00|\Z))"
    ),
    contains(
        "prime", "exponent", "coefficient", "exp1", "exp2", "pub:", "public-key:", "priv:", "dk:", "ek:"
    ),
)

# FreeS/WAN's inline RSA key in ipsec.secrets: a private field and its value, 0x hex or 0s
# base64 (the field's name in any case, as pluto reads it). Modulus and PublicExponent stay.
IPSEC_INLINE_RSA_KEY = ShapeRule(
    "ipsec_inline_rsa_key",
    re.compile(
        r"(?<![^\n\x00])[ \t]{0,64}+(?i:PrivateExponent|Prime[12]|Exponent[12]|Coefficient)[ \t]{0,16}+:"
        r"[ \t]{0,16}+" + FRESH + r"(?P<value>0[xX][0-9A-Fa-f]{1,16384}+|0[sS][A-Za-z0-9+/=]{1,16384}+)"
    ),
    contains(*_PRIVATE_GATE, "Prime", "Exponent", "Coefficient"),
)

KEY_TEXT_RULES = (PRIVATE_KEY_NUMBER, PRIVATE_KEY_NUMBER_TAIL, IPSEC_INLINE_RSA_KEY, ASN1PARSE_PRIVATE_VALUES)
