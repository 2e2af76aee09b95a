"""docs/architecture.md stays true: rooms, layers and the import rules it states.

The imports of every module under ``mdband/`` are read from the source with ``ast`` (nothing is
imported or run). Module-level and function-level imports both count; a package's
``__init__.py`` run implicitly by importing one of its modules does not.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mdband"
DOC = ROOT / "docs" / "architecture.md"
MAX_LINES = 500

FRONT_ENDS = ("calculator", "lammps/", "md/", "cli/")
#: the evaluation side of Potential: it reads its model through the contract alone
CONTRACT_READERS = (
    "mdband.potential",
    "mdband.frame_inputs",
    "mdband.step_graph",
    "mdband.batch",
    "mdband.spin",
    "mdband.atom_virial",
)
#: what Potential may use of its model besides the contract's members (torch's, and a
#: DirectForceModel's method)
MODULE_USE = {"parameters", "state_dict", "energies_and_forces"}
MODEL_SIDE = ("model/", "kernels/", "so3/")
#: the band's index functions: defined in so3/storage.py and nowhere else
STORAGE = "mdband.so3.storage"
INDEX_FUNCTIONS = (
    "band_offset",
    "band_width",
    "band_to_dense",
    "dense_to_band",
    "tables",
    "entry_table",
    "kernel_tables",
    "kernel_strides",
    "per_edge_size",
    "storage_shape",
    "reduced_index",
)


@lru_cache(maxsize=1)
def modules() -> dict[str, Path]:
    """Dotted name → file of every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str) -> str | None:
    """The module of ``name`` (a module, or an object inside one)."""
    mods = modules()
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


@lru_cache(maxsize=1)
def imports() -> dict[str, dict[str, int]]:
    """Module → {imported mdband module: line of the first such import}."""
    graph = {}
    for name, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_pkg = path.name == "__init__.py"
        found: dict[str, int] = {}
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    pkg = pkg[: len(pkg) - node.level + 1]
                    base = ".".join(pkg + ([base] if base else []))
                # ``from pkg import mod`` imports the module pkg.mod
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in modules() else base
                    for a in node.names
                ]
            for target in targets:
                if target == "mdband" or target.startswith("mdband."):
                    mod = _resolve(target)
                    if mod and mod != name:
                        found.setdefault(mod, node.lineno)
        graph[name] = found
    return graph


