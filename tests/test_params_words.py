"""A refusal of a caller's values in words: a worded pattern is said in its words, a name that is no
field gets the fields there are, and every other pydantic message is kept."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sonde.params_words import describe_params_error
from sonde.protocol.names import PATTERN_WORDS, PROBE_NAME_PATTERN, worded

WORDED = worded(r"^[a-c]{1,3}$", "1 to 3 of the letters a, b and c")


class Asked(BaseModel):
    model_config = ConfigDict(extra="forbid")
    letters: Annotated[str, Field(pattern=WORDED)] = "a"
    digits: Annotated[str, Field(pattern=r"^[0-9]+$")] = "1"
    probe: Annotated[str, Field(pattern=PROBE_NAME_PATTERN)] = "system.info"
    nested: dict[str, int] = Field(default_factory=dict)


def refusal(values: dict[str, object], model: type[BaseModel] | None = Asked) -> str:
    with pytest.raises(ValidationError) as refused:
        Asked.model_validate(values)
    return describe_params_error(refused.value, model)


def test_a_worded_pattern_is_said_in_its_words() -> None:
    assert refusal({"letters": "xyz"}) == "letters: must be 1 to 3 of the letters a, b and c"
    said = refusal({"probe": "System.Info"})
    assert said.startswith("probe: must be a probe's full name, such as system.memory.usage"), said
    assert "pattern" not in said


def test_a_pattern_without_words_keeps_pydantics_message() -> None:
    assert refusal({"digits": "x"}) == "digits: String should match pattern '^[0-9]+$'"


def test_a_name_that_is_no_field_is_told_the_fields() -> None:
    assert (
        refusal({"leters": "a"})
        == "leters: not a parameter; the parameters are: letters, digits, probe, nested"
    )
    assert refusal({"leters": "a"}, None) == "leters: Extra inputs are not permitted"  # no model: as it was


def test_other_messages_and_every_problem_are_kept() -> None:
    said = refusal({"letters": "q", "nested": {"k": "x"}})
    assert said == (
        "letters: must be 1 to 3 of the letters a, b and c; "
        "nested.k: Input should be a valid integer, unable to parse string as an integer"
    )


def test_a_pattern_keeps_one_set_of_words() -> None:
    assert worded(WORDED, PATTERN_WORDS[WORDED]) == WORDED  # the same words again: fine
    with pytest.raises(ValueError, match="already has other words"):
        worded(WORDED, "something else")
