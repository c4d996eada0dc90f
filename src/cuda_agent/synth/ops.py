"""Seed operator specs: the declarative description of one operator that the synthesizer can
instantiate, chain and render.

An :class:`OpSpec` says how to build the operator (``module``: an expression that becomes a
``self.<attr>`` in ``__init__``), how to call it (``expr``: a forward expression over ``{x}``,
``{m}`` and extra inputs ``{y0}``, ``{y1}`` ...), which inputs it accepts (ranks, value domain,
a shape guard) and where it comes from (torch namespace, category).  Placeholders in
``module`` become constructor arguments (module-level constants passed through
``get_init_inputs``); placeholders in ``expr`` are inlined as literals.  Their values come from
:data:`PARAMS` (shared resolvers such as ``in_channels`` = dim 1 of the input) or the spec's own
``params``.  Input families (:data:`FAMILIES`) give realistic starting shapes per size profile.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

Shape = tuple[int, ...]
ParamFn = Callable[[Shape, random.Random], Any]


@dataclass(frozen=True)
class Extra:
    """An extra forward input an operator needs besides the running tensor."""

    shape: Callable[[Shape], Shape]
    """Shape of the extra input, as a function of the running tensor's shape."""
    kind: str = "randn"
    """Value generator: randn | pos | unit | prob | bool | int:<hi> | int:dim<k> (indices < shape[k])."""


@dataclass(frozen=True)
class OpSpec:
    """One seed operator."""

    name: str
    """Unique name, e.g. ``nn.Conv2d/k3`` or ``torch.exp``."""
    category: str
    """elementwise | activation | binary | reduction | scan | matmul | linalg | conv | pooling |
    normalization | loss | indexing | shape | resample | attention | recurrent | distance | fft |
    transformers."""
    api: str
    """The torch/transformers object it exercises (``torch.nn.Conv2d``); the crawl's coverage key."""
    expr: str
    """Forward expression; ``{x}`` running tensor, ``{m}`` the module attribute, ``{y0}``.. extras."""
    module: str | None = None
    """Constructor expression of the attribute (``nn.Conv2d({in_channels}, {out_channels}, 3)``)."""
    families: tuple[str, ...] = ("vec", "seq", "img")
    """Input families a seed task of this op starts from (first is preferred)."""
    ranks: tuple[int, ...] | None = None
    """Ranks of the running tensor the op accepts (None: any)."""
    domain: str = "real"
    """Value domain the op needs: real | pos | unit | prob | gt1."""
    extras: tuple[Extra, ...] = ()
    params: dict[str, ParamFn] = field(default_factory=dict)
    """Resolvers for placeholders not in :data:`PARAMS` (or overriding them)."""
    guard: Callable[[Shape], bool] | None = None
    """Extra applicability test on the running shape (size limits, minimum spatial size...)."""
    terminal: bool = False
    """Output is not a float tensor (indices, bools): only valid as the last op."""
    source: str = ""
    """Namespace it was crawled from (filled from ``api`` when empty)."""
    skip: str = ""
    """Non-empty: known but excluded from seeds, with the reason (e.g. stochastic)."""
    imports: tuple[str, ...] = ()
    """Extra import lines the rendered task needs (transformers blocks)."""

    @property
    def src(self) -> str:
        if self.source:
            return self.source
        head = self.api.rsplit(".", 1)[0]
        return head

    def accepts(self, shape: Shape) -> bool:
        if self.ranks is not None and len(shape) not in self.ranks:
            return False
        if self.guard is None:
            return True
        try:
            return bool(self.guard(shape))
        except (IndexError, ValueError, ZeroDivisionError, TypeError):  # e.g. a 0-d running tensor
            return False


# --- placeholder resolvers ---------------------------------------------------------------

