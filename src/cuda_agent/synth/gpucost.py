"""Estimate a task's eager forward time on a GPU without one: count bytes, FLOPs and kernels on
meta tensors, then apply a roofline per kernel.

:func:`count_task` executes the task source with every tensor on the ``meta`` device (no memory,
no compute) and counts, for each ATen op the forward dispatches (views excluded), the bytes of
its tensor inputs and outputs, its FLOPs (PyTorch's own formulas for matmul, convolution,
attention) and one kernel launch.  :meth:`DeviceModel.ms` turns that into eager milliseconds:
the sum over kernels of ``max(bytes / bandwidth, flops / peak) + launch``.  Eager runs one
kernel per op with no fusion, which is what makes this simple sum a fair model.

The H200 constants are calibrated on KernelBench eager times measured there (notes/device.md):
L1/19 ReLU (12.9 GB moved in 3.04 ms: ~4.2 TB/s), L1/1 4096^3 FP32 matmul (137 GFLOP in 2.70 ms:
~51 TFLOP/s), L2/1 convolution (300 GFLOP in ~3.9 ms with cuDNN's default TF32).  On the seven
problems measured there the estimate is within 0.7x-1.3x (tests/synth/test_gpucost.py).  The synthesizer uses the estimate to size GPU tasks into the runtime band; the
filter still measures the real eager time on the GPU and decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

_NO_KERNEL = {"empty", "empty_strided", "empty_like", "detach", "lift_fresh", "alias", "_local_scalar_dense",
              "set_", "resize_", "_unsafe_view", "view", "t", "expand", "as_strided", "_reshape_alias"}


@dataclass
class TaskCost:
    """What the forward of one task moves and computes (on its real sizes)."""

    bytes: float = 0.0
    flops: float = 0.0
    kernels: int = 0
    time_s: float = 0.0
    """Roofline seconds summed per kernel under the model used while counting."""


@dataclass(frozen=True)
class DeviceModel:
    """Per-kernel roofline of one GPU for FP32 eager execution."""

    name: str
    bandwidth: float
    """Effective HBM bytes/s for streaming kernels."""
    flops: float
    """Effective FP32 FLOP/s of cuBLAS/cuDNN kernels (TF32 off for matmul)."""
    launch_s: float
    """Fixed cost per kernel (launch + tail)."""
    conv_flops: float
    """Effective FLOP/s of cuDNN convolutions (PyTorch lets cuDNN use TF32 by default)."""

    def kernel_s(self, nbytes: float, nflops: float, op: str = "") -> float:
        peak = self.conv_flops if op.startswith(("convolution", "cudnn_convolution", "_convolution")) else self.flops
        return max(nbytes * _PASSES.get(op, 1.0) / self.bandwidth, nflops / peak) + self.launch_s


# Kernels that read their input more than once (row statistics, then the normalized output).
_PASSES = {"_softmax": 1.8, "_log_softmax": 1.8, "native_layer_norm": 1.5, "native_group_norm": 1.5,
           "native_batch_norm": 1.5, "_native_batch_norm_legit": 1.5, "_native_batch_norm_legit_no_training": 1.0}

# Calibrated on KernelBench eager times on the H200 (docs in the module string); L2/1 (conv
# 300 GFLOP in 3.9 ms) gives the cuDNN figure.
H200 = DeviceModel("H200", bandwidth=3.6e12, flops=50e12, launch_s=6e-6, conv_flops=100e12)


def _tensors(obj: Any, out: list[Any]) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _tensors(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _tensors(o, out)


def _is_view(func: Any) -> bool:
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


class _TooManyKernels(Exception):
    pass


MAX_KERNELS = 4000
"""Counting stops (no estimate) past this many kernels: unrolled recurrences cost seconds to count."""


def _counter(model: DeviceModel) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    class Counter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.cost = TaskCost()

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func._overloadpacket.__name__
            if name in _NO_KERNEL or _is_view(func):
                return out
            ts: list[Any] = []
            _tensors((args, kwargs, out), ts)
            nbytes = float(sum(t.numel() * t.element_size() for t in ts))
            fn = flop_registry.get(func._overloadpacket)
            nflops = 0.0
            if fn is not None:
                try:
                    nflops = float(fn(*args, **kwargs, out_val=out))
                except Exception:  # noqa: BLE001 - a formula that does not apply counts as no FLOPs
                    nflops = 0.0
            c = self.cost
            c.bytes += nbytes
            c.flops += nflops
            c.kernels += 1
            c.time_s += model.kernel_s(nbytes, nflops, name)
            if c.kernels > MAX_KERNELS:
                raise _TooManyKernels
            return out

    return Counter()


def count_task(source: str, model: DeviceModel = H200) -> TaskCost | None:
    """Bytes/FLOPs/kernels of one forward of ``source`` (None when the task cannot run on meta:
    data-dependent shapes, ops without meta kernels, more than :data:`MAX_KERNELS` kernels)."""
    import torch

    ns: dict[str, Any] = {"__name__": "synth_cost_task"}
    try:
        with torch.device("meta"):
            exec(compile(source, "<task>", "exec"), ns)  # noqa: S102 - our own composed task source
            torch.manual_seed(0)
            m = ns["Model"](*ns["get_init_inputs"]())
            inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in ns["get_inputs"]()]
            counter = _counter(model)
            with torch.no_grad(), counter:
                m(*inputs)
        return counter.cost
    except Exception:  # noqa: BLE001 - any failure means "no estimate"
        return None


def estimate_ms(source: str, model: DeviceModel = H200) -> float | None:
    """Estimated eager forward milliseconds of ``source`` on ``model`` (None: no estimate)."""
    c = count_task(source, model)
    return None if c is None else c.time_s * 1e3


def log_uniform(rng: Any, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


__all__ = ["TaskCost", "DeviceModel", "H200", "MAX_KERNELS", "count_task", "estimate_ms", "log_uniform"]
