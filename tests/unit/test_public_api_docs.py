"""Every definition the packages export is documented in numpy style.

Exported means listed in a module's ``__all__`` (and defined there). A function or method that
takes parameters documents them under ``Parameters``; a class whose constructor takes
parameters documents them under ``Parameters`` or ``Attributes`` (dataclasses, enums and
exceptions excepted where the fields speak for themselves: enums and exceptions need only a
summary). Public methods of exported classes have at least a summary line.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import pkgutil
from collections.abc import Iterator

import pytest

PACKAGES = ("coded_fl", "coded_fl_flower", "strategies", "clients")


def _modules() -> Iterator[str]:
    for name in PACKAGES:
        pkg = importlib.import_module(name)
        yield name
        for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{name}."):
            yield info.name


def _exported() -> Iterator[tuple[str, str, object]]:
    for modname in _modules():
        mod = importlib.import_module(modname)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name, None)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and obj.__module__ == modname:
                yield modname, name, obj


def _params(fn: object) -> list[str]:
    try:
        sig = inspect.signature(fn)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []
    return [p for p in sig.parameters if p not in ("self", "cls")]


def _problems() -> list[str]:
    out = []
    for modname, name, obj in _exported():
        where = f"{modname}.{name}"
        doc = inspect.getdoc(obj) or ""
        if not doc:
            out.append(f"{where}: no docstring")
            continue
        if inspect.isfunction(obj):
            if _params(obj) and "Parameters" not in doc:
                out.append(f"{where}: no Parameters section")
            continue
        if issubclass(obj, (enum.Enum, BaseException)):  # type: ignore[arg-type]
            continue
        init_params = _params(obj.__init__)  # type: ignore[misc]
        if (
            init_params
            and not getattr(obj, "_is_protocol", False)  # a structural type: never constructed
            and not dataclasses.is_dataclass(obj)
            and "Parameters" not in doc
            and "Attributes" not in doc
        ):
            out.append(f"{where}: constructor parameters undocumented")
        for mname, member in vars(obj).items():
            if mname.startswith("_"):
                continue
            fn = member.fget if isinstance(member, property) else member
            if isinstance(fn, (staticmethod, classmethod)):
                fn = fn.__func__
            if inspect.isfunction(fn) and not inspect.getdoc(fn):
                out.append(f"{where}.{mname}: no docstring")
    return out


def test_every_export_is_documented() -> None:
    problems = _problems()
    if problems:
        pytest.fail(f"{len(problems)} undocumented exports:\n" + "\n".join(problems))


def _undocumented_parameters() -> list[str]:
    """Public functions and methods (names without a leading underscore, in public classes)
    of the product's modules that take parameters but whose docstring has no Parameters
    section (properties and setters aside)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out: list[str] = []

    def visit(node: ast.AST, path: Path, owner: str, private: bool) -> None:
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, ast.ClassDef):
                visit(ch, path, f"{ch.name}.", private or ch.name.startswith("_"))
            elif isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if private or ch.name.startswith("_"):
                    continue
                deco = {getattr(d, "id", getattr(d, "attr", "")) for d in ch.decorator_list}
                if deco & {"property", "setter", "overload"}:
                    continue
                a = ch.args
                params = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                params += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
                params = [p for p in params if p not in ("self", "cls")]
                if params and "Parameters" not in (ast.get_docstring(ch) or ""):
                    out.append(f"{path.relative_to(root)}:{ch.lineno} {owner}{ch.name}")

    for pkg in ("coded_fl", "strategies", "clients", "coded_fl_flower"):
        for path in sorted((root / pkg).rglob("*.py")):
            visit(ast.parse(path.read_text()), path, "", False)
    return out


def test_every_public_function_documents_its_parameters() -> None:
    missing = _undocumented_parameters()
    assert not missing, f"{len(missing)} without a Parameters section:\n" + "\n".join(missing)
