"""The settings table: every field of a settings dataclass carries its help, unit and flag.

A field declared with :func:`setting` is one setting: a TOML key (the field name; ``-`` and
``_`` are both accepted), a command-line flag (``--field-name``), a line of ``--help`` and of
the class docstring, a value check (type, choices) and a line of ``--print-config``. The CLI
builds its click options by looping over :func:`table`, so flags and keys cannot drift apart.
A plain field without metadata still gets a flag and a key (derived from its name and type),
but no help text; the tests require the help text.
"""

from __future__ import annotations

import math
import os
from dataclasses import MISSING, dataclass, field, fields

_KINDS = ("bool", "int", "float", "str")
_KIND_NAMES = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a finite number",
    "str": "a string",
}
_METAVARS = {"int": "N", "float": "X", "str": "TEXT"}


@dataclass(frozen=True)
class SettingInfo:
    """What the table knows about a setting beyond its name, type and default."""

    help: str
    unit: str | None = None  # physical unit, shown with the default ("300 K")
    metavar: str | None = None  # placeholder in --help (default: from unit or type)
    choices: tuple[str, ...] | None = None  # allowed values (click.Choice on the CLI)
    default_text: str | None = None  # how to show a default that is not a literal
    repeatable: bool = False  # a scalar whose flag may be repeated (then a list arrives); on
    # a list setting: one value per flag, not split at commas (file names)


def setting(
    default=MISSING,
    help: str = "",  # noqa: A002 - the natural name of a help text
    *,
    unit: str | None = None,
    metavar: str | None = None,
    choices=None,
    default_text: str | None = None,
    default_factory=MISSING,
    repeatable: bool = False,
):
    """Declare a dataclass field that is a documented setting (see the module docstring)."""
    info = SettingInfo(
        help=help,
        unit=unit,
        metavar=metavar,
        choices=None if choices is None else tuple(choices),
        default_text=default_text,
        repeatable=repeatable,
    )
    return field(default=default, default_factory=default_factory, metadata={"setting": info})


def head_setting():
    """Declare the ``head`` setting that runs and relaxations share."""
    return setting(
        None, "Head of a multi-task deepmd-kit checkpoint, by name or alias (default: Default)."
    )


_FROM_FILE = "the structure file's info, else the model's default_chg_spin"


def charge_setting():
    """Declare the ``charge`` setting that runs and relaxations share."""
    return setting(
        None,
        "Total charge of the system in e, for a model trained with deepmd-kit's "
        "add_chg_spin_ebd (DPA4-OMol25); other models refuse it.",
        metavar="E",
        default_text=_FROM_FILE,
    )


def spin_setting():
    """Declare the ``spin`` setting that runs and relaxations share."""
    return setting(
        None,
        "Spin multiplicity 2S+1 (1 singlet, 2 doublet, 3 triplet) of the system, for a "
        "charge/spin model like --charge.",
        metavar="2S+1",
        default_text=_FROM_FILE,
    )


@dataclass(frozen=True)
class Spec:
    """One row of the table: a setting's name, type, default and :class:`SettingInfo`."""

    name: str
    kind: str  # "bool" | "int" | "float" | "str" (of the elements, for a list)
    optional: bool  # None is allowed
    is_list: bool
    default: object
    info: SettingInfo | None

    @property
    def flag(self) -> str:
        """Return the command-line flag, e.g. ``--traj-every`` for ``traj_every``."""
        return "--" + self.name.replace("_", "-")

    @property
    def choices(self) -> tuple[str, ...] | None:
        """Return the allowed values, or None when any value of the type is allowed."""
        return None if self.info is None else self.info.choices

    @property
    def metavar(self) -> str | None:
        """Return the metavar ``--help`` shows, or None where click shows the values itself."""
        if (self.kind == "bool" and not self.is_list) or (self.choices and not self.is_list):
            return None  # click shows --x/--no-x and [a|b|c] itself
        if self.info is not None and self.info.metavar:
            return self.info.metavar
        if self.info is not None and self.info.unit and self.kind == "float":
            return self.info.unit.upper().replace("Å", "A").replace(" ", "")
        return _METAVARS[self.kind] + (",..." if self.is_list else "")

    def default_shown(self) -> str | None:
        """Return the default as ``--help`` and the docstring show it (None: nothing to show)."""
        if self.info is not None and self.info.default_text:
            return self.info.default_text
        value = self.default
        if value is None or value is MISSING or (self.kind == "bool" and value is False):
            return None
        if isinstance(value, bool):
            text = "yes" if value else "no"
        elif isinstance(value, float):
            text = f"{value:g}"
        elif isinstance(value, (list, tuple)):
            text = ",".join(map(str, value))
        else:
            text = str(value)
        unit = self.info.unit if self.info is not None else None
        return f"{text} {unit}" if unit and not isinstance(value, bool) else text

    def help_text(self) -> str:
        """Return the help text followed by the shown default in brackets, if any."""
        text = self.info.help if self.info is not None else ""
        shown = self.default_shown()
        return f"{text} [{shown}]" if shown else text


