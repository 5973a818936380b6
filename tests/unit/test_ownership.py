"""One owner for every piece of state, checked by parsing the production packages with ast.

A class's private attributes (``_name``) are its own: they are assigned through ``self`` in
the class's own module, and nowhere else. Two checks:

* **No shared private state across modules.** A class and a base class from another module
  must not both assign the same private attribute through ``self`` (the mixin pattern, in
  which pieces of one object in different files write each other's fields).
* **No private state written from outside.** ``obj._name = ...`` with ``obj`` other than
  ``self``/``cls`` may only appear in a module whose own classes assign ``self._name``
  (an alternative constructor of the class, in its module).

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
KNOWN_SHARED = {
    ("LogSegment", "SegmentRecovery"), ("Group", "GroupMetadata"),
}


def _assigned_attributes(node: ast.AST):
    """(owner expression, attribute name, line) of every attribute assignment under ``node``."""
    for sub in ast.walk(node):
        targets = []
        if isinstance(sub, ast.Assign):
            targets = sub.targets
        elif isinstance(sub, (ast.AugAssign, ast.AnnAssign)):
            targets = [sub.target]
        for target in targets:
            for t in ast.walk(target):
                if isinstance(t, ast.Attribute):
                    yield t.value, t.attr, t.lineno


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


def test_no_module_assigns_another_class_private_attribute():
    offenders = []
    for package in PACKAGES:
        for module in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(module.read_text(encoding="utf-8"))
            own = {attr for owner, attr, _ in _assigned_attributes(tree)
                   if isinstance(owner, ast.Name) and owner.id == "self" and _private(attr)}
            for owner, attr, line in _assigned_attributes(tree):
                if not _private(attr) or (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                    continue
                if attr not in own:
                    offenders.append(f"{module.relative_to(ROOT)}:{line} {ast.unparse(owner)}.{attr}")
    assert not offenders, offenders
