"""A pydantic refusal of a caller's values, said in words a person (or a model) can act on.

pydantic's own messages are kept where they are plain ("Field required", "Input should be less
than or equal to 1000"), and replaced where they are not: a pattern that was given words
(`sonde.protocol.names.worded`) is said in them, not as a regular expression, and a name that is
no field says which fields there are. Imports no more than pydantic: admin commands use it.
"""

from __future__ import annotations

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from sonde.echo import clipped
from sonde.protocol.names import PATTERN_WORDS

# The most of one validation message an answer repeats (a pack's own validator may quote its input).
INVALID_MESSAGE_CHARS = 400  # room for the forms a refusal of ours lists (query_logs.since: 340)
VALUE_ERROR_PREFIX = "Value error, "
MAX_PROBLEMS = 5


def describe_params_error(exc: ValidationError, model: type[BaseModel] | None = None) -> str:
    """The first five problems as ``field: message``; each name the caller sent (a field, a key)
    and each message (one may quote its input) cut short. With ``model`` (the one that refused),
    a field it does not have is told the ones it has."""
    parts = []
    for error in exc.errors()[:MAX_PROBLEMS]:
        where = ".".join(clipped(str(part)) for part in error["loc"]) or "params"
        parts.append(f"{where}: {clipped(in_words(error, model), INVALID_MESSAGE_CHARS)}")
    return "; ".join(parts)


def in_words(error: ErrorDetails, model: type[BaseModel] | None) -> str:
    if error["type"] == "string_pattern_mismatch":
        words = PATTERN_WORDS.get(str((error.get("ctx") or {}).get("pattern")))
        if words is not None:
            return f"must be {words}"
    if error["type"] == "extra_forbidden" and model is not None and len(error["loc"]) == 1:
        fields = ", ".join(field.alias or name for name, field in model.model_fields.items())
        return f"not a parameter; the parameters are: {fields or 'none'}"
    return error["msg"].removeprefix(VALUE_ERROR_PREFIX)  # pydantic's wrapping of our own message
