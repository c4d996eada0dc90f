"""The input set of a seed: what the judge and the candidate's runner both draw (and how both
read a forward's outputs: :func:`flatten`).

Both sides call :func:`draw` with the same task module, seed and device and get the same
tensors.  On a GPU the task's ``get_inputs()`` runs under ``torch.device`` so its factory calls
(``torch.randn(n)``) draw on the device directly: a 16M-element CPU ``randn`` costs ~0.1 s, and a
check draws two dozen sets (verification, extra round, timing rotation, spot checks) on each
side.  A ``get_inputs`` that cannot run that way (it mixes in CPU-only code) is drawn again
with the CPU generator from the same seed and moved over, identically on both sides.
"""

from __future__ import annotations

from typing import Any


def to_device(x: Any, device: str) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    return x


def draw(mod: Any, seed: int, device: str, on_device: bool = True) -> list:
    """``mod.get_inputs()`` for ``seed``, on ``device``.  ``on_device=False`` draws on the CPU
    and moves the tensors, as KernelBench's harness does (its values, not only its shapes)."""
    import torch

    torch.manual_seed(seed)
    if device.startswith("cuda") and on_device:
        try:
            with torch.device(device):
                xs = mod.get_inputs()
            return [to_device(x, device) for x in xs]
        except Exception:  # noqa: BLE001 - drawn the task's own (CPU) way below
            torch.manual_seed(seed)
    return [to_device(x, device) for x in mod.get_inputs()]


def flatten(out) -> list:
    """A forward's outputs as one flat list: tensors (and other leaves) of nested lists and
    tuples in order; ``None`` gives nothing."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten(o)]
    return [] if out is None else [out]
