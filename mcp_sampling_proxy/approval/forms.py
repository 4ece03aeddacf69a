"""Elicitation forms: a server's `requestedSchema` as fields a console can ask for one at a time.

Pure (no I/O). `parse_form` turns the restricted JSON Schema of an `elicitation/create` form
request (2025-11-25: a flat object of string / number / integer / boolean properties and the
enum shapes — legacy `enum` + `enumNames`, titled `oneOf: [{const, title}]`, and multi-select
`type: array` with `items: {enum}` or `items: {anyOf: [{const, title}]}`) into `Field`s, and
raises `FormError` for anything else, so the caller declines the request rather than guessing.

Every string a server provides for display (titles, descriptions, option labels, values and
defaults when shown) is passed through `sanitize.strip_controls` and flattened to one line
where it is shown inline. Values themselves are kept exactly as sent, because they go back.

A console drives a field with `prompt_text()` and `parse_answer()`; an answer that arrives
whole (the companion console, a policy) is checked with `validate_content()`. Values are
checked by `jsonschema` (Draft 2020-12 and its FormatChecker for email, uri, date, date-time)
against each field's plain schema (`Field.json_schema()`), imported only when a value is
checked; this module turns its errors into one short line that says what is expected. The
MCP restrictions above are ours: jsonschema would accept any schema. A policy that
accepts defaults uses `apply_defaults()`; `sensitive_fields()` names fields that look like
secrets, which the spec says servers must not ask for in a form.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from msgspec import Struct
from msgspec.structs import replace

from mcp_sampling_proxy.text.sanitize import folded, one_line, strip_controls

KINDS = ("string", "number", "integer", "boolean", "enum", "multi")
FORMATS = ("email", "uri", "date", "date-time")
# A form is asked for field by field on a console: beyond these it is abuse, not a form.
MAX_FIELDS = 100
MAX_OPTIONS = 500

_DEFAULT_SHOWN = 60  # characters of a string default shown in a prompt


class FormError(ValueError):
    """The requested schema is not a form this proxy can ask for; decline the request."""


class FieldError(ValueError):
    """A value for one field is not acceptable; `message` says what is expected."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Option(Struct, frozen=True):
    value: str  # exactly as the server sent it: this is what goes back
    label: str  # sanitised, one line: what the user sees


