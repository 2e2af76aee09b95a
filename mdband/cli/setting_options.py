"""click options generated from a settings dataclass (:mod:`mdband.md.setting_table`).

Each setting becomes ``--name-with-dashes``: booleans as ``--x/--no-x``, choices as
``click.Choice``, lists as a repeatable option whose values may also be comma-separated
(``--type-map O,H`` or ``--type-map O --type-map H``), except a list marked repeatable (file
names: one value per flag, commas kept). Every option defaults to None, so
only what was typed overrides a TOML file.
"""

from __future__ import annotations

import click
from click.core import ParameterSource

from mdband.cli.common import UserError
from mdband.md.setting_table import Spec, table

_CLICK_TYPES = {"int": int, "float": float, "str": str}


def option_for(spec: Spec):
    """Return the click option decorator of one setting."""
    if spec.kind == "bool" and not spec.is_list:
        decl = f"{spec.flag}/--no-{spec.flag[2:]}"
        return click.option(decl, spec.name, default=None, help=spec.help_text())
    kind: type | click.ParamType
    if spec.is_list:  # split and converted by given_settings, checked by the dataclass
        kind = str
    elif spec.choices:
        kind = click.Choice(spec.choices)
    else:
        kind = _CLICK_TYPES.get(spec.kind, str)
    return click.option(
        spec.flag,
        spec.name,
        type=kind,
        default=None,
        metavar=spec.metavar,
        multiple=spec.is_list or _repeatable(spec),
        help=spec.help_text(),
    )


def setting_options(cls):
    """Add one option per setting of dataclass ``cls``, in field order (a decorator)."""

    def decorate(fn):
        for spec in reversed(table(cls)):
            fn = option_for(spec)(fn)
        return fn

    return decorate


def given_settings(ctx: click.Context, cls, params: dict) -> dict:
    """Return the settings of ``cls`` typed on the command line (field name -> value)."""
    out = {}
    for spec in table(cls):
        if ctx.get_parameter_source(spec.name) != ParameterSource.COMMANDLINE:
            continue
        value = params[spec.name]
        if _repeatable(spec):  # one flag: the value; repeated: the list (e.g. a committee)
            value = value[0] if len(value) == 1 else list(value)
        elif spec.is_list and spec.info is not None and spec.info.repeatable:
            value = list(value)  # file names: one per flag, never split at commas
        elif spec.is_list:
            value = [part for item in value for part in str(item).split(",") if part.strip()]
            value = [_convert(spec, part.strip()) for part in value]
        out[spec.name] = value
    return out


def _repeatable(spec: Spec) -> bool:
    return spec.info is not None and spec.info.repeatable and not spec.is_list


def _convert(spec: Spec, text: str):
    try:
        if spec.kind == "int":
            return int(text)
        if spec.kind == "float":
            return float(text)
    except ValueError:
        raise UserError(f"{spec.flag}: {text!r} is not a valid {spec.kind}") from None
    return text
