"""The base of every benchmark's stage settings: frozen pydantic models that also load from YAML
mappings, where an unknown key or a wrong type is a one-line error naming the key
(``SettingsError``, worded by ``engine.validation.format_error`` as every document's errors
are)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, ValidationError, WrapValidator

from charactereval_lib.engine.generation.base import ConfigError
from charactereval_lib.engine.validation import Document, format_error


class SettingsError(ConfigError):
    """Settings that cannot be used (an unknown key, a wrong type, an impossible value)."""


def _keep_int(value: Any, handler: Any) -> Any:
    # A whole number given for a number field stays an int (YAML's and the command line's 0 is not
    # 0.0): a request's digest covers its JSON, where the two differ.
    checked = handler(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else checked


# A number field: an int or a float, never a bool or a string.
Number = Annotated[float, WrapValidator(_keep_int)]
# Names given as a YAML list or a tuple, kept as a tuple.
Names = Annotated[tuple[str, ...], BeforeValidator(lambda value: tuple(value) if isinstance(value, list) else value)]


class Settings(Document):
    """Settings of a stage, shared by the pipeline's and a benchmark package's own: frozen,
    every key checked with its type (no coercion: ``'4'`` is no int), unknown keys refused,
    ``from_mapping`` loads a YAML section and names where a problem was found. A subclass checks
    what its fields cannot say alone in ``model_post_init``, raising ``SettingsError``."""

    # Validators are built on first use: the command line reads these classes' defaults to build
    # its parser, and `--help` should not pay for building them.
    model_config = ConfigDict(defer_build=True)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise SettingsError(format_error(exc, model=type(self))) from None

    @classmethod
    def keys(cls) -> list[str]:
        return list(cls.model_fields)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str = "settings"):
        """Settings from a mapping (a YAML section); unknown keys and wrong types are errors
        that name the key and ``where`` it was found."""
        try:
            return cls.model_validate(dict(values))
        except ValidationError as exc:
            raise SettingsError(format_error(exc, where, model=cls)) from None

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump()

    def replace(self, **changes: Any):
        """A copy with ``changes``, checked as a new one is."""
        return type(self)(**{**self.as_dict(), **changes})

    @classmethod
    def default(cls, name: str) -> Any:
        """A field's default: what a command-line option that is left out means (None for a
        required field)."""
        field = cls.model_fields[name]
        return None if field.is_required() else field.default


def positive(name: str, value: int | float | None) -> None:
    if value is not None and value <= 0:
        raise SettingsError(f"{name} must be a positive number, got {value}")


def not_negative(name: str, value: int | float | None) -> None:
    if value is not None and value < 0:
        raise SettingsError(f"{name} must not be negative, got {value}")