class Field(Struct, frozen=True):
    name: str  # the property name, exactly as sent (the key of the answer)
    kind: str  # one of KINDS
    title: str | None = None  # sanitised, one line
    description: str | None = None  # sanitised (newlines kept)
    required: bool = False
    default: Any = None  # None when absent or when the server's default was not a valid value
    options: list[Option] | None = None  # enum and multi only, in the server's order
    multi: bool = False  # kind == "multi"
    minimum: int | float | None = None
    maximum: int | float | None = None
    min_length: int | None = None
    max_length: int | None = None
    format: str | None = None  # as sent; only FORMATS are checked
    min_items: int | None = None
    max_items: int | None = None

    @property
    def label(self) -> str:
        """The name to show: the title, else the property name (sanitised, one line)."""
        return _line(self.title) or _line(self.name) or "(unnamed)"

    def json_schema(self) -> dict[str, Any]:
        """The field as plain JSON Schema: what a value is checked against (`validate_value`).

        Built from the parsed field, not the server's text, so every enum shape becomes one `enum`
        of values and a multi-select also refuses an option chosen twice."""
        schema: dict[str, Any]
        if self.kind == "boolean":
            schema = {"type": "boolean"}
        elif self.kind in ("number", "integer"):
            schema = {"type": self.kind, "minimum": self.minimum, "maximum": self.maximum}
        elif self.kind == "enum":
            schema = {"type": "string", "enum": [o.value for o in self.options or []]}
        elif self.kind == "multi":
            schema = {
                "type": "array",
                "items": {"type": "string", "enum": [o.value for o in self.options or []]},
                "uniqueItems": True,
                "minItems": self.min_items,
                "maxItems": self.max_items,
            }
        else:
            schema = {
                "type": "string",
                "minLength": self.min_length,
                "maxLength": self.max_length,
                "format": self.format,
            }
        return {key: value for key, value in schema.items() if value is not None}

    def prompt_text(self) -> str:
        """One human line: label, '*' if required, what to type, numbered options, default."""
        text = self.label + ("*" if self.required else "")
        hint = self._hint()
        if hint:
            text += f" ({hint})"
        if self.options is not None:
            text += ": " + "  ".join(f"{i}) {_line(o.label)}" for i, o in enumerate(self.options, 1))
        if self.default is not None:
            text += f" [default: {self.show(self.default)}]"
        return text

    def expected(self) -> str:
        """What an acceptable answer looks like, for error messages."""
        if self.kind == "boolean":
            return "yes or no (y/n)"
        if self.kind in ("number", "integer"):
            what = "a whole number" if self.kind == "integer" else "a number"
            if self.minimum is not None and self.maximum is not None:
                return f"{what} from {_num(self.minimum)} to {_num(self.maximum)}"
            span = _range(self.minimum, self.maximum)
            return f"{what} {span}" if span else what
        if self.kind == "enum":
            return f"one of {self._numbered()} (its number, value or name)"
        if self.kind == "multi":
            count = _count(self.min_items, self.max_items)
            return f"{count} of {self._numbered()}, separated by commas (numbers, values or names)"
        what = {
            "email": "an email address like name@example.com",
            "uri": "a URL like https://example.com/",
            "date": "a date like 2025-03-01",
            "date-time": "a date and time with offset like 2025-03-01T14:30:00Z",
        }.get(self.format or "", "text")
        length = _length(self.min_length, self.max_length)
        return f"{what} of {length}" if length else what

    def show(self, value: Any) -> str:
        """A value of this field as the user would recognise it (labels, yes/no), sanitised."""
        if isinstance(value, bool):
            return "yes" if value else "no"
        if self.options is not None:
            labels = {o.value: o.label for o in self.options}
            values = value if isinstance(value, list) else [value]
            return ", ".join(_line(labels.get(v, str(v))) for v in values)
        if isinstance(value, int | float):
            return _num(value)
        return _excerpt(str(value), _DEFAULT_SHOWN)

    def _hint(self) -> str:
        if self.kind == "boolean":
            return "y/n"
        if self.kind in ("number", "integer"):
            what = "whole number" if self.kind == "integer" else "number"
            span = _range(self.minimum, self.maximum)
            return f"{what}, {span}" if span else what
        if self.kind == "enum":
            return "pick one"
        if self.kind == "multi":
            return f"pick {_count(self.min_items, self.max_items)}, comma-separated"
        parts = [self.format if self.format in FORMATS else "text"]
        length = _length(self.min_length, self.max_length)
        if length:
            parts.append(length)
        return ", ".join(parts)

    def _numbered(self) -> str:
        return ", ".join(f"{i}) {_line(o.label)}" for i, o in enumerate(self.options or [], 1))


class Form(Struct, frozen=True):
    fields: list[Field]

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]


# -- parsing the schema -----------------------------------------------------------------------


def parse_form(schema: Any) -> Form:
    """The fields of a flat object schema; `FormError` for anything this proxy cannot ask."""
    if not isinstance(schema, dict):
        raise FormError("the requested schema is not an object")
    if "$ref" in schema:
        raise FormError("the requested schema uses $ref, which is not supported")
    if schema.get("type", "object") != "object":
        raise FormError(f"the requested schema must be of type 'object', not {_quote(schema.get('type'))}")
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        raise FormError("the requested schema's 'properties' is not an object")
    if len(properties) > MAX_FIELDS:
        raise FormError(f"the form has {len(properties)} fields; at most {MAX_FIELDS} are supported")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise FormError("the requested schema's 'required' is not a list of names")
    for name in required:
        if name not in properties:
            raise FormError(f"required field {_quote(name)} is not defined in 'properties'")
    return Form([_parse_field(name, prop, name in required) for name, prop in properties.items()])


