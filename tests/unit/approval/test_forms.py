"""Elicitation forms (forms.py): schema -> fields, prompts, typed answers, whole answers, secrets."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_sampling_proxy.approval.forms import (
    MAX_FIELDS,
    Field,
    FieldError,
    Form,
    FormError,
    Option,
    apply_defaults,
    parse_answer,
    parse_form,
    sensitive_fields,
    validate_content,
    validate_value,
)


def form(properties: dict[str, Any], required: list[str] | None = None) -> Form:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        schema["required"] = required
    return parse_form(schema)


def one(prop: dict[str, Any], required: bool = False) -> Field:
    return form({"f": prop}, ["f"] if required else None).fields[0]


COLOR_LEGACY = {"type": "string", "enum": ["r", "g", "b"], "enumNames": ["Red", "Green", "Blue"]}
COLOR_TITLED = {
    "type": "string",
    "oneOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}, {"const": "b", "title": "Blue"}],
}
COLOR_PLAIN = {"type": "string", "enum": ["red", "green", "blue"]}
TOPPINGS_TITLED = {
    "type": "array",
    "items": {
        "anyOf": [{"const": "h", "title": "Ham"}, {"const": "c", "title": "Cheese"}, {"const": "o", "title": "Olives"}]
    },
    "minItems": 1,
    "maxItems": 2,
}
TOPPINGS_PLAIN = {"type": "array", "items": {"type": "string", "enum": ["ham", "cheese", "olives"]}}


# -- parse_form -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prop", "kind", "checks"),
    [
        ({"type": "string"}, "string", {}),
        (
            {"type": "string", "format": "email", "minLength": 3, "maxLength": 50},
            "string",
            {"format": "email", "min_length": 3, "max_length": 50},
        ),
        ({"type": "number", "minimum": 0.5, "maximum": 9.5}, "number", {"minimum": 0.5, "maximum": 9.5}),
        ({"type": "integer", "minimum": 1, "maximum": 10}, "integer", {"minimum": 1, "maximum": 10}),
        ({"type": "boolean"}, "boolean", {}),
        (COLOR_LEGACY, "enum", {"options": [Option("r", "Red"), Option("g", "Green"), Option("b", "Blue")]}),
        (COLOR_TITLED, "enum", {"options": [Option("r", "Red"), Option("g", "Green"), Option("b", "Blue")]}),
        (COLOR_PLAIN, "enum", {"options": [Option("red", "red"), Option("green", "green"), Option("blue", "blue")]}),
        ({"enum": ["a", "b"]}, "enum", {}),  # an enum without a type is a string enum
        (TOPPINGS_TITLED, "multi", {"multi": True, "min_items": 1, "max_items": 2}),
        (
            TOPPINGS_PLAIN,
            "multi",
            {"multi": True, "options": [Option("ham", "ham"), Option("cheese", "cheese"), Option("olives", "olives")]},
        ),
    ],
)
def test_every_kind_parses(prop: dict[str, Any], kind: str, checks: dict[str, Any]) -> None:
    field = one(prop)
    assert field.kind == kind
    assert field.multi == (kind == "multi")
    for attribute, value in checks.items():
        assert getattr(field, attribute) == value


def test_form_keeps_order_required_titles_and_sanitises_display_text() -> None:
    parsed = form(
        {
            "b": {"type": "string", "title": "Your \x1b[31mname\x1b[0m\n  here", "description": "Line 1\nLine\x07 2"},
            "a": {"type": "string", "oneOf": [{"const": "x\x1b]0;t\x07", "title": "E\u202evil"}]},
        },
        ["a"],
    )
    assert parsed.names == ["b", "a"] and len(parsed) == 2
    b, a = parsed
    assert (b.required, a.required) == (False, True)
    assert b.title == "Your name here"  # one line, escapes gone
    assert b.description == "Line 1\nLine 2"  # newlines kept, BEL gone
    assert a.options == [Option("x\x1b]0;t\x07", "Evil")]  # the value goes back exactly as sent
    assert a.label == "a" and b.label == "Your name here"
    assert parsed.field("a") is a
    with pytest.raises(KeyError):
        parsed.field("zz")


def test_empty_form_and_missing_properties_are_fine() -> None:
    assert len(parse_form({"type": "object", "properties": {}})) == 0
    assert len(parse_form({"type": "object"})) == 0


def test_nullable_any_of_is_the_plain_field() -> None:
    # how some SDKs render `Optional[int] = None`: the null branch adds nothing a form can ask
    field = one({"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": None, "title": "Age"})
    assert (field.kind, field.minimum, field.default, field.title) == ("integer", 1, None, "Age")
    field = one({"anyOf": [{"type": "null"}, COLOR_TITLED], "default": "g"})
    assert (field.kind, field.default) == ("enum", "g")


def test_legacy_enum_with_mismatched_names_shows_values() -> None:
    field = one({"type": "string", "enum": ["r", "g"], "enumNames": ["Red"]})
    assert [o.label for o in field.options or []] == ["r", "g"]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("nope", "not an object"),
        ({"type": "array"}, "must be of type 'object'"),
        ({"$ref": "#/defs/x"}, "$ref"),
        ({"type": "object", "properties": []}, "'properties' is not an object"),
        ({"type": "object", "properties": {}, "required": "a"}, "'required' is not a list"),
        ({"type": "object", "properties": {}, "required": ["a"]}, "required field 'a' is not defined"),
        ({"type": "object", "properties": {"a": {"type": "object", "properties": {}}}}, "nested objects"),
        ({"type": "object", "properties": {"a": {"properties": {"x": {}}}}}, "nested objects"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}}, "$ref is not supported"),
        ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}, "multi-select enums"),
        (
            {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer", "enum": [1]}}}},
            "multi-select enums of strings",
        ),
        ({"type": "object", "properties": {"a": {"type": "array"}}}, "multi-select enums"),
        ({"type": "object", "properties": {"a": {"type": ["string", "null"]}}}, "is not supported"),
        ({"type": "object", "properties": {"a": {"type": "null"}}}, "type 'null' is not supported"),
        ({"type": "object", "properties": {"a": {}}}, "has no 'type'"),
        ({"type": "object", "properties": {"a": "string"}}, "its schema is not an object"),
        ({"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}}, "'anyOf' is not supported"),
        (
            {"type": "object", "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}},
            "'anyOf' is not supported",
        ),
        ({"type": "object", "properties": {"a": {"anyOf": [{"type": "null"}, {"type": "null"}]}}}, "'anyOf'"),
        ({"type": "object", "properties": {"a": {"type": "string", "enum": []}}}, "no options"),
        ({"type": "object", "properties": {"a": {"type": "string", "enum": [1, 2]}}}, "list of strings"),
        ({"type": "object", "properties": {"a": {"type": "string", "enum": ["x", "x"]}}}, "same option value twice"),
        ({"type": "object", "properties": {"a": {"type": "string", "oneOf": [{"title": "no const"}]}}}, "'const'"),
        ({"type": "object", "properties": {"a": {"type": "string", "minLength": -1}}}, "non-negative integer"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "minLength": 5, "maxLength": 2}}},
            "minLength is greater than maxLength",
        ),
        ({"type": "object", "properties": {"a": {"type": "number", "minimum": "1"}}}, "'minimum' must be a number"),
        ({"type": "object", "properties": {"a": {"type": "number", "minimum": 3, "maximum": 1}}}, "greater than"),
        (
            {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1.2, "maximum": 1.8}}},
            "no whole number",
        ),
        ({"type": "object", "properties": {"a": {**TOPPINGS_PLAIN, "minItems": 4}}}, "only 3 options"),
        ({"type": "object", "properties": {"a": {"type": "string", "title": 5}}}, "'title' is not a string"),
        (
            {"type": "object", "properties": {f"f{i}": {"type": "string"} for i in range(MAX_FIELDS + 1)}},
            f"at most {MAX_FIELDS}",
        ),
    ],
)
def test_unsupported_schemas_raise_form_error(schema: Any, message: str) -> None:
    with pytest.raises(FormError) as info:
        parse_form(schema)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("prop", "default"),
    [
        ({"type": "string", "default": "hi"}, "hi"),
        ({"type": "string", "default": ""}, ""),
        ({"type": "integer", "default": 3}, 3),
        ({"type": "number", "default": 2.5}, 2.5),
        ({"type": "boolean", "default": False}, False),
        ({**COLOR_LEGACY, "default": "g"}, "g"),
        ({**COLOR_TITLED, "default": "b"}, "b"),
        ({**TOPPINGS_TITLED, "default": ["h", "c"]}, ["h", "c"]),
        # defaults that are not valid values are dropped: the user is asked instead
        ({"type": "string", "default": 5}, None),
        ({"type": "string", "minLength": 3, "default": "ab"}, None),
        ({"type": "string", "format": "email", "default": "nope"}, None),
        ({"type": "integer", "default": 1.5}, None),
        ({"type": "integer", "default": True}, None),
        ({"type": "integer", "maximum": 2, "default": 3}, None),
        ({"type": "boolean", "default": "yes"}, None),
        ({**COLOR_LEGACY, "default": "Red"}, None),
        ({**TOPPINGS_TITLED, "default": ["h", "c", "o"]}, None),
        ({**TOPPINGS_TITLED, "default": "h"}, None),
    ],
)
def test_defaults_of_every_kind(prop: dict[str, Any], default: Any) -> None:
    assert one(prop).default == default


# -- prompt_text ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prop", "required", "prompt"),
    [
        ({"type": "string", "title": "Name"}, True, "Name* (text)"),
        ({"type": "string", "format": "email", "default": "a@b.co"}, False, "f (email) [default: a@b.co]"),
        ({"type": "string", "minLength": 2, "maxLength": 5}, False, "f (text, 2-5 characters)"),
        ({"type": "string", "maxLength": 5}, False, "f (text, at most 5 characters)"),
        ({"type": "string", "format": "date", "minLength": 10}, False, "f (date, at least 10 characters)"),
        ({"type": "integer", "title": "Age", "minimum": 1, "maximum": 10}, True, "Age* (whole number, 1-10)"),
        ({"type": "number", "minimum": -5, "maximum": 5.5, "default": 0}, False, "f (number, -5 to 5.5) [default: 0]"),
        ({"type": "number", "minimum": 0}, False, "f (number, at least 0)"),
        ({"type": "boolean", "default": True}, False, "f (y/n) [default: yes]"),
        ({**COLOR_LEGACY, "default": "g"}, True, "f* (pick one): 1) Red  2) Green  3) Blue [default: Green]"),
        (COLOR_TITLED, False, "f (pick one): 1) Red  2) Green  3) Blue"),
        (
            {**TOPPINGS_TITLED, "default": ["h", "o"]},
            False,
            "f (pick 1-2, comma-separated): 1) Ham  2) Cheese  3) Olives [default: Ham, Olives]",
        ),
        (TOPPINGS_PLAIN, False, "f (pick any, comma-separated): 1) ham  2) cheese  3) olives"),
        ({**TOPPINGS_PLAIN, "maxItems": 2}, False, "f (pick up to 2, comma-separated): 1) ham  2) cheese  3) olives"),
        (
            {"type": "string", "title": "\x1b[2J\x1b]0;pwned\x07Hi\u202e", "default": "x\x1b[31my\nz"},
            False,
            "Hi (text) [default: xy z]",
        ),
    ],
)
def test_prompt_text(prop: dict[str, Any], required: bool, prompt: str) -> None:
    assert one(prop, required).prompt_text() == prompt


def test_prompt_text_sanitises_fields_built_directly() -> None:
    field = Field("n\x1b[1m", "enum", options=[Option("v", "\x1b[31mRed")], default="v")
    assert field.prompt_text() == "n (pick one): 1) Red [default: Red]"


def test_long_default_is_shortened_in_the_prompt() -> None:
    prompt = one({"type": "string", "default": "x" * 500}).prompt_text()
    assert len(prompt) < 100 and prompt.endswith("…]")


# -- parse_answer -----------------------------------------------------------------------------

GOOD = [
    # strings and formats
    ({"type": "string"}, "  hello world ", "hello world"),
    ({"type": "string", "minLength": 2, "maxLength": 3}, "abc", "abc"),
    ({"type": "string", "format": "email"}, "jane.doe+tag@example.co.uk", "jane.doe+tag@example.co.uk"),
    ({"type": "string", "format": "email"}, "jürgen@bücher.de", "jürgen@bücher.de"),
    ({"type": "string", "format": "uri"}, "https://example.com/a?b=c", "https://example.com/a?b=c"),
    ({"type": "string", "format": "uri"}, "ftp://files.example.com", "ftp://files.example.com"),
    ({"type": "string", "format": "date"}, "2024-02-29", "2024-02-29"),
    ({"type": "string", "format": "date-time"}, "2025-03-01T14:30:00Z", "2025-03-01T14:30:00Z"),
    ({"type": "string", "format": "date-time"}, "2025-03-01t14:30:00.123z", "2025-03-01t14:30:00.123z"),
    ({"type": "string", "format": "date-time"}, "2025-03-01T14:30:00+05:30", "2025-03-01T14:30:00+05:30"),
    ({"type": "string", "format": "hostname"}, "anything", "anything"),  # unknown formats are not checked
    # numbers
    ({"type": "number"}, "3", 3),
    ({"type": "number"}, "-2.5", -2.5),
    ({"type": "number"}, "1e3", 1000.0),
    ({"type": "number", "minimum": 1, "maximum": 10}, "10", 10),
    ({"type": "number", "minimum": 1, "maximum": 10}, "1.0", 1.0),
    ({"type": "integer"}, "42", 42),
    ({"type": "integer"}, "-7", -7),
    ({"type": "integer"}, "3.0", 3),
    ({"type": "integer", "minimum": 0, "maximum": 5}, "0", 0),
    # booleans
    *[({"type": "boolean"}, text, True) for text in ("y", "Yes", "TRUE", "1")],
    *[({"type": "boolean"}, text, False) for text in ("n", "NO", "false", "0")],
    # single-select: by number, exact value, value or label in any case
    (COLOR_LEGACY, "1", "r"),
    (COLOR_LEGACY, "3", "b"),
    (COLOR_LEGACY, "g", "g"),
    (COLOR_LEGACY, "G", "g"),
    (COLOR_LEGACY, "green", "g"),
    (COLOR_TITLED, "BLUE", "b"),
    (COLOR_TITLED, "2", "g"),
    (COLOR_PLAIN, "Red", "red"),
    # multi-select
    (TOPPINGS_TITLED, "1", ["h"]),
    (TOPPINGS_TITLED, "1, 3", ["h", "o"]),
    (TOPPINGS_TITLED, "cheese,h", ["c", "h"]),
    (TOPPINGS_TITLED, "1,1,ham", ["h"]),  # the same choice twice counts once
    (TOPPINGS_TITLED, " 2 ,, ", ["c"]),
    (TOPPINGS_PLAIN, "olives, HAM, 2", ["olives", "ham", "cheese"]),
]


@pytest.mark.parametrize(("prop", "text", "value"), GOOD)
def test_good_answers(prop: dict[str, Any], text: str, value: Any) -> None:
    result = parse_answer(one(prop), text)
    assert result == value and type(result) is type(value)


BAD = [
    ({"type": "string", "minLength": 3}, "ab", "too short; expected text of at least 3 characters"),
    ({"type": "string", "maxLength": 3}, "abcd", "too long; expected text of at most 3 characters"),
    ({"type": "string", "minLength": 2, "maxLength": 3}, "a", "expected text of 2-3 characters"),
    *[
        ({"type": "string", "format": "email"}, text, "not a valid email; expected an email address")
        for text in (
            "nope",
            "a@b",
            "a@@b.com",
            "a b@c.com",
            ".a@b.com",
            "a.@b.com",
            "a..b@c.com",
            "a@b..com",
            "a@-b.com",
            "a@b.c",
            "a@b.com.",
            "@b.com",
        )
    ],
    *[
        ({"type": "string", "format": "uri"}, text, "not a valid uri; expected a URL")
        for text in ("example.com", "/path/only", "https://", "mailto:a@b.com", "http://a b.com", "http://[::1")
    ],
    *[
        ({"type": "string", "format": "date"}, text, "not a valid date; expected a date like 2025-03-01")
        for text in ("2023-02-29", "2024-13-01", "01/02/2024", "20240101", "2024-01-01T00:00:00Z", "tomorrow")
    ],
    *[
        ({"type": "string", "format": "date-time"}, text, "not a valid date-time; expected a date and time with offset")
        for text in (
            "2025-03-01",
            "2025-03-01T14:30:00",
            "2025-03-01 14:30:00Z",
            "2025-03-01T14:30Z",
            "2025-03-01T25:00:00Z",
            "2025-02-30T10:00:00Z",
            "now",
        )
    ],
    ({"type": "number"}, "abc", "not a number; expected a number"),
    ({"type": "number"}, "nan", "not a finite number"),
    ({"type": "number"}, "inf", "not a finite number"),
    ({"type": "number"}, "1,5", "not a number"),
    ({"type": "number", "minimum": 1, "maximum": 10}, "0.5", "too small; expected a number from 1 to 10"),
    ({"type": "number", "minimum": 1, "maximum": 10}, "11", "too large; expected a number from 1 to 10"),
    ({"type": "number", "minimum": 1}, "0", "too small; expected a number at least 1"),
    ({"type": "integer"}, "1.5", "not a whole number; expected a whole number"),
    ({"type": "integer", "maximum": 5}, "6", "too large; expected a whole number at most 5"),
    ({"type": "integer"}, "1" * 5000, "not a finite number"),
    ({"type": "boolean"}, "maybe", "not yes or no; expected yes or no (y/n)"),
    ({"type": "boolean"}, "2", "not yes or no"),
    (COLOR_LEGACY, "4", "'4' is not one of the options; expected one of 1) Red, 2) Green, 3) Blue"),
    (COLOR_LEGACY, "0", "is not one of the options"),
    (COLOR_LEGACY, "purple", "is not one of the options"),
    (COLOR_TITLED, "re", "is not one of the options"),
    (TOPPINGS_TITLED, "1,2,3", "too many chosen; expected 1-2 of 1) Ham, 2) Cheese, 3) Olives"),
    (TOPPINGS_TITLED, ",", "too few chosen"),
    (TOPPINGS_TITLED, "ham, pineapple", "'pineapple' is not one of the options"),
    ({**TOPPINGS_PLAIN, "minItems": 2}, "ham", "too few chosen; expected at least 2 of"),
]


@pytest.mark.parametrize(("prop", "text", "message"), BAD)
def test_bad_answers_say_what_is_expected(prop: dict[str, Any], text: str, message: str) -> None:
    with pytest.raises(FieldError) as info:
        parse_answer(one(prop), text)
    assert message in info.value.message
    assert str(info.value) == info.value.message


KINDS = [
    ({"type": "string"}, "hi"),
    ({"type": "string", "format": "date"}, "2025-01-02"),
    ({"type": "number"}, 1.5),
    ({"type": "integer"}, 7),
    ({"type": "boolean"}, True),
    (COLOR_TITLED, "g"),
    (TOPPINGS_TITLED, ["c"]),
]


@pytest.mark.parametrize(("prop", "default"), KINDS)
@pytest.mark.parametrize("empty", ["", "   ", "\t"])
def test_empty_answer_gives_default_none_or_required(prop: dict[str, Any], default: Any, empty: str) -> None:
    assert parse_answer(one({**prop, "default": default}), empty) == default
    assert parse_answer(one({**prop, "default": default}, required=True), empty) == default
    assert parse_answer(one(prop), empty) is None
    with pytest.raises(FieldError) as info:
        parse_answer(one(prop, required=True), empty)
    assert info.value.message.startswith("required; expected ")


def test_multi_default_is_a_copy() -> None:
    field = one({**TOPPINGS_TITLED, "default": ["h"]})
    answer = parse_answer(field, "")
    answer.append("c")
    assert field.default == ["h"] and apply_defaults(Form([field])) == {"f": ["h"]}


def test_shown_number_wins_over_a_numeric_value() -> None:
    field = one({"type": "string", "enum": ["2", "1", "10"]})
    assert parse_answer(field, "1") == "2"  # option 1 as printed
    assert parse_answer(field, "2") == "1"
    assert parse_answer(field, "10") == "10"  # no option 10: the value


def test_enum_matching_prefers_exact_then_rejects_ambiguity() -> None:
    field = one({"type": "string", "enum": ["a", "A"]})
    assert parse_answer(field, "A") == "A"
    field = one({"type": "string", "oneOf": [{"const": "x", "title": "Same"}, {"const": "y", "title": "same"}]})
    with pytest.raises(FieldError) as info:
        parse_answer(field, "SAME")
    assert "matches several options; type its number" in info.value.message


def test_multi_value_with_a_comma_can_be_typed_whole() -> None:
    field = one({"type": "array", "items": {"enum": ["a, b", "c"]}})
    assert parse_answer(field, "a, b") == ["a, b"]
    assert parse_answer(field, "1, 2") == ["a, b", "c"]


def test_error_messages_are_sanitised_and_short() -> None:
    field = one({"type": "string", "enum": ["\x1b[31mred"], "enumNames": ["R\x1b]0;x\x07ed"]})
    with pytest.raises(FieldError) as info:
        parse_answer(field, "\x1b[2J" + "z" * 300)
    assert "\x1b" not in info.value.message and "\x07" not in info.value.message
    assert "1) Red" in info.value.message and len(info.value.message) < 200


# -- validate_value / validate_content --------------------------------------------------------


@pytest.mark.parametrize(
    ("prop", "value", "problem"),
    [
        ({"type": "string"}, 5, "not text"),
        ({"type": "number"}, "5", "not a number"),
        ({"type": "number"}, True, "not a number"),
        ({"type": "number"}, float("nan"), "not a number"),
        ({"type": "integer"}, 2.5, "not a whole number"),
        ({"type": "boolean"}, 1, "not a boolean"),
        (COLOR_TITLED, "Red", "not one of the options"),  # a label is not a value
        (COLOR_TITLED, ["r"], "not one of the options"),
        (TOPPINGS_TITLED, "h", "not a list of choices"),
        (TOPPINGS_TITLED, [1], "not a list of choices"),
        (TOPPINGS_TITLED, ["h", "h"], "chosen twice"),
        (TOPPINGS_TITLED, ["x"], "'x' is not one of the options"),
    ],
)
def test_validate_value_checks_types(prop: dict[str, Any], value: Any, problem: str) -> None:
    with pytest.raises(FieldError) as info:
        validate_value(one(prop), value)
    assert problem in info.value.message


@pytest.mark.parametrize("value", [3, 3.0])
def test_integer_accepts_integral_floats_from_json(value: float) -> None:
    validate_value(one({"type": "integer"}), value)


BIG = {
    "name": {"type": "string", "minLength": 1},
    "age": {"type": "integer", "minimum": 0},
    "color": COLOR_TITLED,
    "tops": TOPPINGS_TITLED,
    "ok": {"type": "boolean"},
    "note": {"type": "string"},
}


@pytest.mark.parametrize(
    ("content", "problems"),
    [
        ({"name": "Jo", "age": 3, "color": "g", "tops": ["h"], "ok": False}, []),
        ({"name": "Jo", "age": 3, "color": "g", "tops": ["h"], "ok": True, "note": None}, []),
        ({"name": "Jo", "age": 3, "color": "g", "tops": ["h"], "ok": True, "note": "x"}, []),
        (
            {"age": 3},
            ["'name': required; expected text of at least 1 character", "'tops': required; expected 1-2 of"],
        ),
        ({"name": None, "age": 3, "tops": ["h"]}, ["'name': required"]),
        ({"name": "Jo", "age": -1, "tops": ["h"]}, ["'age': too small"]),
        ({"name": "Jo", "age": 1, "tops": ["h"], "color": "Green"}, ["'color': not one of the options"]),
        ({"name": "Jo", "age": 1, "tops": []}, ["'tops': too few chosen"]),
        ({"name": "Jo", "age": 1, "tops": ["h"], "ok": "yes"}, ["'ok': not a boolean"]),
        ({"name": "Jo", "age": 1, "tops": ["h"], "extra\x1b[2J": 1}, ["'extra': not a field of this form"]),
    ],
)
def test_validate_content(content: dict[str, Any], problems: list[str]) -> None:
    found = validate_content(form(BIG, ["name", "age", "tops"]), content)
    assert len(found) == len(problems)
    for have, want in zip(sorted(found), sorted(problems), strict=True):
        assert have.startswith(want)


@pytest.mark.parametrize("content", [None, [], "x"])
def test_validate_content_needs_an_object(content: Any) -> None:
    assert validate_content(form(BIG), content) == ["the answer is not an object"]


# -- formats and the schema jsonschema checks against ------------------------------------------

FORMATTED = {
    "email": {"type": "string", "format": "email"},
    "born": {"type": "string", "format": "date"},
    "when": {"type": "string", "format": "date-time"},
    "site": {"type": "string", "format": "uri"},
}


def test_whole_answer_with_bad_formats_names_each_field() -> None:
    bad = {"email": "a@b", "born": "2023-02-29", "when": "2025-03-01T25:00:00Z", "site": "mailto:x@example.com"}
    assert validate_content(form(FORMATTED), bad) == [
        "'email': not a valid email; expected an email address like name@example.com",
        "'born': not a valid date; expected a date like 2025-03-01",
        "'when': not a valid date-time; expected a date and time with offset like 2025-03-01T14:30:00Z",
        "'site': not a valid uri; expected a URL like https://example.com/",
    ]
    good = {
        "email": "ada@example.com",
        "born": "1815-12-10",
        "when": "1815-12-10T08:00:00+01:00",
        "site": "https://example.com/ada",
    }
    assert validate_content(form(FORMATTED), good) == []


@pytest.mark.parametrize("text", ["https://example.com/<b>", "https://例え.jp/", "https://exa^mple.com/", "https://"])
def test_uri_is_rfc_3986_with_a_host(text: str) -> None:
    """JSON Schema's `uri` is RFC 3986 (ASCII; `iri` is the Unicode one): what a server's own validator expects."""
    with pytest.raises(FieldError) as info:
        parse_answer(one({"type": "string", "format": "uri"}), text)
    assert info.value.message.startswith("not a valid uri;")


def test_a_value_with_several_problems_is_told_the_most_basic_one() -> None:
    field = one({"type": "string", "format": "email", "minLength": 5})
    with pytest.raises(FieldError) as info:
        validate_value(field, "a@b")
    assert info.value.message.startswith("too short;")  # then, once longer, the format
    with pytest.raises(FieldError) as info:
        validate_value(field, 12345)
    assert info.value.message.startswith("not text;")


@pytest.mark.parametrize(
    ("prop", "schema"),
    [
        ({"type": "string", "format": "date", "maxLength": 10}, {"type": "string", "format": "date", "maxLength": 10}),
        ({"type": "integer", "minimum": 1}, {"type": "integer", "minimum": 1}),
        ({"type": "boolean", "title": "OK?"}, {"type": "boolean"}),
        (COLOR_LEGACY, {"type": "string", "enum": ["r", "g", "b"]}),
        (COLOR_TITLED, {"type": "string", "enum": ["r", "g", "b"]}),
        (
            TOPPINGS_TITLED,
            {
                "type": "array",
                "items": {"type": "string", "enum": ["h", "c", "o"]},
                "uniqueItems": True,
                "minItems": 1,
                "maxItems": 2,
            },
        ),
    ],
)
def test_field_json_schema_is_the_plain_form_of_each_shape(prop: dict[str, Any], schema: dict[str, Any]) -> None:
    assert one(prop).json_schema() == schema


def test_jsonschema_is_imported_only_when_a_value_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """It costs tens of milliseconds; a form without defaults is parsed (and its secrets looked for) without it.
    In process: with jsonschema unimportable, the package is imported afresh (new module objects, as a new
    process imports it; the loaded ones are put back after), parses the form and looks for secrets; checking
    a value is what reaches for jsonschema; with jsonschema back, the value is checked."""
    import importlib
    import sys

    loaded = [name for name in sys.modules if name.partition(".")[0] == "mcp_sampling_proxy"]
    try:
        with monkeypatch.context() as fresh:
            for name in loaded:
                fresh.delitem(sys.modules, name)
            fresh.setitem(sys.modules, "jsonschema", None)  # `import jsonschema` now raises ImportError
            forms = importlib.import_module("mcp_sampling_proxy.approval.forms")
            form = forms.parse_form({"type": "object", "properties": {"e": {"type": "string", "format": "email"}}})
            forms.secret_reasons(form, "hello")
            with pytest.raises(ImportError, match="jsonschema"):
                forms.validate_content(form, {"e": "nope"})
    finally:  # only the loaded modules stay: a module first imported above belongs to the fresh copies
        for name in [name for name in sys.modules if name.partition(".")[0] == "mcp_sampling_proxy"]:
            if name not in loaded:
                del sys.modules[name]
    assert len(forms.validate_content(form, {"e": "nope"})) == 1


# -- apply_defaults ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("properties", "required", "content"),
    [
        ({}, [], {}),
        ({"a": {"type": "string"}}, [], {}),  # optional without default: left out
        ({"a": {"type": "string", "default": "x"}, "b": {"type": "integer"}}, [], {"a": "x"}),
        (
            {
                "s": {"type": "string", "default": "x"},
                "n": {"type": "number", "default": 1.5},
                "i": {"type": "integer", "default": 2},
                "b": {"type": "boolean", "default": False},
                "e": {**COLOR_LEGACY, "default": "r"},
                "m": {**TOPPINGS_TITLED, "default": ["h", "c"]},
            },
            ["s", "n", "i", "b", "e", "m"],
            {"s": "x", "n": 1.5, "i": 2, "b": False, "e": "r", "m": ["h", "c"]},
        ),
        ({"a": {"type": "string", "default": "x"}, "b": {"type": "string"}}, ["b"], None),
        ({"a": {"type": "integer", "maximum": 1, "default": 5}}, ["a"], None),  # invalid default is no default
    ],
)
def test_apply_defaults(properties: dict[str, Any], required: list[str], content: dict[str, Any] | None) -> None:
    parsed = form(properties, required)
    assert apply_defaults(parsed) == content
    if content is not None:
        assert validate_content(parsed, content) == []


# -- sensitive_fields -------------------------------------------------------------------------

SECRET = [
    {"name": "password"},
    {"name": "Passwords"},
    {"name": "user_passwd"},
    {"name": "passphrase"},
    {"name": "pin"},
    {"name": "PINCode"},
    {"name": "userPIN"},
    {"name": "clientSecret"},
    {"name": "secret"},
    {"name": "token"},
    {"name": "access_tokens"},
    {"name": "apiKey"},
    {"name": "APIKey"},
    {"name": "api-key"},
    {"name": "apikey"},
    {"name": "API_KEY"},
    {"name": "aws_access_key_id"},
    {"name": "privateKey"},
    {"name": "private key"},
    {"name": "ccNum", "title": "Credit card"},
    {"name": "cardNumber"},
    {"name": "cvv"},
    {"name": "CVC2"},
    {"name": "iban"},
    {"name": "ssn"},
    {"name": "x", "title": "Social Security number"},
    {"name": "x", "description": "Enter the 4-digit PIN sent to your phone."},
    {"name": "x", "description": "Your GitHub personal access token"},
    {"name": "x", "format": "password"},
    {"name": "code", "kind": "integer", "title": "PIN"},
]
NOT_SECRET = [
    {"name": "username"},
    {"name": "tokenizer"},
    {"name": "x", "title": "Tokenizer to use"},
    {"name": "pinned"},
    {"name": "x", "description": "Show pinned messages first"},
    {"name": "spinner"},
    {"name": "secretary"},
    {"name": "max_tokens", "kind": "integer"},
    {"name": "maxTokens", "kind": "integer"},
    {"name": "x", "kind": "integer", "title": "Token count"},
    {"name": "keyword"},
    {"name": "monkey"},
    {"name": "passage"},
    {"name": "access_level"},
    {"name": "email", "format": "email"},
    # a yes/no or a choice from a list cannot carry a secret
    {"name": "remember_password", "kind": "boolean"},
    {"name": "token_type", "kind": "enum"},
]


def _secret_form(spec: dict[str, Any]) -> Form:
    kind = spec.get("kind", "string")
    props: dict[str, dict[str, Any]] = {
        "string": {"type": "string"},
        "integer": {"type": "integer"},
        "boolean": {"type": "boolean"},
        "enum": {"type": "string", "enum": ["bearer", "basic"]},
    }
    prop = props[kind]
    for key in ("title", "description", "format"):
        if key in spec:
            prop = {**prop, key: spec[key]}
    return form({spec["name"]: prop, "other": {"type": "string", "title": "Full name"}})


@pytest.mark.parametrize("spec", SECRET, ids=lambda spec: str(spec))
def test_sensitive_fields_true_positives(spec: dict[str, Any]) -> None:
    assert sensitive_fields(_secret_form(spec)) == [spec["name"]]


@pytest.mark.parametrize("spec", NOT_SECRET, ids=lambda spec: str(spec))
def test_sensitive_fields_false_positives(spec: dict[str, Any]) -> None:
    assert sensitive_fields(_secret_form(spec)) == []


def test_sensitive_fields_keep_form_order() -> None:
    parsed = form({"pin": {"type": "string"}, "name": {"type": "string"}, "api_token": {"type": "string"}})
    assert sensitive_fields(parsed) == ["pin", "api_token"]
