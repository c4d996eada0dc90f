"""A composed operator chain (:class:`Program`) and its rendering to a KernelBench-format task.

A program starts from one input of a family (``img``, ``seq`` ...) and applies steps; each step
is one :class:`~cuda_agent.synth.ops.OpSpec` with resolved parameters, in one of three forms:
``chain`` (``x = op(x)``), ``residual`` (``x = x + op(x)``) or ``branch`` (``x = op(x) + op2(x)``).
:func:`infer_step` runs a step on meta tensors (small real tensors where meta kernels are missing)
to get its output shape, which is how the composer knows what may follow.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Any

from .ops import OpSpec, Shape, resolve_params

_PH = re.compile(r"\{(\w+)\}")
_RESERVED = {"x", "m"}

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"

# Wrappers that move an intermediate tensor into an operator's domain.
DOMAIN_WRAP = {
    "real": "{x}",
    "pos": "({x}.abs() + 0.1)",
    "unit": "{x}.clamp(-0.9, 0.9)",
    "prob": "torch.sigmoid({x}).clamp(1e-3, 1 - 1e-3)",
    "gt1": "({x}.abs() + 1.1)",
}

# Generators of the starting input by domain (``{shape}`` is the dims tuple).
DOMAIN_INPUT = {
    "real": "torch.randn({shape})",
    "pos": "torch.rand({shape}) + 0.1",
    "unit": "torch.rand({shape}) * 1.8 - 0.9",
    "prob": "torch.rand({shape}).clamp(1e-3, 1 - 1e-3)",
    "gt1": "torch.rand({shape}) + 1.1",
    "tokens": "torch.randint(0, 1000, ({shape},))",
}


class ComposeError(ValueError):
    """The step does not apply to this input (shape inference failed or a limit was hit)."""


def placeholders(template: str | None) -> list[str]:
    if not template:
        return []
    out: list[str] = []
    for n in _PH.findall(template):
        if n not in _RESERVED and not re.fullmatch(r"y\d+", n) and n not in out:
            out.append(n)
    return out


def fill(template: str, values: dict[str, str]) -> str:
    return _PH.sub(lambda m: values.get(m.group(1), m.group(0)), template)


@dataclass
class Step:
    """One operator application inside a program."""

    spec: OpSpec
    params: dict[str, Any]
    in_shape: Shape
    out_shape: Shape
    extras: list[tuple[Shape, str, str]] = field(default_factory=list)
    """(shape, kind, dtype) of each extra input."""
    form: str = "chain"
    branch: "Step | None" = None
    wrap: bool = False
    """Wrap the running tensor into the op's domain (true for every step but a first one)."""


@dataclass
class Program:
    """A starting input and a list of steps; renders to task source."""

    family: str
    dims: tuple[str, ...]
    in_shape: Shape
    in_domain: str
    steps: list[Step] = field(default_factory=list)

    @property
    def ops(self) -> list[str]:
        out = []
        for s in self.steps:
            out.append(s.spec.name)
            if s.branch:
                out.append(s.branch.spec.name)
        return out

    @property
    def specs(self) -> list[OpSpec]:
        out = []
        for s in self.steps:
            out.append(s.spec)
            if s.branch:
                out.append(s.branch.spec)
        return out

    @property
    def out_shape(self) -> Shape:
        return self.steps[-1].out_shape if self.steps else self.in_shape

    def render(self) -> str:
        return render(self)


# extra input kinds whose values need only the shape: the expression that draws them
_EXTRA_VALUES = {
    "randn": "torch.randn({dims})",
    "pos": "torch.rand({dims}) + 0.5",
    "unit": "torch.rand({dims}) * 1.8 - 0.9",
    "prob": "torch.rand({dims})",
    "bool": "torch.rand({dims}) > 0.5",
    "sign": "torch.randint(0, 2, ({dims})).float() * 2 - 1",
    "binary": "torch.randint(0, 2, ({dims})).float()",
}


def _extra_code(shape: Shape, kind: str, run_shape: Shape) -> str:
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    if kind in _EXTRA_VALUES:
        return _EXTRA_VALUES[kind].format(dims=dims)
    if kind == "perm:first":
        return f"torch.randperm({run_shape[0]})[:{shape[0]}]"
    if kind.startswith("int:"):
        what = kind[4:]
        if what == "last":
            hi, lo = run_shape[-1], 0
        elif what == "dim1":
            hi, lo = run_shape[1], 0
        elif what == "numel":
            hi, lo = math.prod(run_shape), 0
        else:
            hi, lo = int(what) + 1, -int(what)
        return f"torch.randint({lo}, {hi}, ({dims}))"
    raise ComposeError(f"unknown extra input kind {kind!r}")