def _parse_field(name: str, prop: Any, required: bool) -> Field:
    where = f"field {_quote(name)}"
    if not isinstance(prop, dict):
        raise FormError(f"{where}: its schema is not an object")
    prop = _unwrap_nullable(prop)
    if "$ref" in prop:
        raise FormError(f"{where}: $ref is not supported")
    kind_of = prop.get("type")
    if kind_of == "object" or "properties" in prop:
        raise FormError(f"{where}: nested objects are not supported")
    for key in ("anyOf", "allOf", "not", "if"):
        if key in prop:
            raise FormError(f"{where}: '{key}' is not supported in a form field")
    if kind_of is None and ("enum" in prop or "oneOf" in prop):
        kind_of = "string"
    common: dict[str, Any] = {
        "name": name,
        "title": _text(prop.get("title"), where, "title", one_line=True),
        "description": _text(prop.get("description"), where, "description", one_line=False),
        "required": required,
    }
    if kind_of == "string" and ("enum" in prop or "oneOf" in prop):
        field = Field(kind="enum", options=_single_options(prop, where), **common)
    elif kind_of == "string":
        fmt = prop.get("format")
        if fmt is not None and not isinstance(fmt, str):
            raise FormError(f"{where}: 'format' is not a string")
        field = Field(
            kind="string",
            format=fmt,
            min_length=_count_kw(prop, "minLength", where),
            max_length=_count_kw(prop, "maxLength", where),
            **common,
        )
        _check_order(field.min_length, field.max_length, where, "minLength", "maxLength")
    elif kind_of in ("number", "integer"):
        field = Field(
            kind=kind_of,
            minimum=_number_kw(prop, "minimum", where),
            maximum=_number_kw(prop, "maximum", where),
            **common,
        )
        _check_order(field.minimum, field.maximum, where, "minimum", "maximum")
        low, high = field.minimum, field.maximum
        if kind_of == "integer" and low is not None and high is not None and math.ceil(low) > math.floor(high):
            raise FormError(f"{where}: no whole number lies between minimum and maximum")
    elif kind_of == "boolean":
        field = Field(kind="boolean", **common)
    elif kind_of == "array":
        options = _multi_options(prop.get("items"), where)
        field = Field(
            kind="multi",
            multi=True,
            options=options,
            min_items=_count_kw(prop, "minItems", where),
            max_items=_count_kw(prop, "maxItems", where),
            **common,
        )
        _check_order(field.min_items, field.max_items, where, "minItems", "maxItems")
        if field.min_items is not None and field.min_items > len(options):
            raise FormError(f"{where}: minItems is {field.min_items} but there are only {len(options)} options")
    elif kind_of is None:
        raise FormError(f"{where}: has no 'type'")
    else:
        raise FormError(f"{where}: type {_quote(kind_of)} is not supported")
    if "default" in prop:
        try:
            validate_value(field, prop["default"])
        except FieldError:
            pass  # a default that is not a valid value is ignored: the user is asked instead
        else:
            default = prop["default"]
            field = replace(field, default=list(default) if isinstance(default, list) else default)
    return field


def _unwrap_nullable(prop: dict[str, Any]) -> dict[str, Any]:
    """`anyOf: [X, {type: null}]` (how some SDKs write an optional field) as X itself.

    Optional is already expressed by `required`; the outer keys (title, default...) win."""
    any_of = prop.get("anyOf")
    if not isinstance(any_of, list) or len(any_of) != 2 or {"type": "null"} not in any_of:
        return prop
    other = any_of[1] if any_of[0] == {"type": "null"} else any_of[0]
    if not isinstance(other, dict) or other == {"type": "null"}:
        return prop
    return {**other, **{key: value for key, value in prop.items() if key != "anyOf"}}


def _single_options(prop: dict[str, Any], where: str) -> list[Option]:
    if "enum" in prop:
        values = _string_list(prop["enum"], where, "enum")
        names = prop.get("enumNames")
        if isinstance(names, list) and len(names) == len(values) and all(isinstance(n, str) for n in names):
            labels = names
        else:
            labels = values  # missing or malformed enumNames: show the values, never misaligned names
        return _options(list(zip(values, labels, strict=True)), where)
    return _options(_const_titles(prop["oneOf"], where, "oneOf"), where)


