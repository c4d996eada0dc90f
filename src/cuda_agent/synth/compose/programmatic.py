"""The programmatic composer: samples 1-5 seed operators and chains them with shape inference.

The first operator is drawn uniformly over categories (then uniformly within one), so that the
hundred-odd elementwise seeds do not drown convolutions and matmuls; later operators are drawn
the same way among those that accept the running shape.  Where a step keeps the shape, it may
become a residual (``x = x + op(x)``) or a two-branch sum (``x = op1(x) + op2(x)``).

GPU profile: a family's sizes alone put most chains under 1 ms on an H200 (one elementwise op
over 256M floats is ~0.5 ms).  So each program's eager time is estimated on meta tensors
(:mod:`cuda_agent.synth.gpucost`) and, when it is off a target drawn log-uniformly from
``target_ms``, the program is rebuilt with the same random choices and a batch dimension scaled
by target/estimate (at most three times; the size limits still apply).  The CPU profile is not
rescaled.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict

from ..gpucost import estimate_ms, log_uniform
from ..ops import OpSpec, sample_family
from ..program import ComposeError, Limits, Program, Step, make_step
from .base import BUCKETS, Candidate, register_composer


@register_composer("programmatic")
class ProgrammaticComposer:
    """Chains seed ops; ``profile`` picks input sizes (``gpu`` or ``cpu``)."""

    name = "programmatic"

    def __init__(self, library: list[OpSpec] | None = None, profile: str = "gpu", residual_p: float = 0.2,
                 branch_p: float = 0.1, attempts: int = 40,
                 target_ms: tuple[float, float] | None | str = "auto") -> None:
        if library is None:
            from ..crawl import seed_library
            library = seed_library()
        self.torch_ops = [s for s in library if s.category != "transformers" and not s.skip]
        self.hf_ops = [s for s in library if s.category == "transformers" and not s.skip]
        self.profile = profile
        self.limits = Limits.for_profile(profile)
        self.residual_p = residual_p
        self.branch_p = branch_p
        self.attempts = attempts
        self.target_ms = ((2.0, 40.0) if profile == "gpu" else None) if target_ms == "auto" else target_ms
        """Eager-ms range the GPU sizes aim at (inside the 1-100 ms band with room for the model's error)."""
        self._by_cat: dict[str, list[OpSpec]] = defaultdict(list)
        for s in self.torch_ops:
            self._by_cat[s.category].append(s)

    def buckets(self) -> tuple[str, ...]:
        return BUCKETS if self.hf_ops else tuple(b for b in BUCKETS if b != "transformers")

    def _pick(self, rng: random.Random, ok) -> OpSpec | None:
        cats = [c for c, ops in self._by_cat.items() if any(ok(o) for o in ops)]
        if not cats:
            return None
        cat = rng.choice(sorted(cats))
        return rng.choice([o for o in self._by_cat[cat] if ok(o)])

    def _start(self, spec: OpSpec, rng: random.Random, batch: int | None = None) -> tuple[Program, Step]:
        fam = rng.choice(spec.families)
        shape, dims = sample_family(fam, self.profile, rng)
        if batch is not None:
            shape = (batch,) + tuple(shape[1:])
            if math.prod(shape) > self.limits.max_numel:
                raise ComposeError(f"input {shape} exceeds {self.limits.max_numel} elements")
        step = make_step(spec, shape, rng, wrap=False, limits=self.limits)
        return Program(family=fam, dims=dims, in_shape=shape, in_domain=spec.domain, steps=[step]), step

    def _build(self, bucket: str, rng: random.Random, batch: int | None = None) -> Program:
        if bucket == "transformers":
            if not self.hf_ops:
                raise ComposeError("no transformers seed operators (is transformers installed?)")
            prog, _ = self._start(rng.choice(self.hf_ops), rng, batch)
            return prog
        k = int(bucket)
        first = self._pick(rng, lambda o: not (o.terminal and k > 1))
        if first is None:
            raise ComposeError("empty seed library")
        prog, _ = self._start(first, rng, batch)
        used = {first.name}
        while len(prog.ops) < k:
            cur = prog.out_shape
            left = k - len(prog.ops)
            last = left == 1

            def ok(o: OpSpec) -> bool:
                return (o.domain != "tokens" and o.name not in used and (last or not o.terminal)
                        and o.accepts(cur))

            for _ in range(8):
                spec = self._pick(rng, ok)
                if spec is None:
                    raise ComposeError(f"no operator accepts shape {cur}")
                try:
                    step = make_step(spec, cur, rng, wrap=True, limits=self.limits)
                except ComposeError:
                    continue
                if step.out_shape == cur and not spec.terminal and left >= 2 and rng.random() < self.branch_p:
                    spec2 = self._pick(rng, lambda o: ok(o) and not o.terminal and o.name != spec.name)
                    if spec2 is not None:
                        try:
                            b = make_step(spec2, cur, rng, wrap=True, limits=self.limits)
                        except ComposeError:
                            b = None
                        if b is not None and b.out_shape == cur:
                            step.form, step.branch = "branch", b
                            used.add(spec2.name)
                if step.form == "chain" and step.out_shape == cur and not spec.terminal \
                        and rng.random() < self.residual_p:
                    step.form = "residual"
                prog.steps.append(step)
                used.add(spec.name)
                break
            else:
                raise ComposeError(f"could not extend the chain after {prog.ops} (shape {cur})")
        return prog

    def _fit(self, bucket: str, prog: Program, state: object, seed: int) -> tuple[Program, dict[str, object]]:
        """Rescale ``prog``'s batch toward a target eager time (GPU profile)."""
        assert self.target_ms is not None
        target = log_uniform(random.Random(seed ^ 0x5EED), *self.target_ms)
        est = estimate_ms(prog.render())
        info: dict[str, object] = {"target_gpu_ms": round(target, 3), "est_gpu_ms_base": est,
                                   "batch_base": prog.in_shape[0]}
        for _ in range(3):
            if est is None or target / 2 <= est <= target * 2:
                break
            b0 = prog.in_shape[0]
            b1 = _nice(b0 * target / max(est, 1e-6))
            new = None
            while b1 != b0:
                r = random.Random()
                r.setstate(state)  # type: ignore[arg-type]
                try:
                    new = self._build(bucket, r, batch=b1)
                    break
                except ComposeError:  # e.g. over the size limit: try half way back
                    b1 = _nice((b0 * b1) ** 0.5) if b1 > b0 else b0
                    new = None
            if new is None or new.ops != prog.ops:
                break
            prog, est = new, estimate_ms(new.render())
        info["est_gpu_ms"] = est
        return prog, info

    def program(self, bucket: str, seed: int) -> tuple[Program, dict[str, object]]:
        """The program that :meth:`compose` renders for ``(bucket, seed)``, and how its GPU size
        was fitted (empty on the CPU profile)."""
        rng = random.Random(seed)
        err: Exception | None = None
        for _ in range(self.attempts):
            state = rng.getstate()
            try:
                prog = self._build(bucket, rng)
            except ComposeError as e:
                err = e
                continue
            fit: dict[str, object] = {}
            if self.target_ms is not None:
                prog, fit = self._fit(bucket, prog, state, seed)
            return prog, fit
        raise ComposeError(f"bucket {bucket}: no valid program in {self.attempts} attempts ({err})")

    def compose(self, bucket: str, seed: int) -> Candidate:
        prog, fit = self.program(bucket, seed)
        return Candidate(source=prog.render(), bucket=bucket, ops=prog.ops,
                         categories=[s.category for s in prog.specs], composer=self.name, seed=seed,
                         extra={"family": prog.family, "input_shape": list(prog.in_shape),
                                "output_shape": list(prog.out_shape), "profile": self.profile, **fit})


def _nice(b: float) -> int:
    """Round a batch size to 1, 2, 3, 4, 6, 8, 12, 16, 24, ... (two significant bits)."""
    if b <= 1.5:
        return 1
    k = 1 << (int(b).bit_length() - 1)
    return min((k, k * 3 // 2 if k >= 2 else k, 2 * k), key=lambda c: abs(c - b))