def _extra_dtype(kind: str) -> str:
    if kind == "bool":
        return "bool"
    if kind.startswith("int:") or kind == "perm:first":
        return "int64"
    return "float32"


def _attr_name(spec: OpSpec) -> str:
    base = spec.api.rsplit(".", 1)[-1]
    if spec.module and spec.module.startswith("nn.Parameter"):
        base = "weight" if "conv" in spec.name.lower() or "linear" in spec.name.lower() else "param"
    base = re.sub(r"(?<!^)(?=[A-Z][a-z])", "_", base).lower()
    base = re.sub(r"\W+", "_", base).strip("_") or "op"
    return base


def _literal(v: Any) -> str:
    return repr(v)


def render(prog: Program) -> str:
    """The task source of ``prog`` (readable: one line per step, named constants)."""
    consts: dict[str, Any] = {}

    def const(name: str, value: Any) -> str:
        cand, i = name, 2
        while cand in consts and consts[cand] != value:
            cand, i = f"{name}_{i}", i + 1
        consts[cand] = value
        return cand

    dim_names = [const(n, v) for n, v in zip(prog.dims, prog.in_shape)]
    init_args: list[str] = []
    init_lines: list[str] = []
    fwd_lines: list[str] = []
    fwd_args = ["x"]
    input_lines: list[str] = []
    attrs: dict[str, int] = {}
    imports: list[str] = []
    extra_n = 0

    def attr_for(spec: OpSpec) -> str:
        base = _attr_name(spec)
        attrs[base] = attrs.get(base, 0) + 1
        return base if attrs[base] == 1 else f"{base}{attrs[base]}"

    def step_expr(step: Step, x: str) -> str:
        nonlocal extra_n
        spec = step.spec
        for imp in spec.imports:
            if imp not in imports:
                imports.append(imp)
        vals: dict[str, str] = {}
        if spec.module:
            attr = attr_for(spec)
            mvals = {}
            for n in placeholders(spec.module):
                cname = const(n, step.params[n])
                if cname not in init_args:
                    init_args.append(cname)
                mvals[n] = cname
            init_lines.append(f"self.{attr} = {fill(spec.module, mvals)}")
            vals["m"] = f"self.{attr}"
        for n in placeholders(spec.expr):
            vals[n] = _literal(step.params[n])
        for i, (shape, kind, _) in enumerate(step.extras):
            extra_n += 1
            name = f"x{extra_n}"
            fwd_args.append(name)
            input_lines.append(f"{name} = {_extra_code(shape, kind, step.in_shape)}")
            vals[f"y{i}"] = name
        xin = fill(DOMAIN_WRAP[spec.domain], {"x": x}) if step.wrap and spec.domain in DOMAIN_WRAP else x
        vals["x"] = xin
        return fill(spec.expr, vals)

    for step in prog.steps:
        e = step_expr(step, "x")
        if step.form == "residual":
            fwd_lines.append(f"x = x + {e}")
        elif step.form == "branch" and step.branch is not None:
            e2 = step_expr(step.branch, "x")
            fwd_lines.append(f"a = {e}")
            fwd_lines.append(f"b = {e2}")
            fwd_lines.append("x = a + b")
        else:
            fwd_lines.append(f"x = {e}")

    shape_expr = ", ".join(dim_names)
    first = DOMAIN_INPUT.get(prog.in_domain, DOMAIN_INPUT["real"]).replace("{shape}", shape_expr)
    doc = " -> ".join(prog.ops)
    lines = [HEADER.rstrip("\n")]
    lines += imports
    lines.append("")
    for k, v in consts.items():
        lines.append(f"{k} = {_literal(v)}")
    lines.append("")
    lines.append("")
    lines.append("class Model(nn.Module):")
    lines.append(f'    """{doc}"""')
    lines.append("")
    lines.append(f"    def __init__(self{''.join(', ' + a for a in init_args)}):")
    lines.append("        super().__init__()")
    lines += [f"        {ln}" for ln in init_lines]
    lines.append("")
    lines.append(f"    def forward(self, {', '.join(fwd_args)}):")
    lines += [f"        {ln}" for ln in fwd_lines]
    lines.append("        return x")
    lines.append("")
    lines.append("")
    lines.append("def get_inputs():")
    lines.append(f"    x = {first}")
    lines += [f"    {ln}" for ln in input_lines]
    lines.append(f"    return [{', '.join(fwd_args)}]")
    lines.append("")
    lines.append("")
    lines.append("def get_init_inputs():")
    lines.append(f"    return [{', '.join(init_args)}]")
    return "\n".join(lines) + "\n"


