"""Static checks on a candidate's sources: parse, never grep.

Entry point: :func:`check_sources` (a workspace directory, a ``model_new.py``, or one C++
file) -> a list of :class:`~cuda_agent.sandbox.results.Violation`, each with the rule id,
``file:line`` and the exploit class of ``notes/exploits.md`` it defends.

* Python (``model_new.py`` and the local modules it imports) is read with :mod:`ast`, with
  the import aliases resolved (``import torch as T; T._C`` is ``torch._C``): :mod:`.python`.
* C++/CUDA (``kernels/**``, the strings given to ``load_inline`` and the files given to
  ``cpp_extension.load``) is read with :mod:`.cpp_lexer`, so comments and string literals
  neither hide nor fake a match: :mod:`.cpp`.

Every rule is a :class:`Rule` in :data:`RULES` (id, exploit class, the profiles it applies
to, one-line summary; :func:`define_rule`); the checks themselves are plain functions in
:data:`CPP_CHECKS` and :data:`PY_CHECKS`, registered with :func:`cpp_check` / :func:`py_check`
(:mod:`.base`).  docs/static-rules.md lists the rules and their known limits.
"""

from __future__ import annotations

from pathlib import Path

from ...rules_profile import RulesProfile
from ..results import Violation
from ..sources import CPP_SUFFIXES, cpp_files
from .base import (CPP_CHECKS, PROFILES, PY_CHECKS, R_SOURCE_ERROR, RULES, Context, CppUnit, Rule,
                   cpp_check, define_rule, file_unit, py_check, rules_table, task_is_low_precision)
from .cpp import mark_torch_aware
from .python import PyModule, load_py

__all__ = ["CPP_CHECKS", "PROFILES", "PY_CHECKS", "RULES", "Context", "CppUnit", "PyModule", "Rule",
           "check_sources", "cpp_check", "define_rule", "py_check", "rules_table", "task_is_low_precision"]


def check_sources(
    solution_dir_or_file: Path | str, *, task_source: str | None = None, profile: str = RulesProfile.STRICT
) -> list[Violation]:
    """Run every static rule of ``profile`` on a solution and return the violations.

    ``solution_dir_or_file``: a workspace directory (``model_new.py`` + ``kernels/``), a
    single ``model_new.py`` (KernelBench style, C++ inside ``load_inline`` strings), or one
    C++/CUDA file.  ``task_source`` is the reference's Python source; it decides whether the
    task is FP32 (then precision downgrades are flagged).  Without it, a ``model.py`` next
    to the solution is read; failing that the task is taken as FP32 (every KernelBench task is).
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown rules profile {profile!r}; choose one of {', '.join(PROFILES)}")
    path = Path(solution_dir_or_file)
    root = path if path.is_dir() else path.parent
    if task_source is None and (root / "model.py").is_file():
        try:
            task_source = (root / "model.py").read_text(errors="replace")
        except OSError:
            task_source = None
    ctx = Context(profile=RulesProfile(profile), fp32_task=not task_is_low_precision(task_source), root=root)
    if not path.exists():
        ctx.flag(R_SOURCE_ERROR, f"solution not found: {path}", str(path))
        return ctx.violations

    units: list[CppUnit] = []
    py_files: list[Path] = []
    if path.is_dir():
        if (path / "model_new.py").is_file():
            py_files.append(path / "model_new.py")
        for f in sorted(cpp_files(path)):
            units.append(file_unit(f, root, ctx))
    elif path.suffix == ".py":
        py_files.append(path)
    elif path.suffix in CPP_SUFFIXES:
        units.append(file_unit(path, root, ctx))
    else:
        ctx.flag(R_SOURCE_ERROR, f"not a solution (a directory, a .py or a C++/CUDA file): {path.name}", path.name)
        return ctx.violations

    seen: set[Path] = set()
    while py_files:
        f = py_files.pop(0).resolve()
        if f in seen:
            continue
        seen.add(f)
        mod = load_py(f, root, ctx)
        if mod is None:
            continue
        for check in PY_CHECKS:
            check(mod, ctx)
        units.extend(mod.cpp_units)
        py_files.extend(mod.local_imports)

    units = [u for u in units if u is not None]
    mark_torch_aware(units)
    for unit in units:
        for check in CPP_CHECKS:
            check(unit, units, ctx)
    ctx.violations.sort(key=lambda v: (_where_key(v.where), v.rule))
    return ctx.violations


def _where_key(where: str) -> tuple[str, int]:
    name, _, line = where.rpartition(":")
    return (name, int(line)) if line.isdigit() else (where, 0)
