"""Run-time rules enforced inside the candidate process, at the torch dispatcher.

:class:`StrictGuard` is a ``TorchDispatchMode``: every ATen operator that runs while
``ModelNew.forward`` executes reaches it, whatever Python spelling produced it
(``torch.add``, ``x + y``, ``x @ w``, ``torch.ops.aten``, ``torch._C._nn``, ``F.*``,
``nn.Conv2d`` submodules, or ``at::`` calls made from a C++ binding).  Only allocation,
view and metadata operators are allowed; the custom ops registered by the solution run
their bodies under the same guard.  Each distinct forbidden operator is recorded once,
with the line of the solution's code that called it.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .exploits import Exploit
from .results import Violation

ALLOCATION = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "zero_", "fill_",
    "scalar_tensor", "lift_fresh", "lift_fresh_copy", "_to_copy_noop",
}
VIEWS = {
    "view", "_unsafe_view", "_reshape_alias", "as_strided", "permute", "transpose", "t", "expand",
    "squeeze", "unsqueeze", "slice", "select", "narrow", "split", "split_with_sizes", "unbind", "alias",
    "detach", "view_as", "unflatten", "diagonal", "movedim", "unfold", "chunk", "expand_as", "flatten",
    "reshape", "contiguous", "view_as_real", "view_as_complex", "_conj", "_neg_view", "real", "imag",
}
METADATA = {
    "size", "stride", "numel", "dim", "is_contiguous", "sym_size", "sym_stride", "sym_numel",
    "storage_offset", "sym_storage_offset", "is_same_size", "_local_scalar_dense", "is_nonzero",
    "record_stream", "set_.source_Storage_storage_offset",
}
ALLOWED_ATEN = ALLOCATION | VIEWS | METADATA
ALLOWED_NAMESPACES = {"kernels"}


@dataclass
class StrictGuard(TorchDispatchMode):
    """Record every ATen compute operator run during the guarded region."""

    solution_files: tuple[str, ...] = ()
    seen: dict[str, Violation] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ in a dynamo-disable that imports torch._dynamo on
        # first use (3+ s per candidate process).  Nothing here is compiled: torch.compile in a
        # strict solution is a static violation, and the guard sees eager dispatches only.
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        ns = func.namespace
        if ns in ALLOWED_NAMESPACES:
            with self:  # the custom op's body runs under the same rules
                return func(*args, **kwargs)
        name = func._schema.name.split("::")[-1]
        if not (ns == "aten" and (name in ALLOWED_ATEN or name.rstrip("_") in ALLOWED_ATEN)):
            key = f"{ns}.{name}"
            self.counts[key] = self.counts.get(key, 0) + 1
            if key not in self.seen:
                self.seen[key] = Violation(
                    rule="torch-op-in-forward",
                    message=f"torch operator {key} ran inside ModelNew.forward; only allocation, views "
                            f"and your own kernels are allowed (rules: strict)",
                    where=self._where(), exploit_class=Exploit.FALLBACK_TO_PYTORCH)
        return func(*args, **kwargs)

    def _where(self) -> str:
        for fr in reversed(traceback.extract_stack()[:-2]):
            if any(fr.filename.endswith(s) for s in self.solution_files):
                return f"{fr.filename.rsplit('/', 1)[-1]}:{fr.lineno}"
        return ""

    def violations(self) -> list[Violation]:
        out = []
        for key, v in self.seen.items():
            n = self.counts[key]
            out.append(Violation(v.rule, v.message + (f" ({n} calls)" if n > 1 else ""), v.where, v.exploit_class))
        return out