# --- shape inference ------------------------------------------------------------------------

_CPU_FALLBACK_NUMEL = 1 << 20


def _eval_env(spec: OpSpec) -> dict[str, Any]:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    env: dict[str, Any] = {"torch": torch, "nn": nn, "F": F}
    for imp in spec.imports:
        exec(imp, env)  # noqa: S102 - our own import lines from the seed table
    return env


def _run_one(step: Step, device: str) -> tuple[Shape, str]:
    import torch

    spec = step.spec
    env = _eval_env(spec)
    vals = {n: _literal(v) for n, v in step.params.items()}
    with torch.device(device):
        env["m"] = eval(fill(spec.module, vals), env) if spec.module else None  # noqa: S307
        x = torch.randn(step.in_shape) if device != "meta" else torch.empty(step.in_shape)
        if step.wrap and spec.domain == "tokens":
            raise ComposeError("token inputs only at the start")
        if spec.domain == "tokens":
            x = torch.randint(0, 1000, step.in_shape)
        env["x"] = x
        for i, (shape, kind, dtype) in enumerate(step.extras):
            dt = getattr(torch, dtype)
            if device == "meta":
                env[f"y{i}"] = torch.empty(shape, dtype=dt)
            else:
                env[f"y{i}"] = eval(_extra_code(shape, kind, step.in_shape), env)  # noqa: S307
        expr = fill(spec.expr, {**vals, "m": "m", "x": "x", **{f"y{i}": f"y{i}" for i in range(len(step.extras))}})
        with torch.no_grad():
            out = eval(expr, env)  # noqa: S307
    if not isinstance(out, torch.Tensor):
        raise ComposeError(f"{spec.name} returned {type(out).__name__}, not a tensor")
    return tuple(out.shape), str(out.dtype).replace("torch.", "")


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0][:200] if s else ""


def make_step(spec: OpSpec, shape: Shape, rng: random.Random, *, wrap: bool, limits: "Limits") -> Step:
    """Resolve ``spec``'s parameters for ``shape`` and infer its output (raises ComposeError)."""
    if not spec.accepts(shape):
        raise ComposeError(f"{spec.name} does not accept shape {shape}")
    names = placeholders(spec.module) + [n for n in placeholders(spec.expr) if n not in placeholders(spec.module)]
    names += [n for n in spec.params if n not in names]
    try:
        params = resolve_params(names, spec, shape, rng)
        extras = [(tuple(int(d) for d in e.shape(shape, params)), e.kind, _extra_dtype(e.kind)) for e in spec.extras]
    except (KeyError, IndexError, StopIteration, ValueError, ZeroDivisionError) as e:
        raise ComposeError(f"{spec.name}: cannot resolve parameters for {shape}: {e}") from None
    step = Step(spec=spec, params=params, in_shape=shape, out_shape=shape, extras=extras, wrap=wrap)
    for es, _, _ in extras:
        if math.prod(es) > limits.max_numel:
            raise ComposeError(f"{spec.name}: extra input {es} too large")
    try:
        out, dtype = _run_one(step, "meta")
    except ComposeError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure means "does not apply"
        small = math.prod(shape) <= _CPU_FALLBACK_NUMEL and all(
            math.prod(s) <= _CPU_FALLBACK_NUMEL for s, _, _ in extras)
        if not small:
            raise ComposeError(f"{spec.name} on {shape}: {type(e).__name__}: {_first_line(e)}") from None
        try:  # no meta kernel: a small real tensor gives the shape
            out, dtype = _run_one(step, "cpu")
        except Exception as e2:  # noqa: BLE001
            raise ComposeError(f"{spec.name} on {shape}: {type(e2).__name__}: {_first_line(e2)}") from None
    if math.prod(out) == 0:
        raise ComposeError(f"{spec.name}: empty output {out}")
    if math.prod(out) > limits.max_numel:
        raise ComposeError(f"{spec.name}: output {out} exceeds {limits.max_numel} elements")
    step.out_shape = out
    if dtype not in ("float32",) and not spec.terminal:
        raise ComposeError(f"{spec.name}: output dtype {dtype} (only float32 can be chained)")
    return step


@dataclass(frozen=True)
class Limits:
    """Size limits for composition, per size profile."""

    max_numel: int = 1 << 30

    @classmethod
    def for_profile(cls, profile: str) -> "Limits":
        return cls(max_numel=(1 << 30) if profile == "gpu" else (1 << 23))
