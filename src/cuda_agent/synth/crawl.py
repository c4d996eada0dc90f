"""The seed crawl: enumerate what torch (and transformers) expose, match it against the seed
table, validate each seed on small inputs, and report counts by category and what was skipped
and why.

``seed_library()`` is what composers use (validated, cached per process); ``crawl()`` produces
the :class:`CrawlReport` behind ``docs/synth-stats`` and ``cuda-agent synth --seeds-report``.
"""

from __future__ import annotations

import inspect
import random
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from .ops import OpSpec, sample_family
from .program import ComposeError, Limits, Program, make_step
from .seed_table import KNOWN_SKIPS, SEED_TABLE

_NAMESPACES = ("torch", "torch.nn.functional", "torch.special", "torch.linalg", "torch.fft")
_NOT_COMPUTE = ("is_", "get_", "set_", "use_", "from_", "can_", "result_type", "promote_types", "typename",
                "numel", "manual_seed", "initial_seed", "seed", "compile", "load", "save", "vmap", "cond",
                "export", "jit", "autocast", "no_grad", "enable_grad", "inference_mode", "empty", "zeros", "ones",
                "full", "arange", "range", "linspace", "logspace", "eye", "tensor", "as_", "asarray", "frombuffer",
                "sym_", "align_", "chunk", "unsafe_", "broadcast_", "meshgrid", "atleast_", "tril_indices",
                "triu_indices", "hann_", "hamming_", "bartlett_", "blackman_", "kaiser_", "fftfreq", "rfftfreq",
                "quantize", "dequantize", "fake_", "fbgemm", "mkldnn", "miopen", "cudnn", "sparse", "nested",
                "native_", "batch_norm_", "layer_norm", "group_norm", "instance_norm", "conv_tbc", "cumulative_",
                "resolve_", "view_as_", "detach", "clone", "split_with_sizes", "squeeze", "unsqueeze", "reshape",
                "view", "select", "slice", "index_put", "masked_scatter", "to_", "q_", "int_repr", "has_",
                "emb", "constant_pad", "choose_qparams", "histogram", "unique", "nonzero", "argwhere", "where",
                "bincount", "tensor_split", "hsplit", "vsplit", "dsplit", "unbind", "block_diag", "cartesian_prod",
                "combinations", "std_mean", "var_mean", "complex", "polar", "real", "imag", "angle", "conj")