def _multi_options(items: Any, where: str) -> list[Option]:
    if not isinstance(items, dict):
        raise FormError(f"{where}: arrays are only supported as multi-select enums ('items' with 'enum' or 'anyOf')")
    if items.get("type", "string") != "string" and "anyOf" not in items:
        raise FormError(f"{where}: arrays are only supported as multi-select enums of strings")
    if "enum" in items:
        values = _string_list(items["enum"], where, "items.enum")
        return _options([(v, v) for v in values], where)
    if "anyOf" in items:
        return _options(_const_titles(items["anyOf"], where, "items.anyOf"), where)
    raise FormError(f"{where}: arrays are only supported as multi-select enums ('items' with 'enum' or 'anyOf')")


def _string_list(values: Any, where: str, key: str) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise FormError(f"{where}: '{key}' must be a list of strings")
    return values


def _const_titles(entries: Any, where: str, key: str) -> list[tuple[str, str]]:
    if not isinstance(entries, list):
        raise FormError(f"{where}: '{key}' must be a list of {{const, title}} options")
    pairs = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("const"), str):
            raise FormError(f"{where}: every '{key}' entry must be an object with a string 'const'")
        title = entry.get("title")
        pairs.append((entry["const"], title if isinstance(title, str) else entry["const"]))
    return pairs


def _options(pairs: list[tuple[str, str]], where: str) -> list[Option]:
    if not pairs:
        raise FormError(f"{where}: has no options to choose from")
    if len(pairs) > MAX_OPTIONS:
        raise FormError(f"{where}: has {len(pairs)} options; at most {MAX_OPTIONS} are supported")
    values = [v for v, _ in pairs]
    if len(set(values)) != len(values):
        raise FormError(f"{where}: lists the same option value twice")
    return [Option(v, _line(label) or _line(v) or "(blank)") for v, label in pairs]


def _text(value: Any, where: str, key: str, *, one_line: bool) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise FormError(f"{where}: '{key}' is not a string")
    return _line(value) if one_line else strip_controls(value).strip()


def _count_kw(prop: dict[str, Any], key: str, where: str) -> int | None:
    value = prop.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FormError(f"{where}: '{key}' must be a non-negative integer")
    return value


def _number_kw(prop: dict[str, Any], key: str, where: str) -> int | float | None:
    value = prop.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FormError(f"{where}: '{key}' must be a number")
    return value


def _check_order(low: float | None, high: float | None, where: str, low_key: str, high_key: str) -> None:
    if low is not None and high is not None and low > high:
        raise FormError(f"{where}: {low_key} is greater than {high_key}")


# -- answers ----------------------------------------------------------------------------------


def parse_answer(field: Field, text: str) -> Any:
    """The value of what the user typed for a field; `FieldError` says what is expected instead.

    Surrounding whitespace is ignored. An empty answer means the default, else None (no value)
    for an optional field; for a required field without a default it is an error.
    """
    text = text.strip()
    if not text:
        if field.default is not None:
            return list(field.default) if isinstance(field.default, list) else field.default
        if not field.required:
            return None
        raise FieldError(f"required; expected {field.expected()}")
    if field.kind == "boolean":
        value: Any = _parse_bool(text, field)
    elif field.kind in ("number", "integer"):
        value = _parse_number(text, field)
    elif field.kind == "enum":
        value = _pick(field, text)
    elif field.kind == "multi":
        value = _parse_multi(text, field)
    else:
        value = text
    validate_value(field, value)
    return value


def validate_value(field: Field, value: Any) -> None:
    """Check one (typed) value against its field; `FieldError` if it does not fit.

    The checking is jsonschema's (Draft 2020-12 with its format checker) against the field's
    schema (`Field.json_schema`); this only puts what went wrong in words a user understands,
    one problem at a time, the most basic first (a wrong type before a range or a format).
    """
    if field.kind in ("number", "integer") and isinstance(value, float) and not math.isfinite(value):
        # JSON has no NaN or Infinity, but Python's json.loads reads them and to jsonschema NaN is a number.
        raise FieldError(f"not a number; expected {field.expected()}")
    errors = list(_validator(field).iter_errors(value))
    if errors:
        first = min(errors, key=lambda e: (_RANK.get(str(e.validator), len(_RANK)), list(e.absolute_path)))
        raise FieldError(f"{_problem(field, value, first)}; expected {field.expected()}")