def room(module: str) -> str:
    """The room of a module: ``__init__`` (the package), ``name`` or ``name/``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    is_pkg = (PACKAGE / parts[1]).is_dir()
    return parts[1] + "/" if is_pkg else parts[1]


@lru_cache(maxsize=1)
def layers() -> dict[str, int]:
    """Room → layer, from the table between the ``rooms`` markers of docs/architecture.md."""
    text = DOC.read_text(encoding="utf-8")
    m = re.search(r"<!-- rooms:.*?-->(.*?)<!-- /rooms -->", text, re.S)
    assert m, f"{DOC} has no rooms table (<!-- rooms: ... --> ... <!-- /rooms -->)"
    out = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].isdigit():
            for name in re.findall(r"`([^`]+)`", cells[1]):
                assert name not in out, f"room {name} listed twice in {DOC.name}"
                out[name] = int(cells[0])
    return out


def edges():
    for mod, found in imports().items():
        for target, line in found.items():
            yield mod, target, line


def where(mod: str, line: int) -> str:
    return f"{modules()[mod].relative_to(ROOT)}:{line}"


def test_every_module_is_in_a_room_of_the_doc():
    rooms = {room(m) for m in modules()}
    missing = sorted(rooms - set(layers()))
    assert not missing, f"rooms not in the table of docs/architecture.md: {missing}"
    stale = sorted(set(layers()) - rooms)
    assert not stale, f"docs/architecture.md lists rooms that do not exist: {stale}"


def test_imports_go_down_the_layers():
    lay = layers()
    bad = [
        f"{where(m, line)}: {room(m)} (layer {lay[room(m)]}) imports {t} "
        f"({room(t)}, layer {lay[room(t)]})"
        for m, t, line in edges()
        if room(m) != room(t) and lay[room(t)] >= lay[room(m)]
    ]
    assert not bad, "imports against the layers of docs/architecture.md:\n" + "\n".join(bad)


def test_no_import_circle():
    graph = {m: set(found) for m, found in imports().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_circle_detection_sees_function_level_imports(tmp_path, monkeypatch):
    """The walker must report an import inside a function (a lazy import is still an edge)."""
    (tmp_path / "mdband").mkdir()
    (tmp_path / "mdband" / "__init__.py").write_text("")
    (tmp_path / "mdband" / "a.py").write_text("def f():\n    from mdband.b import g\n")
    (tmp_path / "mdband" / "b.py").write_text("from mdband import a\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    monkeypatch.setattr(f"{__name__}.PACKAGE", tmp_path / "mdband")
    modules.cache_clear()
    imports.cache_clear()
    try:
        assert imports()["mdband.a"] == {"mdband.b": 2}
        assert imports()["mdband.b"] == {"mdband.a": 1}
    finally:
        modules.cache_clear()
        imports.cache_clear()


@pytest.mark.parametrize("mod", sorted(modules()))
def test_no_file_over_500_lines(mod):
    n = len(modules()[mod].read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{modules()[mod].relative_to(ROOT)} has {n} lines (max {MAX_LINES})"


def test_front_ends_reach_the_model_only_through_potential():
    bad = [
        f"{where(m, line)}: {room(m)} imports {t}"
        for m, t, line in edges()
        if room(m) in FRONT_ENDS and room(t) in MODEL_SIDE
    ]
    bad += [
        f"{where(m, line)}: fit/ imports {t} (only mdband.model.factory is allowed)"
        for m, t, line in edges()
        if room(m) == "fit/" and room(t) in MODEL_SIDE and t != "mdband.model.factory"
    ]
    assert not bad, "\n".join(bad)


def contract_members() -> set[str]:
    """The members ``ModelContract`` declares in mdband/contract.py (read from the source)."""
    tree = ast.parse((PACKAGE / "contract.py").read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelContract")
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}


def _model_reaches(tree):
    """``(node, base, attr)`` of every ``base.model.attr`` in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            if node.value.attr == "model":
                yield node, ast.unparse(node.value.value), node.attr


def test_the_model_is_read_through_the_contract_only():
    """Potential, StepGraphs and the evaluation helpers beside them probe nothing (no getattr,
    hasattr); Potential reads its model's contract members and torch's methods only and writes
    nothing into it; the others and the front ends reach no ``x.model.attr`` at all."""
    allowed = contract_members() | MODULE_USE
    bad = []
    for mod, path in modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if mod in CONTRACT_READERS:
            bad += [
                f"{where(mod, n.lineno)}: {n.func.id}()"
                for n in ast.walk(tree)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name)
                and n.func.id in ("getattr", "hasattr", "setattr")
            ]
        front = room(mod) in (*FRONT_ENDS, "committee/", "model_test/")
        if front:  # getattr(pot.model, ...)
            bad += [
                f"{where(mod, n.lineno)}: {ast.unparse(n)}"
                for n in ast.walk(tree)
                if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name)
                and n.func.id in ("getattr", "hasattr", "setattr")
                and n.args
                and isinstance(n.args[0], ast.Attribute)
                and n.args[0].attr == "model"
            ]
        for node, base, attr in _model_reaches(tree):
            own = mod == "mdband.potential" and base == "self"
            if own and attr in allowed and not isinstance(node.ctx, ast.Store):
                continue
            if own or front or mod in CONTRACT_READERS:
                bad.append(f"{where(mod, node.lineno)}: {base}.model.{attr}")
    assert not bad, "the model reached outside mdband/contract.py's contract:\n" + "\n".join(bad)


def test_nothing_imports_the_test_potentials():
    bad = [
        f"{where(m, line)} imports {t}"
        for m, t, line in edges()
        if room(t) == "testing/" and room(m) != "testing/"
    ]
    assert not bad, "mdband must not import mdband.testing:\n" + "\n".join(bad)


def _delegates(fn: ast.FunctionDef, aliases: set[str]) -> bool:
    """``fn`` only returns storage's function of the same name (a wrapper, no formula)."""
    body = [
        n for n in fn.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
    ]
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return False
    call = body[0].value
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == fn.name
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id in aliases
    )