@dataclass
class CrawlReport:
    """What the crawl found."""

    seeds: list[OpSpec]
    invalid: dict[str, str] = field(default_factory=dict)
    """seed name -> why it failed validation on small inputs."""
    skipped: dict[str, str] = field(default_factory=dict)
    """api -> reason it is not a seed."""
    candidates: int = 0
    """Public callables enumerated in the namespaces (modules + functions)."""

    def by_category(self) -> dict[str, int]:
        return dict(Counter(s.category for s in self.seeds).most_common())

    def by_source(self) -> dict[str, int]:
        return dict(Counter(s.src for s in self.seeds).most_common())

    def skip_reasons(self) -> dict[str, int]:
        return dict(Counter(self.skipped.values()).most_common())

    def to_markdown(self) -> str:
        lines = ["# Seed operators", "", f"- seed operators: **{len(self.seeds)}** "
                 f"(from {self.candidates} public callables enumerated)", f"- failed validation: {len(self.invalid)}",
                 f"- skipped: {len(self.skipped)}", "", "## By category", "", "| category | seeds |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in self.by_category().items()]
        lines += ["", "## By source", "", "| source | seeds |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in self.by_source().items()]
        lines += ["", "## Skipped, by reason", "", "| reason | count |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in self.skip_reasons().items()]
        lines += ["", "## Skipped (other than 'not covered')", ""]
        lines += [f"- `{k}`: {v}" for k, v in sorted(self.skipped.items()) if v != "not covered by the seed table"]
        if self.invalid:
            lines += ["", "## Failed validation", ""] + [f"- `{k}`: {v}" for k, v in sorted(self.invalid.items())]
        lines += ["", "## Seeds", "", "| name | category | source |", "|---|---|---|"]
        lines += [f"| `{s.name}` | {s.category} | {s.src} |" for s in sorted(self.seeds, key=lambda s: (s.category, s.name))]
        return "\n".join(lines) + "\n"


def _classify(api: str) -> str:
    if api in KNOWN_SKIPS:
        return KNOWN_SKIPS[api]
    leaf = api.rsplit(".", 1)[-1]
    low = leaf.lower()
    if any(k in low for k in ("rand", "dropout", "bernoulli", "normal", "poisson", "multinomial", "gumbel")):
        return "stochastic"
    if leaf.endswith("_") and not leaf.endswith("__"):
        return "in-place variant"
    if leaf.startswith("Lazy"):
        return "lazy variant of a covered module"
    if any(low.startswith(p) for p in _NOT_COMPUTE):
        return "not a standalone compute op (factory, view, metadata, backend-specific or dynamic-shape)"
    return "not covered by the seed table"


def enumerate_candidates() -> list[str]:
    """Public operator-like callables: ``torch.nn`` module classes and functions of the namespaces."""
    import importlib

    import torch.nn as nn

    out = [f"torch.nn.{n}" for n, o in vars(nn).items()
           if inspect.isclass(o) and issubclass(o, nn.Module) and not n.startswith("_")]
    for ns in _NAMESPACES:
        mod = importlib.import_module(ns)
        names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
        for n in names:
            o = getattr(mod, n, None)
            if o is None or inspect.isclass(o) or inspect.ismodule(o) or not callable(o) or n.startswith("_"):
                continue
            out.append(f"{ns}.{n}")
    return sorted(set(out))


def validate(spec: OpSpec, rng: random.Random | None = None) -> str | None:
    """None if ``spec`` builds and infers a shape on a small (cpu-profile) input, else the error."""
    rng = rng or random.Random(0)
    lim = Limits.for_profile("cpu")
    err = "no family"
    for fam in spec.families:
        for _ in range(3):
            shape, dims = sample_family(fam, "cpu", rng)
            try:
                step = make_step(spec, shape, rng, wrap=False, limits=lim)
                Program(fam, dims, shape, spec.domain, [step]).render()
                return None
            except ComposeError as e:
                err = str(e)
    return err


def crawl(include_transformers: bool = True, validate_seeds: bool = True) -> CrawlReport:
    cands = enumerate_candidates()
    specs = [s for s in SEED_TABLE if not s.skip]
    skipped: dict[str, str] = {s.api: s.skip for s in SEED_TABLE if s.skip}
    if include_transformers:
        from .hf_seeds import transformers_seeds
        hf, hf_skip = transformers_seeds()
        specs += hf
        skipped.update(hf_skip)
    covered = {s.api for s in specs}
    for api in cands:
        if api not in covered and api not in skipped:
            skipped[api] = _classify(api)
    invalid: dict[str, str] = {}
    seeds = specs
    if validate_seeds:
        seeds = []
        for s in specs:
            err = validate(s)
            if err is None:
                seeds.append(s)
            else:
                invalid[s.name] = err
    return CrawlReport(seeds=seeds, invalid=invalid, skipped=skipped, candidates=len(cands) + (len(specs) - len(SEED_TABLE)))


@lru_cache(maxsize=2)
def _library(include_transformers: bool) -> tuple[OpSpec, ...]:
    specs = [s for s in SEED_TABLE if not s.skip]
    if include_transformers:
        from .hf_seeds import transformers_seeds
        hf, _ = transformers_seeds()
        specs += [s for s in hf if validate(s) is None]
    return tuple(specs)


def seed_library(include_transformers: bool = True) -> list[OpSpec]:
    """The seed operators composers draw from (transformers blocks validated on first use)."""
    return list(_library(include_transformers))