def validate_content(form: Form, content: Any) -> list[str]:
    """Problems with a complete answer (empty when it is acceptable), one line each.

    A None value counts as absent. Keys the form does not define are problems too.
    """
    if not isinstance(content, dict):
        return ["the answer is not an object"]
    known = set(form.names)
    problems = [f"{_quote(key)}: not a field of this form" for key in content if key not in known]
    for field in form:
        value = content.get(field.name)
        if value is None:
            if field.required:
                problems.append(f"{_quote(field.name)}: required; expected {field.expected()}")
            continue
        try:
            validate_value(field, value)
        except FieldError as error:
            problems.append(f"{_quote(field.name)}: {error.message}")
    return problems


def apply_defaults(form: Form) -> dict[str, Any] | None:
    """The answer made of defaults alone (optional fields without one are left out);
    None when a required field has no default."""
    content: dict[str, Any] = {}
    for field in form:
        if field.default is None:
            if field.required:
                return None
            continue
        content[field.name] = list(field.default) if isinstance(field.default, list) else field.default
    return content


_TRUE = {"y", "yes", "true", "1"}
_FALSE = {"n", "no", "false", "0"}


def _parse_bool(text: str, field: Field) -> bool:
    word = text.casefold()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise FieldError(f"not yes or no; expected {field.expected()}")


def _parse_number(text: str, field: Field) -> int | float:
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise FieldError(f"not a number; expected {field.expected()}") from None
    if not math.isfinite(value):
        raise FieldError(f"not a finite number; expected {field.expected()}")
    if field.kind == "integer":
        if not value.is_integer():
            raise FieldError(f"not a whole number; expected {field.expected()}")
        return int(value)
    return value


def _pick(field: Field, text: str) -> str:
    """One option from its shown number, its exact value, or (case-insensitively) its value or label.

    The shown number wins: options whose values are themselves numbers can always be chosen by
    the number printed beside them.
    """
    options = field.options or []
    if re.fullmatch(r"[0-9]+", text) and 1 <= int(text) <= len(options):
        return options[int(text) - 1].value
    for option in options:
        if option.value == text:
            return option.value
    folded = text.casefold()
    for matches in (
        [o for o in options if o.value.casefold() == folded],
        [o for o in options if o.label.casefold() == folded],
    ):
        if len(matches) == 1:
            return matches[0].value
        if matches:
            raise FieldError(f"{_quote(text)} matches several options; type its number; expected {field.expected()}")
    raise FieldError(f"{_quote(text)} is not one of the options; expected {field.expected()}")


def _parse_multi(text: str, field: Field) -> list[str]:
    # A value that itself contains a comma can still be typed whole (or by number).
    try:
        return [_pick(field, text)]
    except FieldError:
        pass
    chosen: list[str] = []
    for token in text.split(","):
        token = token.strip()
        if not token:
            continue
        value = _pick(field, token)
        if value not in chosen:
            chosen.append(value)
    return chosen


def _values(field: Field) -> set[str]:
    return {o.value for o in field.options or []}


# -- checking values: jsonschema ------------------------------------------------------------

# Which of several problems with one value is told first: the most basic one.
_RANK = {"type": 0, "enum": 1, "uniqueItems": 2, "minItems": 3, "minLength": 3, "minimum": 3,
         "maxItems": 4, "maxLength": 4, "maximum": 4, "format": 5}  # fmt: skip
_WORDS = {
    "uniqueItems": "an option is chosen twice", "minItems": "too few chosen", "maxItems": "too many chosen",
    "minLength": "too short", "maxLength": "too long", "minimum": "too small", "maximum": "too large",
}  # fmt: skip


def prepare() -> None:
    """Import jsonschema and build the format checker (~60 ms of CPU the first time); callers on the
    event loop run it in a thread (`anyio.to_thread.run_sync(prepare)`) before a form is checked,
    so the relay does not stall while it loads."""
    from jsonschema import Draft202012Validator  # noqa: F401  # start-up: jsonschema costs ~190 ms, only forms need it

    _format_checker()


