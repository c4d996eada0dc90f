"""Other input sizes for a task: the extra verification round against shape specialization.

A task's module-level integer constants that only ``get_inputs`` reads (``batch_size = 16``,
``M = 1024``...) can change without touching the model's weights.  ``size_variants``
rewrites them (all at once, then one at a time; one less, then half) and yields task
sources to try in that order; the judge keeps the first whose reference runs.  Constants
read anywhere else (``get_init_inputs``, the model's code, other functions) stay as they are.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator


def _free_sizes(tree: ast.Module) -> dict[str, int]:
    consts: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = node.value
            if isinstance(v, ast.Constant) and type(v.value) is int and v.value >= 2:
                consts[node.targets[0].id] = v.value
    used_in_inputs: set[str] = set()
    used_elsewhere: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            # a constant derived from another (dim2 = dim * 2) pins both
            if not (isinstance(node.value, ast.Constant)):
                used_elsewhere |= {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            continue
        names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        if isinstance(node, ast.FunctionDef) and node.name == "get_inputs":
            used_in_inputs |= names
        else:
            used_elsewhere |= names
    return {k: v for k, v in consts.items() if k in used_in_inputs and k not in used_elsewhere}


def _rewrite(tree: ast.Module, values: dict[str, int]) -> str:
    tree = ast.parse(ast.unparse(tree))
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in values):
            node.value = ast.Constant(values[node.targets[0].id])
    return ast.unparse(tree) + "\n"


def size_variants(source: str, limit: int = 4) -> Iterator[tuple[str, str]]:
    """(description, task source) pairs with other input sizes, most different first."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    free = _free_sizes(tree)
    if not free:
        return
    tries: list[dict[str, int]] = [
        {k: v - 1 for k, v in free.items()},
        {k: max(1, v // 2) for k, v in free.items()},
    ]
    for k, v in free.items():
        tries += [{k: v - 1}, {k: max(1, v // 2)}]
    seen = set()
    n = 0
    for values in tries:
        key = tuple(sorted(values.items()))
        if key in seen or all(free[k] == v for k, v in values.items()):
            continue
        seen.add(key)
        desc = ", ".join(f"{k}={free[k]}->{v}" for k, v in values.items())
        yield desc, _rewrite(tree, values)
        n += 1
        if n >= limit:
            return