def test_band_index_formulas_live_in_storage_only():
    bad = []
    for mod, path in modules().items():
        if mod == STORAGE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = set()  # names under which this module sees so3.storage
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "mdband.so3":
                aliases |= {a.asname or a.name for a in node.names if a.name == "storage"}
            elif isinstance(node, ast.ImportFrom) and node.module == STORAGE:
                bad += [f"{path.name}:{node.lineno} imports {a.name}" for a in node.names
                        if a.name.startswith("_")]  # fmt: skip
            elif isinstance(node, ast.Import):
                aliases |= {a.asname for a in node.names if a.name == STORAGE and a.asname}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.name in INDEX_FUNCTIONS and not _delegates(node, aliases):
                    bad.append(f"{path.name}:{node.lineno} defines {node.name}")
            elif isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                if isinstance(node.value, ast.Name) and node.value.id in aliases:
                    bad.append(f"{path.name}:{node.lineno} reads {node.value.id}.{node.attr}")
    assert not bad, "band index code outside so3/storage.py:\n" + "\n".join(bad)


# ---------------------------------------------------------------------------- kernels/
KERNELS = PACKAGE / "kernels"
KERNELS_ROOM = "mdband.kernels"


def kernel_units() -> dict[str, list[str]]:
    """Top-level unit of kernels/ (a module, or a package counted as one unit) → its modules."""
    units: dict[str, list[str]] = {}
    for mod in modules():
        if not mod.startswith(KERNELS_ROOM + "."):
            continue
        top = mod.split(".")[2]
        units.setdefault(f"{KERNELS_ROOM}.{top}", []).append(mod)
    return units


def _tree(mod: str) -> ast.Module:
    return ast.parse(modules()[mod].read_text(encoding="utf-8"))


def _is_jit(fn: ast.FunctionDef) -> bool:
    """Decorated with ``triton.jit`` (or a bare ``jit``)."""
    names = [
        d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", "") for d in fn.decorator_list
    ]
    return "jit" in names


def _triton_ops(mod: str) -> list[str]:
    """Functions of ``mod`` decorated with ``torch.library.triton_op``."""
    return [
        n.name
        for n in ast.walk(_tree(mod))
        if isinstance(n, ast.FunctionDef)
        and any(
            isinstance(d, ast.Call) and getattr(d.func, "attr", "") == "triton_op"
            for d in n.decorator_list
        )
    ]


def op_units() -> dict[str, list[str]]:
    """The units of kernels/ that are ops: they register a triton_op or define a Triton kernel."""
    out = {}
    for unit, mods in kernel_units().items():
        has_kernel = any(
            isinstance(n, ast.FunctionDef) and _is_jit(n) and n.name.endswith("_kernel")
            for m in mods
            for n in ast.walk(_tree(m))
        )
        if has_kernel or any(_triton_ops(m) for m in mods):
            out[unit] = mods
    return out


def test_an_op_package_is_one_unit():
    """The modules of an op package are its own: anything outside the package imports the
    package (its ``__init__`` names the public API), never one of its modules."""
    packages = {u for u, mods in kernel_units().items() if len(mods) > 1}
    assert packages, "kernels/ has no op package"
    bad = [
        f"{where(m, line)}: imports {t} (import {t.rsplit('.', 1)[0]} instead)"
        for m, t, line in edges()
        for pkg in packages
        if t.startswith(pkg + ".") and not (m == pkg or m.startswith(pkg + "."))
    ]
    assert not bad, "a module of an op package imported from outside it:\n" + "\n".join(bad)


