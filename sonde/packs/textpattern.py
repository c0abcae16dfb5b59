"""`PythonPattern`: a string pattern checked with Python's `re` instead of pydantic-core's engine.

Why it exists: pydantic-core compiles ``Field(pattern=...)`` with Rust's regex
crate, which unrolls a bounded repeat of a Unicode class into one automaton.
``^/[^\\x00-\\x1f]{0,4095}$`` (an absolute path) alone costs ~8 MiB of RSS and
~35 ms at import, in every process that loads the system pack; Python's `re`
keeps the repeat as one opcode and compiles on first use.

    AbsolutePath = Annotated[str, Field(strict=True), PythonPattern(r"^/[^\\x00-\\x1f]{0,4095}$")]

What stays the same as ``Field(pattern=...)``: the JSON schema (``"pattern"``
next to ``"type": "string"``), the error (``string_pattern_mismatch``, same
message and context) and the match semantics for patterns anchored with a
final ``$``, which here means the end of the text as in Rust (not "before a
final newline" as in `re`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticKnownError, core_schema


@functools.cache
def compile_anchored(pattern: str) -> re.Pattern[str]:
    """``pattern`` for `re.search`, a final ``$`` turned into ``\\Z`` (end of text only, as in Rust)."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


@dataclass(frozen=True)
class PythonPattern:
    """Annotated metadata: the string must match ``pattern`` (see the module docstring)."""

    pattern: str

    def check(self, value: str) -> str:
        if compile_anchored(self.pattern).search(value) is None:
            raise PydanticKnownError("string_pattern_mismatch", {"pattern": self.pattern})
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["pattern"] = self.pattern
        return json_schema
