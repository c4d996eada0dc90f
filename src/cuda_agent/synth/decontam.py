"""Decontamination and deduplication by normalized AST.

Normalization: parse the task, drop docstrings, and emit a pre-order token sequence of node
types in which every identifier the task defines itself (classes, functions, arguments, local
and module variables, ``self.<attr>`` names) becomes ``ID`` and every literal becomes ``NUM`` /
``STR`` / ``CONST``; names of external APIs (``torch``, ``nn``, ``F``, ``conv2d``, keyword names
such as ``dim=``) are kept, because they are what makes two tasks the same problem.

Similarity: Jaccard index of the sets of 4-grams (shingles) of the two token sequences.  Why
this and not ``difflib``: a renamed-and-resized copy of a task has the same token sequence, so
similarity 1.0 either way; adding or swapping one operator changes only the shingles that cover
it, so the score falls smoothly with the size of the edit; and it costs one set intersection per
pair (microseconds) instead of a quadratic alignment, so thousands of tasks x 250 references take
seconds.  It is symmetric and in [0, 1].  Dedup: sha256 of the normalized sequence (tasks equal
up to names, constants and sizes are the same problem).
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

SHINGLE = 4


def _defined_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.alias) and node.asname and node.asname not in ("nn", "F", "torch"):
            names.add(node.asname)
    return names


def normalize(source: str) -> list[str]:
    """The normalized token sequence of ``source`` (raises SyntaxError on bad code)."""
    tree = ast.parse(source)
    defined = _defined_names(tree)
    out: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring / bare string
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return  # imports say nothing about the computation
        t = type(node).__name__
        if isinstance(node, ast.Name):
            out.append("ID" if node.id in defined else node.id)
            return
        if isinstance(node, ast.Constant):
            v = node.value
            out.append("STR" if isinstance(v, str) else "NUM" if isinstance(v, (int, float, complex))
                       and not isinstance(v, bool) else "CONST")
            return
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.arg)):
            out.append(t)
        elif isinstance(node, ast.Attribute):
            out.append(t)
            visit(node.value)
            base_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            out.append("ID" if base_self or node.attr in defined else node.attr)
            return
        elif isinstance(node, ast.keyword):
            out.append(f"kw:{node.arg}")
        elif isinstance(node, (ast.expr_context, ast.operator, ast.boolop, ast.cmpop, ast.unaryop)):
            if isinstance(node, ast.expr_context):
                return
            out.append(t)
            return
        else:
            out.append(t)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def shingles(tokens: list[str], k: int = SHINGLE) -> frozenset[int]:
    if len(tokens) < k:
        return frozenset({hash(tuple(tokens))})
    return frozenset(hash(tuple(tokens[i:i + k])) for i in range(len(tokens) - k + 1))


def norm_hash(tokens: list[str]) -> str:
    return hashlib.sha256(" ".join(tokens).encode()).hexdigest()[:16]


def jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def similarity(src_a: str, src_b: str) -> float:
    """AST similarity of two task sources in [0, 1]."""
    return jaccard(shingles(normalize(src_a)), shingles(normalize(src_b)))


@dataclass
class Reference:
    id: str
    shingles: frozenset[int]


class ReferenceIndex:
    """Normalized references (e.g. KernelBench levels 1-3) for max-similarity queries."""

    def __init__(self, refs: Iterable[tuple[str, str]]):
        self.refs: list[Reference] = []
        for rid, src in refs:
            try:
                self.refs.append(Reference(rid, shingles(normalize(src))))
            except SyntaxError:
                continue

    def __len__(self) -> int:
        return len(self.refs)

    def max_similarity(self, source: str) -> tuple[float, str]:
        """(highest similarity, id of that reference); (0.0, "") with no references."""
        s = shingles(normalize(source))
        best, best_id = 0.0, ""
        for r in self.refs:
            inter = len(s & r.shingles)
            if inter:
                j = inter / (len(s) + len(r.shingles) - inter)
                if j > best:
                    best, best_id = j, r.id
        return best, best_id

    @classmethod
    def kernelbench(cls, path: str | Path, levels: tuple[int, ...] = (1, 2, 3)) -> "ReferenceIndex":
        from ..tasks import load_kernelbench

        tasks = [t for t in load_kernelbench(path) if int(t.meta.get("level", 0)) in levels]
        return cls((t.id, t.source) for t in tasks)
