"""The one way a configuration checks its fields: the job's sections, the model's config and the
data's masking all declare their rules beside their fields, and a value outside them is refused
here with where it came from (a file and line, an override, a config file) and the field's name.

Rules are class attributes of the dataclass: `CHOICES` (field -> allowed values) and `RANGES`
(field -> ">0", ">=N", or an interval such as "[0,1)"). A field's type comes from its annotation:
an int is an int (a bool or a float with an integer value is refused: a config that says 12.0
layers was not written for this model), a float any finite number (an int passes), a tuple of
floats a list of that many numbers, a `tuple[str, ...]` a list of strings (a repeated flag).
"""

from __future__ import annotations

import dataclasses
import math
import typing

from roberta.errors import UserError

_UnionType = type(int | None)


def check_fields(section: object, where: str, prefix: str = "") -> None:
    """Every field of the dataclass `section` of its type and within its rules; `prefix` names
    the section in the message ("train." for the job's [train])."""
    hints = field_types(type(section))
    for field in dataclasses.fields(section):
        _check(type(section), field.name, getattr(section, field.name), hints[field.name], where, prefix)


def check_value(cls: type, name: str, value, where: str, prefix: str = ""):
    """`value` for field `name` of the dataclass `cls` as the field holds it (ints as floats where a
    float is wanted, lists as tuples), or a UserError "where: field 'prefix.name' must be ..."."""
    return _check(cls, name, value, field_types(cls)[name], where, prefix)


def _check(cls: type, name: str, value, hint, where: str, prefix: str):
    label, given = f"{prefix}{name}", value
    value = _typed(value, hint, label, where)
    choices = getattr(cls, "CHOICES", {}).get(name)
    if choices and value is not None and value not in choices:  # None: an optional field not given
        _refuse(where, label, f"one of {', '.join(choices)}", given)
    bounds = getattr(cls, "RANGES", {}).get(name)
    if bounds and value is not None and not all(_within(v, bounds) for v in _items(value)):
        _refuse(where, label, _describe(bounds), given)
    return value


def _refuse(where: str, label: str, requirement: str, value) -> typing.NoReturn:
    raise UserError(f"{where}: field {label!r} must be {requirement}, not {value!r}")


def field_types(cls: type) -> dict[str, object]:
    """The annotated type of each field of the dataclass `cls` (its rules left out)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _typed(value, hint, label: str, where: str):
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, _UnionType) else (hint,)
    for option in options:
        if option is type(None) and value is None:
            return value
        if option is bool and isinstance(value, bool):
            return value
        if option is int and type(value) is int:
            return value
        if option is float and type(value) in (int, float) and math.isfinite(value):
            return float(value)
        if option is str and isinstance(value, str):
            return value
        if dataclasses.is_dataclass(option) and isinstance(value, option):  # a nested section checks itself
            return value
        if option == tuple[str, ...] and isinstance(value, (list, tuple)):
            if all(isinstance(v, str) for v in value):
                return tuple(value)
        elif typing.get_origin(option) is tuple and isinstance(value, (list, tuple)):
            kinds = typing.get_args(option)
            if len(value) == len(kinds) and all(type(v) in (int, float) and math.isfinite(v) for v in value):
                return tuple(float(v) for v in value)
    _refuse(where, label, " or ".join(_NAMES.get(o, str(o)) for o in options if o is not type(None)), value)


_NAMES = {
    int: "an integer",
    float: "a finite number",
    bool: "true or false",
    str: "a string",
    tuple[float, float]: "a list of 2 numbers",
    tuple[str, ...]: "a list of strings",
}


def _items(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _within(value: float, bounds: str) -> bool:
    if bounds == ">0":
        return value > 0
    if bounds.startswith(">="):
        return value >= float(bounds[2:])
    low, high = bounds[1:-1].split(",")
    above = value >= float(low) if bounds[0] == "[" else value > float(low)
    below = value <= float(high) if bounds[-1] == "]" else value < float(high)
    return above and below


def _describe(bounds: str) -> str:
    if bounds == ">0":
        return "positive"
    if bounds.startswith(">="):
        return f"at least {bounds[2:]}"
    return f"in {bounds.replace(',', ', ')}"