def _validator(field: Field) -> Any:
    """A Draft 2020-12 validator for the field's schema (jsonschema is imported here, on first use:
    it costs tens of milliseconds that a proxy which never sees a form should not pay at start)."""
    from jsonschema import Draft202012Validator  # start-up: jsonschema costs ~190 ms, only forms need it

    return Draft202012Validator(field.json_schema(), format_checker=_format_checker())


@functools.cache
def _format_checker() -> Any:
    """jsonschema's checks for the formats MCP forms may use (others are not checked, as the spec allows).

    `date` is jsonschema's own; `date-time` is RFC 3339 (rfc3339-validator) and `uri` RFC 3986
    (rfc3986-validator), which jsonschema uses when they are installed; both are dependencies.
    Two are stricter than the library, on purpose: a `uri` must also name a host (the user is asked
    for "a URL like https://example.com/", and `https://` or `mailto:x` are not that), and an
    `email` is checked by `_is_email`, because jsonschema only looks for an "@" ("a@b" passes).
    """
    from jsonschema import FormatChecker  # start-up: jsonschema costs ~190 ms, only forms need it

    try:
        checker = FormatChecker(formats=("date", "date-time", "uri"))
    except KeyError as missing:
        raise RuntimeError(
            f"jsonschema cannot check the {missing} format: reinstall mcp-sampling-proxy with its "
            "dependencies (rfc3339-validator, rfc3986-validator)"
        ) from None
    rfc3986, _ = checker.checkers["uri"]
    checker.checks("uri")(lambda text: not isinstance(text, str) or (rfc3986(text) and _has_host(text)))
    checker.checks("email")(lambda text: not isinstance(text, str) or _is_email(text))
    return checker


def _problem(field: Field, value: Any, error: Any) -> str:
    """One jsonschema `ValidationError` about a field's value, in the user's words."""
    keyword = str(error.validator)
    if keyword == "type":
        if field.kind == "boolean":
            return "not a boolean"
        if field.kind == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
            return "not a whole number"
        if field.kind in ("number", "integer"):
            return "not a number"
        if field.kind == "enum":
            return "not one of the options"
        return "not a list of choices" if field.multi else "not text"
    if keyword == "enum":
        return f"{_quote(error.instance)} is not one of the options" if field.multi else "not one of the options"
    if keyword == "format":
        return f"not a valid {field.format}"
    return _WORDS.get(keyword) or _excerpt(str(error.message), 100)


# local@domain: no leading, trailing or doubled dots; a dotted domain whose last label is letters.
_EMAIL = re.compile(
    r"(?!\.)(?!.*\.\.)[\w.!#$%&'*+/=?^`{|}~-]{1,64}(?<!\.)"
    r"@(?:[^\W_](?:[\w-]{0,61}[^\W_])?\.)+[^\W\d_]{2,63}"
)


def _is_email(text: str) -> bool:
    return len(text) <= 254 and _EMAIL.fullmatch(text) is not None


def _has_host(text: str) -> bool:
    try:
        return bool(urlsplit(text).netloc)
    except ValueError:
        return False


# -- secrets ----------------------------------------------------------------------------------

