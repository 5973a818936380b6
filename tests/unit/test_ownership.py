"""One owner for every piece of state, checked by parsing the production packages with ast.

A class's private attributes (``_name``) are its own: they are assigned through ``self`` in
the class's own module, and nowhere else. Two checks:

* **No shared private state across modules.** A class and a base class from another module
  must not both assign the same private attribute through ``self`` (the mixin pattern, in
  which pieces of one object in different files write each other's fields).
* **No private state written from outside.** A write of ``obj._name`` (assignment, ``del``,
  a loop or ``with`` target, ``setattr``, a mutating call such as ``obj._name.append(...)``)
  with ``obj`` other than ``self``/``cls`` may only appear inside a class that assigns
  ``self._name`` itself, or outside any class in a module whose classes do (an alternative
  constructor or factory of the class, in its module).

:data:`KNOWN_SHARED` lists the debts the first architecture review found (docs/architecture.md,
"Owners"): they are removed as the classes are rebuilt by composition, and the test fails on a
stale entry, so the list can only shrink.
"""

from __future__ import annotations

import ast
import pathlib
from collections import defaultdict

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("records", "storage", "protocol", "config", "broker", "tools", "pipeline", "sundial")

#: (class, base class) pairs from different modules that still share private attributes.
KNOWN_SHARED: set[tuple[str, str]] = set()


#: Methods that change the container they are called on.
MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "update", "add", "discard",
                      "setdefault", "popitem", "sort", "reverse", "appendleft", "popleft", "extendleft"})


def _writes_of(sub: ast.AST):
    """(owner expression, attribute name, line) of the attribute writes ``sub`` itself makes:
    assignment (plain, augmented, annotated, to an item or a slice of it), ``del``, a ``for``,
    ``with``, comprehension or walrus target, ``setattr``/``delattr(owner, "name", ...)`` with a
    literal name, and a call of a mutating method (:data:`MUTATORS`) on the attribute."""
    targets = []
    if isinstance(sub, ast.Assign):
        targets = sub.targets
    elif isinstance(sub, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr, ast.For, ast.AsyncFor, ast.comprehension)):
        targets = [sub.target]
    elif isinstance(sub, ast.Delete):
        targets = sub.targets
    elif isinstance(sub, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in sub.items if item.optional_vars is not None]
    elif isinstance(sub, ast.Call):
        func = sub.func
        if (isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and len(sub.args) >= 2
                and isinstance(sub.args[1], ast.Constant) and isinstance(sub.args[1].value, str)):
            yield sub.args[0], sub.args[1].value, sub.lineno
        elif isinstance(func, ast.Attribute) and func.attr in MUTATORS and isinstance(func.value, ast.Attribute):
            yield func.value.value, func.value.attr, sub.lineno
    for target in targets:
        for t in ast.walk(target):
            if isinstance(t, ast.Attribute):
                yield t.value, t.attr, t.lineno


def _assigned_attributes(node: ast.AST):
    """Every attribute write under ``node`` (see :func:`_writes_of`)."""
    for sub in ast.walk(node):
        yield from _writes_of(sub)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _classes():
    """class name → list of (module path, base names, private attributes it assigns via self)."""
    out = defaultdict(list)
    for package in PACKAGES:
        for module in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(module.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    attrs = {attr for owner, attr, _ in _assigned_attributes(node)
                             if isinstance(owner, ast.Name) and owner.id == "self" and _private(attr)}
                    bases = [ast.unparse(b).split(".")[-1] for b in node.bases]
                    out[node.name].append((module, bases, attrs))
    return out


def test_no_private_attribute_is_shared_with_a_base_class_of_another_module():
    classes = _classes()
    shared = {}
    for name, definitions in classes.items():
        for module, bases, attrs in definitions:
            for base in bases:
                for base_module, _, base_attrs in classes.get(base, []):
                    common = attrs & base_attrs
                    if base_module != module and common:
                        shared[(name, base)] = sorted(common)
    new = {pair: attrs for pair, attrs in shared.items() if pair not in KNOWN_SHARED}
    assert not new, f"private state written from two modules (compose instead of inheriting): {new}"
    stale = KNOWN_SHARED - set(shared)
    assert not stale, f"no longer shared, remove from KNOWN_SHARED: {sorted(stale)}"


def _self_attributes(node: ast.AST) -> set[str]:
    return {attr for owner, attr, _ in _assigned_attributes(node)
            if isinstance(owner, ast.Name) and owner.id == "self" and _private(attr)}


def _foreign_writes(tree: ast.Module):
    """(line, owner, attribute) of each private write through an object other than ``self`` or
    ``cls`` that its place does not own. Inside a class, the innermost class must assign
    ``self._name`` itself (an alternative constructor, a copy of its own kind); outside any class,
    some class of the module must (a module-level factory of the module's class)."""
    module_own = _self_attributes(tree)

    def visit(node: ast.AST, own: set[str]):
        for owner, attr, line in _writes_of(node):
            if _private(attr) and not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")) \
                    and attr not in own:
                yield line, ast.unparse(owner), attr
        for child in ast.iter_child_nodes(node):
            yield from visit(child, _self_attributes(child) if isinstance(child, ast.ClassDef) else own)

    yield from visit(tree, module_own)


def test_no_module_assigns_another_class_private_attribute():
    offenders = []
    for package in PACKAGES:
        for module in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(module.read_text(encoding="utf-8"))
            for line, owner, attr in _foreign_writes(tree):
                offenders.append(f"{module.relative_to(ROOT)}:{line} {owner}.{attr}")
    assert not offenders, sorted(set(offenders))


#: Writes of another object's private state the check must report, one per kind of write.
FOREIGN = {
    "another class of the module owns the name": (
        "class LogSegments:\n    def __init__(self):\n        self._segments = []\n"
        "class LogCleaning:\n    def swap(self, log):\n        log._segments = []\n"),
    "a mutating call": "def f(log):\n    log._pending.append(1)\n",
    "an item deleted": "def f(log):\n    del log._segments[0]\n",
    "an item assigned": "def f(log):\n    log._offsets['a'] = 1\n",
    "setattr with a literal name": "def f(log):\n    setattr(log, '_leo', 0)\n",
    "a for-loop target": "def f(log, xs):\n    for log._leo in xs:\n        pass\n",
    "a with target": "def f(log, cm):\n    with cm as log._handle:\n        pass\n",
    "an augmented assignment": "def f(log):\n    log._count += 1\n",
}

#: Writes the check must allow.
OWN = {
    "an alternative constructor": (
        "class Log:\n    def __init__(self):\n        self._leo = 0\n"
        "    @classmethod\n    def empty(cls):\n        new = cls.__new__(cls)\n        new._leo = 0\n        return new\n"),
    "a module-level factory of the module's class": (
        "class Log:\n    def __init__(self):\n        self._leo = 0\n"
        "def copy(log):\n    other = Log()\n    other._leo = log._leo\n    return other\n"),
    "its own state": "class A:\n    def f(self):\n        self._x = 1\n        self._items.append(2)\n",
    "a public attribute": "def f(log):\n    log.name = 1\n    log.items.append(2)\n",
}


def test_the_check_reports_every_kind_of_foreign_write():
    missed = [case for case, source in FOREIGN.items() if not list(_foreign_writes(ast.parse(source)))]
    assert not missed, missed


def test_the_check_allows_a_class_its_own_state():
    flagged = {case: list(_foreign_writes(ast.parse(source))) for case, source in OWN.items()}
    assert not any(flagged.values()), flagged