def test_one_op_per_unit_and_private_helpers_are_shared():
    """An op lives in one unit: each triton_op name is registered by one unit, and a private
    top-level module of kernels/ (``_common``) serves two units or more (a helper of one op
    belongs in that op's package)."""
    registered: dict[str, str] = {}
    for unit, mods in kernel_units().items():
        for mod in mods:
            tree = _tree(mod)
            for n in ast.walk(tree):
                if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant):
                    value = n.value.value
                    if isinstance(value, str) and value.startswith("mdband::"):
                        assert registered.setdefault(value, unit) == unit, (
                            f"{value} registered by {registered[value]} and {unit}"
                        )
    assert registered, "no mdband:: op name found in kernels/"
    users: dict[str, set[str]] = {}
    for m, t, _ in edges():
        if t.startswith(KERNELS_ROOM + ".") and m.startswith(KERNELS_ROOM + "."):
            users.setdefault(t, set()).add(".".join(m.split(".")[:3]))
    for unit, mods in kernel_units().items():
        private = unit.rsplit(".", 1)[1].startswith("_")
        if private and len(mods) == 1:
            others = users.get(unit, set()) - {unit}
            assert len(others) >= 2, (
                f"{unit} serves {sorted(others)}: move it into that op's package"
            )


def test_every_triton_op_has_a_fake_and_a_reference():
    """Each triton_op registers a fake (``register_fake``: shapes without running), and each op
    unit that registers one defines its torch reference (a ``*_reference`` function)."""
    bad = []
    for unit, mods in op_units().items():
        ops = [(m, fn) for m in mods for fn in _triton_ops(m)]
        if not ops:
            continue
        for m, fn in ops:
            text = modules()[m].read_text(encoding="utf-8")
            if f"@{fn}.register_fake" not in text:
                bad.append(f"{modules()[m].relative_to(ROOT)}: {fn} has no register_fake")
        names = {n.name for m in mods for n in ast.walk(_tree(m)) if isinstance(n, ast.FunctionDef)}
        if not any(name.endswith("_reference") for name in names):
            bad.append(f"{unit}: no torch reference (*_reference)")
    assert not bad, "\n".join(bad)


def test_kernel_arguments_are_named_as_the_triton_tutorials():
    """Every launched kernel (a ``@triton.jit`` function named ``*_kernel``): no argument name of
    three characters or fewer; constexprs UPPER_CASE, every other argument lower case (pointers
    ``*_ptr``, TMA descriptors ``*_desc``, strides ``stride_*``, sizes by what they count)."""
    bad = []
    kernels = 0
    for mods in op_units().values():
        for mod in mods:
            for fn in ast.walk(_tree(mod)):
                if not (isinstance(fn, ast.FunctionDef) and _is_jit(fn)):
                    continue
                if not fn.name.endswith("_kernel"):
                    continue
                kernels += 1
                for arg in fn.args.args:
                    constexpr = "constexpr" in ast.unparse(arg.annotation or ast.Constant(""))
                    name, at = arg.arg, f"{modules()[mod].relative_to(ROOT)}: {fn.name}({arg.arg})"
                    if len(name) <= 3:
                        bad.append(f"{at}: a name of {len(name)} characters")
                    elif constexpr != name.isupper():
                        bad.append(
                            f"{at}: {'constexpr not' if constexpr else 'not constexpr but'} "
                            "upper case"
                        )
    assert kernels >= 20, f"only {kernels} kernels found: the walker lost them"
    assert not bad, "kernel arguments:\n" + "\n".join(bad)


def test_launches_come_from_the_tuning_table():
    """No public module-level dict, list or set in kernels/: kernel choices and launches are the
    frozen records of ``kernels/tuning/``, changed only by ``tuning.override`` (private caches
    such as the launch that fit a GPU's shared memory are not settings)."""
    bad = []
    for mod in (m for mods in kernel_units().values() for m in mods):
        for node in _tree(mod).body:
            stmts = node.body if isinstance(node, ast.If) else [node]  # `if TRITON_AVAILABLE:`
            for s in stmts:
                if not isinstance(s, (ast.Assign, ast.AnnAssign)) or s.value is None:
                    continue
                value = s.value
                literal = isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp))
                call = isinstance(value, ast.Call) and getattr(value.func, "id", "")
                mutable = literal or call in ("dict", "list", "set")
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                for t in targets:
                    if mutable and isinstance(t, ast.Name) and not t.id.startswith("_"):
                        bad.append(f"{modules()[mod].relative_to(ROOT)}:{s.lineno} {t.id}")
    assert not bad, "mutable module-level settings in kernels/:\n" + "\n".join(bad)
