"""The precompiled ``torch/extension.h`` that cold single-file builds compile against (issue 13,
"make cold builds cheaper"): which requests get one, and that a header gcc cannot use costs
nothing but the time (the build falls back to the real header and says so)."""

from __future__ import annotations

import importlib.util
import os

import torch

from cuda_agent.sandbox import inline_build

SRC = "torch::Tensor plus_k(torch::Tensor x) { return x + %s; }"


def request(**kw) -> dict:
    req = {"api": "load_inline", "name": "pch_probe", "cpp_sources": SRC % "1", "functions": ["plus_k"]}
    req.update(kw)
    return inline_build.normalize(req)


def test_which_requests_are_offered_a_precompiled_header():
    plain = inline_build.pch_place(request(), "cpu")
    assert plain is not None and plain.name == "include" and plain.parent.parent.name == "pch"
    opt = inline_build.pch_place(request(extra_cflags=["-O3", "-fopenmp"]), "cpu")
    assert opt is not None and opt != plain  # other code-generation flags: a variant of its own
    assert inline_build.pch_place(request(extra_cflags=[" -O3", "-fopenmp "]), "cpu") == opt
    assert inline_build.pch_place(request(cpp_sources=SRC % "2"), "cpu") == plain  # the source is not in it
    # a define, an include path, a plugin: the compile goes without (nothing of the candidate's in the header)
    for flags in (["-DUSE_FAST=1"], ["-I/somewhere"], ["-fplugin=/tmp/x.so"], ["-O3", "-include", "x.h"]):
        assert inline_build.pch_place(request(extra_cflags=flags), "cpu") is None, flags
    # no C++ source that includes the header
    assert inline_build.pch_place(request(no_implicit_headers=True), "cpu") is None
    assert inline_build.pch_place(request(no_implicit_headers=True,
                                          cpp_sources="#include <torch/extension.h>\n" + SRC % "1"), "cpu") == plain


def test_a_header_gcc_cannot_use_only_costs_time(tmp_path):
    """A broken ``.gch`` in the variant's place (what a full disk could once have left): gcc warns
    under -Winvalid-pch, compiles against the real header, and the result says ``not used``."""
    req = request(name="pch_fallback", cpp_sources=SRC % "3", extra_cflags=["-O1"])
    place = inline_build.pch_place(req, "cpu")
    (place / "torch").mkdir(parents=True, exist_ok=True)
    (place / "torch" / "extension.h.gch").write_bytes(os.urandom(4096))
    try:
        rep = inline_build.serve(req, "cpu", tmp_path, timeout=600)
    finally:
        (place / "torch" / "extension.h.gch").unlink()
    assert rep["ok"], rep.get("log")
    assert rep["pch"] == "not used" and rep["cached"] is False
    spec = importlib.util.spec_from_file_location("pch_fallback", rep["path"])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert torch.equal(mod.plus_k(torch.zeros(3)), torch.full((3,), 3.0))