_SECRET_WORDS = {
    "password", "passwd", "passcode", "passphrase", "pin", "secret", "token", "credential",
    "apikey", "cvv", "cvc", "iban", "ssn", "otp", "totp", "mfa", "mnemonic",
}  # fmt: skip
_SECRET_PHRASES = {
    ("api", "key"), ("access", "key"), ("private", "key"), ("client", "secret"), ("credit", "card"),
    ("card", "number"), ("social", "security"), ("security", "code"), ("2", "fa"), ("verification", "code"),
    ("seed", "phrase"), ("recovery", "phrase"), ("recovery", "code"), ("backup", "code"), ("bank", "account"),
    ("connection", "string"),
}  # fmt: skip
_SECRET_WORDS |= {"".join(phrase) for phrase in _SECRET_PHRASES}  # "apiKey" splits; "apikey" does not
_VOCABULARY = _SECRET_WORDS | {word for phrase in _SECRET_PHRASES for word in phrase}
# "max_tokens", "token count": a number of tokens, not a token.
_TOKEN_COUNTS = {"max", "min", "maximum", "minimum", "num", "number", "count", "limit", "budget", "usage"}
# "password policy", "token name", "secret santa": something about a secret, not the secret itself.
_ABOUT_A_SECRET = {
    "policy", "length", "strength", "hint", "manager", "rule", "requirement", "reset", "expiry", "expiration",
    "type", "name", "santa", "scope", "permission",
}  # fmt: skip
# A negation before a secret word in the same clause: "do not enter your password", "no API key needed".
_NEGATIONS = {"not", "no", "never", "without", "nor", "dont", "don't", "don’t"}
_CONTRAST = {"but", "instead", "however", "except"}  # ends a negation: "no account needed, but your PIN"
# "Don't forget your PIN", "never lose your passphrase": a negated verb that still asks for it.
_STILL_ASKS = {"forget", "worry", "hesitate", "lose", "miss", "skip"}
# Words: runs of lower case, capitalised words, all-caps runs (APIKey -> API, Key), digits.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+|[^\W\d_A-Za-z]+")
_CLAUSE_ENDS = set(".;:!?()[]\n")  # a negation never reaches past these
# Tokens of running text: words (with a contraction: "don't", "isn't"), commas, clause ends.
_TOKEN = re.compile(r"[^\W_]+(?:['’][^\W_]+)?|,|[.;:!?()\[\]\n]")


def _words(text: str) -> list[str]:
    words = []
    for match in _WORD.findall(text):
        word = match.casefold()
        if word.endswith("s") and word[:-1] in _VOCABULARY:  # plurals: passwords, tokens, keys
            word = word[:-1]
        words.append(word)
    return words


def _negation_marks(text: str) -> list[tuple[str, bool]]:
    """Each word of `text` (split as `_words` does) with whether a negation governs it.

    A negation ("not", "no", "never", "without", "don't", any "-n't") holds to the end of its
    clause: up to . ; : ! ? or brackets, a "but"/"instead", or a comma followed by more than a
    short list item ("do not give us your phone number, pin, or other info" stays negated;
    "don't worry, enter your password" does not).
    """
    tokens = _TOKEN.findall(text)
    marked: list[tuple[str, bool]] = []
    negated = False
    for i, token in enumerate(tokens):
        lower = token.casefold()
        if token == ",":
            rest = list(itertools.takewhile(lambda t: t != "," and t not in _CLAUSE_ENDS, tokens[i + 1 :]))
            if not (len(rest) <= 2 or (rest and rest[0].casefold() in {"or", "and", "nor"})):
                negated = False
            continue
        if token in _CLAUSE_ENDS:
            negated = False
            continue
        if lower in _CONTRAST:
            negated = False
        if lower in _NEGATIONS or lower.endswith(("n't", "n’t")):
            following = tokens[i + 1].casefold() if i + 1 < len(tokens) else ""
            negated = following not in _STILL_ASKS
            continue
        marked.extend((word, negated) for word in _words(token))
    return marked


def secret_phrase(text: str) -> str | None:
    """The words of `text` that ask for a secret ("password", "api key"), or None.

    Whole words only (names split at case changes, digits and punctuation; plurals count), so
    "tokenizer", "pinned", "keyboard" or "secretary" do not match. Not a secret: a negated
    mention ("never share your PIN"), a number of tokens ("max tokens", "token count"), and
    something about a secret rather than the secret ("password policy", "secret santa").
    """
    marked = _negation_marks(folded(text))
    words = [word for word, _ in marked]
    for i, (word, negated) in enumerate(marked):
        after = words[i + 1] if i + 1 < len(words) else ""
        pair = (word, after)
        if pair in _SECRET_PHRASES:
            hit, end = " ".join(pair), i + 1
        elif word in _SECRET_WORDS:
            hit, end = word, i
        else:
            continue
        if negated and not _asked_for_later(folded(text), hit):
            continue
        neighbours = set(words[max(i - 1, 0) : i] + words[i + 1 : i + 2])
        if hit == "token" and neighbours & _TOKEN_COUNTS:
            continue
        if end + 1 < len(words) and words[end + 1] in _ABOUT_A_SECRET:
            continue
        return hit
    return None


