"""The settings table: annotation parsing, value checks, the TOML writer and the docstring."""

from dataclasses import dataclass

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from mdband.md.setting_table import check_values, kind_of, parameters_doc, setting, table, to_toml


@pytest.mark.parametrize(
    "annotation, expected",
    [
        ("int", ("int", False, False)),
        ("float | None", ("float", True, False)),
        ("str | None", ("str", True, False)),
        ("bool", ("bool", False, False)),
        ("list[str] | None", ("str", True, True)),
        ("tuple[int, ...]", ("int", False, True)),
        (int | None, ("int", True, False)),  # evaluated annotations, too
        (list[str] | None, ("str", True, True)),
        (float, ("float", False, False)),
    ],
)
def test_kind_of(annotation, expected):
    assert kind_of(annotation) == expected


@dataclass(frozen=True)
class Demo:
    name: str = setting("a", "A name.")
    count: int = setting(2, "How many.")
    length: float = setting(1.0, "A length.", unit="Å")
    flag: bool = setting(False, "A switch.")
    mode: str = setting("x", "A mode.", choices=("x", "y", "z"))
    pair: str = setting("p", "Two choices.", choices=("p", "q"))
    names: list[str] | None = setting(None, "Some names.")
    plain: int | None = None  # no metadata: still a setting, without help

    def __post_init__(self):
        check_values(self, ValueError)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"count": 1.5}, "count must be an integer, got 1.5"),
        ({"count": True}, "count must be an integer"),
        ({"length": float("inf")}, "length must be a finite number"),
        ({"length": "3"}, "length must be a finite number"),
        ({"flag": 1}, "flag must be true or false"),
        ({"name": 3}, "name must be a string"),
        ({"mode": "w"}, "mode must be one of x, y, z; got 'w'"),
        ({"pair": "r"}, "pair must be p or q; got 'r'"),
        ({"names": "O,H"}, "names must be a list (a string each)"),
        ({"names": ["O", 1]}, "names must be a string, got 1"),
        ({"plain": "7"}, "plain must be an integer"),
    ],
)
def test_check_values_names_the_setting(kw, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Demo(**kw)


def test_check_values_coerces():
    d = Demo(length=2, names=("O", "H"))
    assert d.length == 2.0 and isinstance(d.length, float)
    assert d.names == ["O", "H"]


def test_table_and_doc():
    specs = {s.name: s for s in table(Demo)}
    assert specs["length"].help_text() == "A length. [1 Å]"
    assert specs["length"].metavar == "A" and specs["count"].metavar == "N"
    assert specs["mode"].metavar is None and specs["flag"].metavar is None
    assert specs["names"].flag == "--names" and specs["names"].is_list
    assert specs["plain"].info is None and specs["plain"].flag == "--plain"
    doc = parameters_doc(Demo)
    assert '    mode : "x" or "y" or "z"\n        A mode. [x] (flag ``--mode``)' in doc
    assert "    names : list of str, optional" in doc


@pytest.mark.parametrize(
    "text",
    ["plain", 'with "quotes"', "back\\slash", "tab\tnew\nline", "del\x7f", "ünï €😀", "C:\\x"],
)
def test_toml_strings_round_trip(text):
    d = Demo(name=text, names=[text, "b"])
    out = tomllib.loads(to_toml(d))
    assert out["name"] == text and out["names"] == [text, "b"]


def test_toml_values_round_trip():
    d = Demo(count=-4, length=1e-300, flag=True, mode="z")
    out = tomllib.loads(to_toml(d, header="two\nlines"))
    assert out == {
        "name": "a",
        "count": -4,
        "length": 1e-300,
        "flag": True,
        "mode": "z",
        "pair": "p",
    }
    assert to_toml(d, header="two\nlines").startswith("# two\n# lines\n")
