"""Validation of the workbench's documents by pydantic models, with one-line errors.

Batch configs, judge specs, ``run.json``, summaries and the pipeline's settings are read through
models derived from ``Document``, and ``format_error`` words every problem they find: one line
naming the file or source, the key (a dotted path such as
``models[2].max_tokens``; a caller may name an item better, e.g. a batch entry by its model
name), what was expected and what was got::

    batch.yaml: model 'x': subset: expected a positive integer, got 'many'
    batch.yaml: model 'x': generate: concurrency: expected an integer, got '4'
    batch.yaml: model 'x': generate: model: missing (required: a string)

A check worded by the model itself (``problem``, or a ValueError raised by a validator or by
``model_post_init``) is shown in its own words.

Unknown keys are refused with the accepted ones listed (a typo must not be ignored silently),
unless a model opts out for a reason it states (``extra = "ignore"`` or ``"allow"``).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

# The error type of every problem worded here (shown as it is, without "expected ...").
WORDED = "workbench"
# Longest shown input value: a damaged file can hold a whole document where a number belongs.
SHOWN_CHARS = 60

# pydantic's type errors, as "expected ..." (int_parsing: a key parsed from a JSON string).
_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "list_type": "a list",
    "tuple_type": "a list",
}
# Field types as an error names them (``type_named``).
_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", dict: "a mapping",
               list: "a list", tuple: "a list", type(None): "null"}

M = TypeVar("M", bound="Document")


def problem(message: str, at: str | None = None) -> PydanticCustomError:
    """A problem worded by the caller, raised inside a validator: pydantic locates it at the
    field (or model) validated; ``at`` names a key below that, for a model validator that
    checks keys together."""
    return PydanticCustomError(WORDED, "{message}", {"message": message, **({"at": at} if at else {})})


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def expect(what: str, check: Callable[[Any], bool]) -> BeforeValidator:
    """A field constraint worded as ``expected WHAT, got VALUE`` (``Annotated[T, expect(...)]``)."""

    def validate(value: Any) -> Any:
        if not check(value):
            raise problem(f"expected {what}, got {shown(value)}")
        return value

    # What a missing value of this field should have been (see ``expected_at``).
    validate.expected = what  # type: ignore[attr-defined]
    return BeforeValidator(validate)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Document(BaseModel):
    """A validated mapping: strict types (YAML/JSON ``"1"`` is not a number), unknown keys
    refused naming the key and listing the accepted ones, plus ``unknown_key_hint``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    unknown_key_hint: ClassVar[str] = ""

    @classmethod
    def accepted_keys(cls) -> list[str]:
        return sorted(field.alias or name for name, field in cls.model_fields.items())

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_keys(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and cls.model_config.get("extra") == "forbid":
            accepted = cls.accepted_keys()
            unknown = sorted(str(key) for key in data if key not in accepted)
            if unknown:
                raise problem(f"unknown key(s) {unknown}; expected some of {accepted}{cls.unknown_key_hint}")
        return data


def located(loc: tuple[int | str, ...]) -> str:
    """``('models', 2, 'max_tokens')`` as ``models[2].max_tokens``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def type_named(annotation: Any) -> str | None:
    """A field's type as an error names it (``an integer``, ``a number or null``, ``a list of
    strings``), or None for a type with no plain name (``Any``, a ``Literal``)."""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is Annotated:
        return type_named(arguments[0])
    if origin in (typing.Union, types.UnionType):
        names = [type_named(argument) for argument in arguments]
        return None if None in names else " or ".join(typing.cast(list[str], names))
    if origin in (list, tuple) and arguments and arguments[0] is str:
        return "a list of strings"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "a mapping"
    return _TYPE_NAMES.get(origin or annotation)


def _without_none(annotation: Any) -> Any:
    """``X`` of ``X | None`` (the type an item of an optional list is looked up in)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        others = [a for a in typing.get_args(annotation) if a is not type(None)]
        return others[0] if len(others) == 1 else annotation
    return annotation


def expected_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> str | None:
    """What the field at ``loc`` expects: what its ``expect`` constraint says, else its type
    (None where no field is declared there)."""
    annotation: Any = model
    metadata: list[Any] = []
    for part in loc:
        annotation = _without_none(annotation)
        if isinstance(part, int):
            arguments = typing.get_args(annotation)
            annotation, metadata = (arguments[0] if arguments else None), []
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel) and part in annotation.model_fields:
            field = annotation.model_fields[part]
            annotation, metadata = field.annotation, field.metadata
        else:
            return None
    worded = next((m.func.expected for m in metadata if hasattr(getattr(m, "func", None), "expected")), None)
    return worded or type_named(annotation)


def describe(error: Mapping[str, Any], model: type[BaseModel] | None = None) -> str:
    """What one pydantic error says: ``expected ..., got ...``, ``missing (required: ...)``, or
    the words of a check that worded its own problem."""
    kind, context, value = error["type"], error.get("ctx") or {}, error.get("input")
    loc = tuple(error["loc"])
    if kind == WORDED:
        return str(context.get("message", error["msg"]))
    if kind in ("value_error", "assertion_error") and context.get("error") is not None:
        # A ValueError of a validator or ``model_post_init``: its message says what is wrong.
        return str(context["error"])
    what = expected_at(model, loc) if model is not None and loc else None
    if kind == "missing":
        return f"missing (required: {what})" if what else "missing (required)"
    if kind in _EXPECTED:
        return f"expected {what or _EXPECTED[kind]}, got {shown(value)}"
    return f"{error['msg']}, got {shown(value)}"


def format_error(error: ValidationError, source: str | None = None, *,
                 label: Callable[[tuple[int | str, ...]], tuple[str, tuple[int | str, ...]]] | None = None,
                 root: str | None = None, model: type[BaseModel] | None = None) -> str:
    """One line for a ValidationError: ``SOURCE: KEY: expected WHAT, got VALUE`` of its first
    problem (and how many more there are). ``source`` names the file or section (None: values
    given directly, e.g. by command-line options, which the key names); ``label`` names the
    head of a location better (it returns the name and the rest of the location); ``root``
    names the whole document, when a problem is about it rather than one key; ``model`` (the
    one validated) says what a key expects."""
    errors = error.errors(include_url=False)
    first = errors[0]
    loc = tuple(first["loc"]) + tuple(filter(None, [(first.get("ctx") or {}).get("at")]))
    where = []
    if label is not None:
        name, loc = label(loc)
        if name:
            where.append(name)
    if loc:
        where.append(located(loc))
    elif not where and root:
        where.append(root)
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return ": ".join([*filter(None, [source]), *where, describe(first, model)]) + more


def validate(model: type[M], data: Any, source: str, error: type[Exception], **how: Any) -> M:
    """``model`` validated from ``data``, or ``error`` with one line (``format_error`` with ``how``)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(format_error(exc, source, model=model, **how)) from None