# "We will never ask for your password. Enter it here": a later clause that asks for "it" undoes a negation.
_INPUT_VERBS = {"enter", "type", "paste", "provide", "give", "put", "fill", "submit", "send", "share", "write"}
_BACK_REFERENCES = {"it", "this", "that", "them", "these", "those"}


def _asked_for_later(text: str, hit: str) -> bool:
    """True when, after the clause that mentions `hit` negated, a clause asks to enter "it" (or "this", "them")."""
    start = text.casefold().find(hit.split()[0])
    if start < 0:
        return False
    rest = _TOKEN.findall(text[start:])
    clause_ended = False
    for i, token in enumerate(rest):
        if token in _CLAUSE_ENDS or token.casefold() in _CONTRAST:
            clause_ended = True
            continue
        following = rest[i + 1].casefold() if i + 1 < len(rest) else ""
        if clause_ended and token.casefold() in _INPUT_VERBS and following in _BACK_REFERENCES:
            return True
    return False


def _looks_secret(text: str) -> bool:
    return secret_phrase(text) is not None


def _typed_fields(form: Form) -> list[Field]:
    """Fields the user types into: a yes/no or a choice from a list cannot carry a secret."""
    return [field for field in form if field.kind in ("string", "number", "integer")]


def secret_reasons(form: Form, message: str = "") -> list[str]:
    """Why this form looks like it asks for a secret (empty when it does not), one per cause.

    Each names what triggered it, for the log, the audit reason and the console warning:
    `field 'value' (format password)`, `field 'pin' (title): "pin code"`, `message: "password"`.
    The request message counts too ("Enter your database password" with one field named
    `value`), but only when the form has a field the user types into.
    """
    reasons = []
    typed = _typed_fields(form)
    phrase = secret_phrase(message) if typed else None
    if phrase is not None:
        reasons.append(f'message: "{phrase}"')
    for field in typed:
        reason = _field_reason(field)
        if reason is not None:
            reasons.append(f"field {_quote(field.name)} {reason}")
    return reasons


def _field_reason(field: Field) -> str | None:
    if (field.format or "").casefold() == "password":
        return "(format password)"
    for part, text in (("name", field.name), ("title", field.title), ("description", field.description)):
        phrase = secret_phrase(text or "")
        if phrase is not None:
            return f'({part}): "{phrase}"'
    return None


def sensitive_fields(form: Form) -> list[str]:
    """Names of fields that look like they ask for a secret (see `secret_reasons`).

    Only fields the user types into (string, number, integer) are considered. A field is
    sensitive when its format is "password", or its name, title or description asks for a
    secret word or phrase (`secret_phrase`).
    """
    return [field.name for field in _typed_fields(form) if _field_reason(field) is not None]


# -- small helpers ----------------------------------------------------------------------------


def _line(text: str | None) -> str:
    return one_line(text, len(text)) if text else ""


def _excerpt(text: str, limit: int) -> str:
    flat = _line(text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _quote(value: Any) -> str:
    return repr(_excerpt(str(value), 60))


def _num(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def _range(low: float | None, high: float | None) -> str:
    if low is not None and high is not None:
        joiner = " to " if low < 0 or high < 0 else "-"
        return f"{_num(low)}{joiner}{_num(high)}"
    if low is not None:
        return f"at least {_num(low)}"
    if high is not None:
        return f"at most {_num(high)}"
    return ""


def _length(low: int | None, high: int | None) -> str:
    if low and high is not None:
        return f"{low}-{high} characters"
    if low:
        return f"at least {low} character{'s' if low > 1 else ''}"
    if high is not None:
        return f"at most {high} character{'s' if high != 1 else ''}"
    return ""


def _count(low: int | None, high: int | None) -> str:
    if low and high is not None:
        return f"{low}" if low == high else f"{low}-{high}"
    if low:
        return f"at least {low}"
    if high is not None:
        return f"up to {high}"
    return "any"
