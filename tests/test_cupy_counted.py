"""CuPy's kernels count as the solution's own code (strict's no-custom-code rule needs that).

CuPy cannot run without a GPU, so this CPU test stands a package named ``cupy`` on the path
whose kernel types are, like CuPy's, classes with a ``__call__`` and a ``name``; the runner's
import hook must patch them when the solution imports it, before any kernel is made at module
level.  The GPU half, with the real CuPy under ``check``, is tests/gpu/test_kernel_languages.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

FAKE_CUPY = '''
class RawKernel:
    def __init__(self, code, name):
        self.code, self.name = code, name
    def __call__(self, grid, block, args):
        return ("launched", self.name)

class ElementwiseKernel:
    def __init__(self, in_params, name):
        self.name = name
    def __call__(self, *args):
        return ("launched", self.name)

class _Function:
    def __init__(self, name):
        self.name = name
    def __call__(self, *args):
        return ("launched", self.name)

class RawModule:
    def __init__(self, code):
        self.code = code
    def get_function(self, name):
        return _Function(name)
'''

SOLUTION = '''
import cupy as cp
_k = cp.RawKernel("extern C ...", "diag_mul")        # made at import time, as solutions do
_mod = cp.RawModule("...")
def forward():
    return _k((1,), (1,), ()), _mod.get_function("axpy")(1), cp.ElementwiseKernel("", "scale")()
'''


def test_kernels_made_at_import_time_are_counted(tmp_path):
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(FAKE_CUPY)
    (tmp_path / "solution.py").write_text(SOLUTION)
    prog = textwrap.dedent(f"""
        import json, sys
        sys.path[:0] = [{str(SRC)!r}, {str(tmp_path)!r}]
        from cuda_agent.sandbox import inline_hook
        inline_hook.install(lambda req: {{}})
        import solution
        inline_hook.reset(False)
        solution.forward()                  # not counted: the judge did not ask
        inline_hook.reset(True)
        out = solution.forward()
        print(json.dumps({{"calls": dict(inline_hook.calls), "out": out}}))
    """)
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["calls"] == {"cupy.diag_mul": 1, "cupy.axpy": 1, "cupy.scale": 1}
    # the launches themselves still reach CuPy's own types
    assert got["out"] == [["launched", "diag_mul"], ["launched", "axpy"], ["launched", "scale"]]
