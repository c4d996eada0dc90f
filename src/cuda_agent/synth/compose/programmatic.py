"""The programmatic composer: samples 1-5 seed operators and chains them with shape inference.

The first operator is drawn uniformly over categories (then uniformly within one), so that the
hundred-odd elementwise seeds do not drown convolutions and matmuls; later operators are drawn
the same way among those that accept the running shape.  Where a step keeps the shape, it may
become a residual (``x = x + op(x)``) or a two-branch sum (``x = op1(x) + op2(x)``).
"""

from __future__ import annotations

import random
from collections import defaultdict

from ..ops import OpSpec, sample_family
from ..program import ComposeError, Limits, Program, Step, make_step
from . import BUCKETS, Candidate, register_composer


@register_composer("programmatic")
class ProgrammaticComposer:
    """Chains seed ops; ``profile`` picks input sizes (``gpu`` or ``cpu``)."""

    name = "programmatic"

    def __init__(self, library: list[OpSpec] | None = None, profile: str = "gpu", residual_p: float = 0.2,
                 branch_p: float = 0.1, attempts: int = 40) -> None:
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

    def _start(self, spec: OpSpec, rng: random.Random) -> tuple[Program, Step]:
        fam = rng.choice(spec.families)
        shape, dims = sample_family(fam, self.profile, rng)
        step = make_step(spec, shape, rng, wrap=False, limits=self.limits)
        return Program(family=fam, dims=dims, in_shape=shape, in_domain=spec.domain, steps=[step]), step

    def _build(self, bucket: str, rng: random.Random) -> Program:
        if bucket == "transformers":
            if not self.hf_ops:
                raise ComposeError("no transformers seed operators (is transformers installed?)")
            prog, _ = self._start(rng.choice(self.hf_ops), rng)
            return prog
        k = int(bucket)
        first = self._pick(rng, lambda o: not (o.terminal and k > 1))
        if first is None:
            raise ComposeError("empty seed library")
        prog, _ = self._start(first, rng)
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

    def compose(self, bucket: str, seed: int) -> Candidate:
        rng = random.Random(seed)
        err: Exception | None = None
        for _ in range(self.attempts):
            try:
                prog = self._build(bucket, rng)
            except ComposeError as e:
                err = e
                continue
            return Candidate(source=prog.render(), bucket=bucket, ops=prog.ops,
                             categories=[s.category for s in prog.specs], composer=self.name, seed=seed,
                             extra={"family": prog.family, "input_shape": list(prog.in_shape),
                                    "output_shape": list(prog.out_shape), "profile": self.profile})
        raise ComposeError(f"bucket {bucket}: no valid program in {self.attempts} attempts ({err})")
