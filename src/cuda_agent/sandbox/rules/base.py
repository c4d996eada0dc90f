"""The static rules' common ground: the profiles' sets, the rule registry, what one run sees
(:class:`Context`), the C++ unit, the check registries, reading a C++ file, task precision.

The C++ rules are in :mod:`.cpp`, the Python rules in :mod:`.python`; :func:`check_sources`
(the package) runs them.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ...registry import Registry
from ...rules_profile import RulesProfile
from ..exploits import Exploit
from ..results import Violation
from ..sources import is_binding, is_header
from .cpp_lexer import Lexed, Token, tokenize

PROFILES = tuple(p.value for p in RulesProfile)  # the names, for messages
BOTH = frozenset(RulesProfile)
STRICT = frozenset({RulesProfile.STRICT})


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Rule:
    """A static rule: id, the exploit class it defends, the profiles it applies to."""

    id: str
    exploit_class: Exploit | None
    summary: str
    profiles: frozenset[RulesProfile] = BOTH


RULES: Registry = Registry("static rule")


def define_rule(id: str, cls: Exploit | None, summary: str, profiles: frozenset[RulesProfile] = BOTH) -> str:
    """Register a rule (a taken id is refused) and return its id."""
    RULES.add(id, Rule(id, cls, summary, profiles))
    return id



R_SOURCE_ERROR = define_rule("source-error", None, "a source that cannot be found or read")


@dataclass
class Context:
    """State of one :func:`check_sources` run: profile, task precision, found violations."""

    profile: RulesProfile
    fp32_task: bool
    root: Path
    violations: list[Violation] = field(default_factory=list)
    _seen: set[tuple[str, str, str]] = field(default_factory=set)

    def flag(self, rule_id: str, message: str, where: str, exploit_class: int | None = None) -> None:
        rule = RULES[rule_id]
        if self.profile not in rule.profiles:
            return
        key = (rule_id, where, message)
        if key in self._seen:
            return
        self._seen.add(key)
        self.violations.append(Violation(rule_id, message, where, exploit_class or rule.exploit_class))


@dataclass
class CppUnit:
    """One C++/CUDA source: a file under kernels/ or a string given to load_inline."""

    name: str
    """Display path (relative to the solution root), used in ``where``."""
    kind: str
    """``kernel`` (.cu/.cpp), ``binding`` (*_binding.cpp), ``header`` or ``inline`` (torch allowed in headers)."""
    lexed: Lexed
    torch_aware: bool = False
    """The unit can see torch types (binding, inline, or includes a torch/binding header)."""

    @property
    def tokens(self) -> list[Token]:
        return self.lexed.tokens

    def where(self, line: int) -> str:
        return f"{self.name}:{line}"


CppCheck = Callable[[CppUnit, "list[CppUnit]", Context], None]
PyCheck = Callable[["PyModule", Context], None]
CPP_CHECKS: list[CppCheck] = []
PY_CHECKS: list[PyCheck] = []


def cpp_check(fn: CppCheck) -> CppCheck:
    """Register a C++ check ``fn(unit, all_units, ctx)``."""
    CPP_CHECKS.append(fn)
    return fn


def py_check(fn: PyCheck) -> PyCheck:
    """Register a Python check ``fn(module, ctx)``."""
    PY_CHECKS.append(fn)
    return fn



# --------------------------------------------------------------------------- reading sources


def rel_name(p: Path, root: Path) -> str:
    try:
        return p.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return p.name


def read_source(p: Path, root: Path, ctx: Context) -> tuple[str, str] | None:
    """(display name, text) of a source of the solution; None (and a violation) if unreadable."""
    name = rel_name(p, root)
    try:
        return name, p.read_text(errors="replace")
    except OSError as e:
        ctx.flag(R_SOURCE_ERROR, f"cannot read {name}: {e.strerror or e}", name)
        return None


def file_unit(p: Path, root: Path, ctx: Context) -> CppUnit | None:
    got = read_source(p, root, ctx)
    if got is None:
        return None
    name, src = got
    if is_binding(p):
        kind = "binding"
    elif is_header(p):
        kind = "header"
    else:
        kind = "kernel"
    return CppUnit(name, kind, tokenize(src))



# --------------------------------------------------------------------------- task precision

LOW_PRECISION_DTYPES = {"float16", "half", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "complex32", "chalf"}


def task_is_low_precision(task_source: str | None) -> bool:
    """True if the reference itself computes in half/bfloat16/fp8 (then they are allowed)."""
    if not task_source:
        return False
    try:
        tree = ast.parse(task_source)
    except SyntaxError:
        return bool(re.search(r"\b(float16|bfloat16|half)\b", task_source))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (node.attr in LOW_PRECISION_DTYPES or node.attr.startswith("float8")):
            return True
        if isinstance(node, ast.Constant) and node.value in ("float16", "bfloat16", "half"):
            return True
    return False



def rules_table() -> str:
    """Markdown table of the registered rules (id, class, profiles, summary)."""
    rows = ["| rule | class | profiles | what it flags |", "|---|---|---|---|"]
    for r in RULES.values():
        rows.append(f"| `{r.id}` | {r.exploit_class or '-'} | {', '.join(sorted(r.profiles))} | {r.summary} |")
    return "\n".join(rows)