def kind_of(annotation) -> tuple[str, bool, bool]:
    """Return ``(element kind, optional, is_list)`` of a field annotation.

    Annotations are such as ``"int | None"`` or ``"list[str] | None"``.
    """
    if isinstance(annotation, str):  # postponed annotations (from __future__ import ...)
        text = annotation
    elif isinstance(annotation, type):
        text = annotation.__name__
    else:  # int | None, list[str], ... evaluated
        text = str(annotation).replace("typing.", "").replace("NoneType", "None")
    parts = [p.strip() for p in text.split("|")]
    optional = "None" in parts
    parts = [p for p in parts if p != "None"]
    base = parts[0] if len(parts) == 1 else "str"
    is_list = False
    for prefix in ("list[", "tuple[", "Sequence["):
        if base.startswith(prefix):
            is_list = True
            base = base[len(prefix) :].split(",")[0].rstrip("]").strip()
    return (base if base in _KINDS else "str"), optional, is_list


def table(cls) -> tuple[Spec, ...]:
    """Return the settings of dataclass ``cls``, in field order."""
    out = []
    for f in fields(cls):
        kind, optional, is_list = kind_of(f.type)
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        else:
            default = MISSING
        out.append(Spec(f.name, kind, optional, is_list, default, f.metadata.get("setting")))
    return tuple(out)


# ---------------------------------------------------------------------- checks
def _scalar_ok(kind: str, value) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok and math.isfinite(value)
    return isinstance(value, str)


def check_values(obj, error=ValueError) -> None:
    """Check every setting of dataclass instance ``obj`` against its type and choices.

    Integers given for float settings become floats and tuples become lists (what TOML and
    JSON give back); anything else wrong raises ``error`` naming the setting.
    """
    for spec in table(type(obj)):
        value = getattr(obj, spec.name)
        if value is None and spec.optional:
            continue
        items = value if spec.is_list else [value]
        what = _KIND_NAMES[spec.kind]
        if spec.is_list and not isinstance(value, (list, tuple)):
            raise error(f"{spec.name} must be a list ({what} each), got {value!r}")
        for item in items:
            if not _scalar_ok(spec.kind, item):
                raise error(f"{spec.name} must be {what}, got {item!r}")
            if spec.choices is not None and item not in spec.choices:
                raise error(f"{spec.name} must be {_one_of(spec.choices)}; got {item!r}")
        if spec.kind == "float":
            items = [float(v) for v in items]
        if spec.is_list:
            object.__setattr__(obj, spec.name, list(items))
        else:
            object.__setattr__(obj, spec.name, items[0])


def _one_of(choices) -> str:
    if len(choices) == 2:
        return f"{choices[0]} or {choices[1]}"
    return "one of " + ", ".join(choices)


# ---------------------------------------------------------------------- documentation
def parameters_doc(cls) -> str:
    """Return a NumPy-style ``Parameters`` section listing every setting of ``cls``."""
    lines = ["", "    Parameters", "    ----------"]
    for spec in table(cls):
        kind = " or ".join(f'"{c}"' for c in spec.choices) if spec.choices else spec.kind
        if spec.is_list:
            kind = f"list of {kind}"
        lines.append(f"    {spec.name} : {kind}" + (", optional" if spec.optional else ""))
        lines.append(f"        {spec.help_text()} (flag ``{spec.flag}``)")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- TOML
# The stdlib reads TOML (tomllib) but does not write it; the values here are flat scalars and
# lists, for which these few lines are a complete writer (tests read the output back with
# tomllib), so no extra dependency.
def _toml_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return _toml_string(str(value))


def _abs(path) -> str:
    text = str(path)
    return text if text.startswith("builtin:") else os.path.abspath(os.path.expanduser(text))


def to_toml(obj, header: str = "", path_fields=()) -> str:
    """``obj``'s settings as TOML text, one ``key = value`` line each, in field order.

    Unset (None) settings become comments; ``path_fields`` are written as absolute paths
    (against the current directory) so the file means the same wherever it is loaded from.
    """
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    for spec in table(type(obj)):
        value = getattr(obj, spec.name)
        help_text = spec.info.help if spec.info is not None else ""
        if value is None:
            lines.append(f"# {spec.name} = (not set)  # {help_text}".rstrip(" #"))
            continue
        if spec.name in path_fields:
            value = [_abs(v) for v in value] if spec.is_list else _abs(value)
        lines.append(f"{spec.name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"