def _rel(s: int, rng: random.Random, lo: int = 8, hi: int = 4096) -> int:
    return max(lo, min(hi, rng.choice([s // 2, s, s, 2 * s])))


PARAMS: dict[str, ParamFn] = {
    "in_channels": lambda s, r: s[1],
    "num_features": lambda s, r: s[1],
    "num_channels": lambda s, r: s[1],
    "channels": lambda s, r: s[1],
    "in_features": lambda s, r: s[-1],
    "normalized_shape": lambda s, r: s[-1],
    "embed_dim": lambda s, r: s[-1],
    "hidden_size": lambda s, r: s[-1],
    "input_size": lambda s, r: s[-1],
    "out_channels": lambda s, r: _rel(s[1], r, 8, 512),
    "out_features": lambda s, r: _rel(s[-1], r, 16, 8192),
    "num_groups": lambda s, r: next(g for g in (r.choice([2, 4, 8, 16, 32]), 4, 2, 1) if s[1] % g == 0),
    "num_heads": lambda s, r: next(h for h in (r.choice([4, 8, 16]), 8, 4, 2, 1) if s[-1] % h == 0),
    "kernel_size": lambda s, r: r.choice([3, 3, 5]),
    "pool_size": lambda s, r: r.choice([2, 2, 3]),
    "stride": lambda s, r: r.choice([1, 2]),
    "dim": lambda s, r: r.randrange(1, len(s)),
    "last": lambda s, r: len(s) - 1,
    "eps": lambda s, r: r.choice([1e-5, 1e-6]),
    "negative_slope": lambda s, r: r.choice([0.01, 0.1, 0.2]),
    "alpha": lambda s, r: r.choice([0.5, 1.0, 1.5]),
    "beta": lambda s, r: r.choice([0.5, 1.0, 2.0]),
    "lo": lambda s, r: r.choice([-1.0, -0.5, -2.0]),
    "hi": lambda s, r: r.choice([1.0, 0.5, 2.0]),
    "scale": lambda s, r: r.choice([0.5, 2.0, 3.0]),
    "lambd": lambda s, r: r.choice([0.5, 0.25]),
    "p": lambda s, r: r.choice([1, 2]),
    "k": lambda s, r: r.choice([4, 8, 16]),
    "upscale": lambda s, r: 2,
    "pad": lambda s, r: r.choice([1, 2, 3]),
    "out_size": lambda s, r: r.choice([1, 4, 7, 8]),
    "height": lambda s, r: s[-2],
    "width": lambda s, r: s[-1],
    "length": lambda s, r: s[-1],
    "intermediate_size": lambda s, r: r.choice([2, 3, 4]) * s[-1],
    "num_embeddings": lambda s, r: r.choice([1000, 4096, 32000]),
    "embedding_dim": lambda s, r: r.choice([128, 256, 512, 1024]),
}


def resolve_params(names: list[str], spec: OpSpec, shape: Shape, rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in names:
        fn = spec.params.get(n) or PARAMS.get(n)
        if fn is None:
            raise KeyError(f"{spec.name}: no resolver for placeholder {{{n}}}")
        out[n] = fn(shape, rng)
    return out


# --- input families ----------------------------------------------------------------------

@dataclass(frozen=True)
class Family:
    """A starting input shape family: named dimensions and per-profile size choices."""

    name: str
    dims: tuple[str, ...]
    sizes: dict[str, tuple[tuple[int, ...], ...]]
    """profile -> one tuple of choices per dim."""

    def sample(self, profile: str, rng: random.Random) -> Shape:
        return tuple(rng.choice(c) for c in self.sizes[profile])


FAMILIES: dict[str, Family] = {f.name: f for f in [
    # Memory-bound families are sized so that one elementwise pass is ~1 ms on an H200 (gpu)
    # or ~1 ms on one CPU core (cpu).
    Family("vec", ("batch_size", "dim"), {
        "gpu": ((1024, 2048, 4096), (65536, 131072, 262144)),
        "cpu": ((16, 32, 64), (4096, 8192, 16384))}),
    Family("dense", ("batch_size", "in_features"), {
        "gpu": ((1024, 2048, 4096, 8192), (1024, 2048, 4096, 8192)),
        "cpu": ((64, 128, 256), (256, 512, 1024))}),
    Family("seq", ("batch_size", "seq_len", "hidden_size"), {
        "gpu": ((8, 16, 32), (512, 1024, 2048), (1024, 2048, 4096)),
        "cpu": ((2, 4, 8), (64, 128, 256), (128, 256, 512))}),
    Family("img", ("batch_size", "channels", "height", "width"), {
        "gpu": ((16, 32, 64), (16, 32, 64, 128), (128, 256), (128, 256)),
        "cpu": ((2, 4, 8), (8, 16, 32), (32, 64), (32, 64))}),
    Family("sig", ("batch_size", "channels", "length"), {
        "gpu": ((32, 64, 128), (32, 64, 128), (4096, 8192, 16384)),
        "cpu": ((4, 8, 16), (8, 16, 32), (256, 512, 1024))}),
    Family("vol", ("batch_size", "channels", "depth", "height", "width"), {
        "gpu": ((8, 16), (8, 16, 32), (16, 32), (64, 128), (64, 128)),
        "cpu": ((2, 4), (4, 8), (8, 16), (16, 32), (16, 32))}),
    Family("tok", ("batch_size", "seq_len"), {
        "gpu": ((32, 64, 128), (1024, 2048, 4096)),
        "cpu": ((4, 8), (128, 256))}),
    Family("mat", ("batch_size", "m", "k"), {
        "gpu": ((32, 64, 128), (256, 512, 1024), (256, 512, 1024)),
        "cpu": ((4, 8, 16), (64, 128), (64, 128))}),
    Family("sqm", ("batch_size", "n", "n"), {
        "gpu": ((4096, 8192, 16384), (16, 32, 64), ()),
        "cpu": ((64, 128, 256), (8, 16, 32), ())}),
]}


def sample_family(name: str, profile: str, rng: random.Random) -> tuple[Shape, tuple[str, ...]]:
    """A starting shape and its dimension names (square families repeat the last dim)."""
    fam = FAMILIES[name]
    if name == "sqm":
        b, n = rng.choice(fam.sizes[profile][0]), rng.choice(fam.sizes[profile][1])
        return (b, n, n), ("batch_size", "n", "n")
    return fam.sample(profile, rng), fam.dims
