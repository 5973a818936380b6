"""Reading settings looked up by name in a module's source: ``cfg["a.b"]``, ``cfg.get("a.b")``,
``cfg[KEY]`` with ``KEY = "a.b"``, and ``cfg[key]`` in ``for key in ("a.b", "c.d")``. Shared by the
settings-effect test (which keys are read) and the typed-config check (no broker module reads one)."""

from __future__ import annotations

import ast


def string_bindings(tree: ast.AST) -> dict[str, set[str]]:
    """Names bound to string literals in a module: ``KEY = "a.b"`` and ``for key in ("a.b", "c.d")``."""
    bound: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, set()).add(node.value.value)
        elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) \
                and isinstance(node.iter, (ast.Tuple, ast.List, ast.Set)):
            values = {e.value for e in node.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            bound.setdefault(node.target.id, set()).update(values)
    return bound


def keys_looked_up(node: ast.AST, bound: dict[str, set[str]]) -> set[str]:
    """The string keys ``node`` looks up, as a subscript or a ``.get`` call (empty for other nodes)."""
    index = None
    if isinstance(node, ast.Subscript):
        index = node.slice
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        index = node.args[0]
    if isinstance(index, ast.Constant) and isinstance(index.value, str):
        return {index.value}
    if isinstance(index, ast.Name):
        return set(bound.get(index.id, ()))
    return set()
