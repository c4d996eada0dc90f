"""The reference model on the judge's side: built seeded as KernelBench builds it, its
outputs for any input seed, and the float64 "truth" the candidate's error is measured against.

The float64 twin is a copy of the model converted with ``.double()``; where that cannot run
(a module kept by a lambda stays FP32 after ``.double()``) the model is rebuilt under a
float64 default dtype with the same weights.  ``Reference.route`` says which one ran, or why
neither did (the precision-honesty check is then skipped, and the check says so).
"""

from __future__ import annotations

import math
import sys
import time
import types

from ..tasks import Task
from . import inputs
from .inputs import flatten

KERNELBENCH_SEED = 42


def kernelbench_trial_seeds(n: int) -> list[int]:
    """KernelBench's per-trial input seeds: drawn from a generator seeded with 42."""
    import torch

    g = torch.Generator().manual_seed(KERNELBENCH_SEED)
    return [int(torch.randint(0, 2**32 - 1, (1,), generator=g).item()) for _ in range(n)]


def module_from_source(source: str, name: str) -> types.ModuleType:
    """Execute ``source`` as module ``name`` (registered in ``sys.modules``)."""
    mod = types.ModuleType(name)
    mod.__file__ = f"<{name}>"
    sys.modules[name] = mod
    exec(compile(source, f"<{name}>", "exec"), mod.__dict__)
    return mod


def construct(mod, seed: int):
    """``mod.Model`` built as KernelBench builds it: the seed before ``get_init_inputs()`` and
    again before the constructor (a ModelNew built the same way holds the same weights)."""
    import torch

    torch.manual_seed(seed)
    init = mod.get_init_inputs()
    torch.manual_seed(seed)
    return mod.Model(*init)


def float64_twin(model):
    """A float64 copy of the reference (the 'truth' the outputs are measured against), or None."""
    import copy

    try:
        return copy.deepcopy(model).double()
    except Exception:
        return None


def run64(model64, xs) -> list:
    """Outputs of the float64 twin on upcast inputs (raises when the task cannot run so)."""
    import torch

    low = (torch.float32, torch.float16, torch.bfloat16)
    xs64 = [x.double() if isinstance(x, torch.Tensor) and x.dtype in low else x for x in xs]
    outs = [r.detach() if isinstance(r, torch.Tensor) else r for r in flatten(model64(*xs64))]
    if any(isinstance(r, torch.Tensor) and r.is_floating_point() and r.dtype != torch.float64 for r in outs):
        raise TypeError("an output stayed in reduced precision (part of the model was not converted)")
    return outs


class Reference:
    """The reference model in the judge: outputs (and float64 outputs) for any seed.

    Built as KernelBench builds both models (:func:`construct`).  The float64 "truth" comes
    from a float64 copy of the model, or where that cannot run from the model rebuilt under a
    float64 default dtype with the same weights; ``route`` says which, or why neither ran."""

    def __init__(self, task: Task, device: str, init_seed: int, inputs_on_cpu: bool = False) -> None:
        self.device = device
        self.init_seed = init_seed
        self.on_device = not inputs_on_cpu
        self.mod = module_from_source(task.source, f"cuda_agent_task_{task.sha}")
        self.model = construct(self.mod, init_seed).to(device)
        self.model64 = float64_twin(self.model)
        self.call_s: dict[str, float] = {}
        """The reference's fastest call per input module (the task, a size variant): the
        yardstick for how long a candidate's call may take before it is a hang."""
        self.route = "float64 copy" if self.model64 is not None else ""
        if self.model64 is None:
            self._rebuild64("the model cannot be copied")

    def _rebuild64(self, why: str) -> None:
        import torch

        old = torch.get_default_dtype()
        try:
            torch.set_default_dtype(torch.float64)
            m64 = construct(self.mod, self.init_seed)
            m64.load_state_dict(self.model.state_dict())
            self.model64, self.route = m64.to(self.device).double(), "float64 rebuild"
        except Exception as e:  # noqa: BLE001 - said in the result, never silently
            self.model64, self.route = None, f"unavailable: {why}; rebuilt in float64: {type(e).__name__}: {e}"[:300]
        finally:
            torch.set_default_dtype(old)

    def outputs(self, seed: int, mod=None) -> tuple[list, list | None, int]:
        """(outputs, float64 outputs or None, input bytes) for the inputs of ``seed``."""
        import torch

        with torch.no_grad():
            xs = inputs.draw(mod or self.mod, seed, self.device, on_device=self.on_device)
            nbytes = sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))
            t = time.perf_counter()
            out = self.model(*xs)
            if self.device == "cuda":
                torch.cuda.synchronize()
            self._timed(mod, time.perf_counter() - t)
            outs = [r.detach().clone() if isinstance(r, torch.Tensor) else r for r in flatten(out)]
            r64 = None
            if self.model64 is not None:
                try:
                    r64 = run64(self.model64, xs)
                except Exception as e:  # noqa: BLE001
                    if self.route == "float64 copy":
                        self._rebuild64(f"the float64 copy failed ({type(e).__name__}: {str(e)[:120]})")
                        return self.outputs(seed, mod)
                    self.model64, self.route = None, f"unavailable: the float64 rebuild failed: {e}"[:300]
        return outs, r64, nbytes

    def _timed(self, mod, seconds: float) -> None:
        key = (mod or self.mod).__name__
        self.call_s[key] = min(self.call_s.get(key, math.inf), seconds)

    def time_call(self, seed: int) -> None:
        """One more timed call (the first ones overlap the runner's start-up)."""
        import torch

        with torch.no_grad():
            xs = inputs.draw(self.mod, seed, self.device, on_device=self.on_device)
            t = time.perf_counter()
            self.model(*xs)
            if self.device == "cuda":
                torch.cuda.synchronize()
            self._timed(None, time.perf_counter() - t)
