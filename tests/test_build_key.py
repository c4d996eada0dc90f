"""The build key covers every file the compiler can reach (one definition of a kernel source and
a kernel header, shared with the static rules): an edit to any linted file changes the key, and
a check never passes on a stale object.

The measured bug this guards: a kernel that includes ``sub/factor.hh`` passed; the header was
edited so that the output doubles, and the check still passed, because ``kernels/sub/`` and
``.hh`` were left out of the key and the old object ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.sandbox import sources
from cuda_agent.sandbox.build import build
from cuda_agent.sandbox.check import CheckOptions, check
from cuda_agent.sandbox.rules import check_sources

from conftest import copy_example

# the example's kernel, its factor taken from a nested .hh header
KERNEL = """#include <cmath>
#include <cstdint>
#include "sub/factor.hh"

extern "C" int scaled_swish_cpu(const float* x, const float* scale, float* out, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i) {
    float v = x[i];
    out[i] = v / (1.0f + std::exp(-v)) * scale[i % cols] * CA_TEST_FACTOR;
  }
  return 0;
}
"""


def _with_header(dst: Path, factor: str) -> Path:
    sol = copy_example(dst, {"kernels/swish.cpp": KERNEL})
    (sol / "kernels" / "sub").mkdir()
    (sol / "kernels" / "sub" / "factor.hh").write_text(f"#pragma once\n#define CA_TEST_FACTOR {factor}\n")
    return sol


def test_edit_of_a_nested_hh_header_is_not_judged_on_the_stale_object(example_task, tmp_path):
    sol = _with_header(tmp_path / "ws", "1.0f")
    o = CheckOptions(device="cpu", compile_baseline=False, timing=False, baselines=False, n_sets=2,
                     verify_timeout=120)
    first = check(example_task, sol, o)
    assert first.correct, first.error
    (sol / "kernels" / "sub" / "factor.hh").write_text("#pragma once\n#define CA_TEST_FACTOR 2.0f\n")
    second = check(example_task, sol, o)
    assert second.compiled and not second.correct, "the check ran the object of the old header"
    assert second.verdict.stage == "compare"
    assert sorted(second.build.compiled) == ["swish.cpp", "swish_binding.cpp"]  # a header is in every key


@pytest.mark.parametrize("rel", ["kernels/params.h", "kernels/deep/er/x.hh", "kernels/a.hpp", "kernels/b.cuh",
                                 "kernels/c.inl", "kernels/sub/tables.inc", "kernels/.hidden/d.h"])
def test_an_edit_to_any_file_under_kernels_changes_the_build_key(example_dir, tmp_path, rel):
    sol = copy_example(tmp_path / "ws")
    f = sol / rel
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text("// one\n")
    before = build(sol / "kernels", "cpu")
    assert before.ok, before.log
    f.write_text("// two\n")
    after = build(sol / "kernels", "cpu")
    assert after.ok and after.so_path != before.so_path
    assert sorted(after.compiled) == ["swish.cpp", "swish_binding.cpp"]


def test_every_linted_file_is_in_the_build_key(tmp_path):
    """The static rules and the build enumerate kernels/ alike."""
    k = tmp_path / "kernels"
    for rel in ("a.cu", "b.cpp", "c.cc", "d.cxx", "e_binding.cpp", "sub/f.h", "sub/g.hh", "sub/h.hpp",
                "sub/deeper/i.cuh", "j.inl", "k.c"):
        (k / rel).parent.mkdir(parents=True, exist_ok=True)
        (k / rel).write_text("// x\n")
    linted = {Path(v.where.rpartition(":")[0]).as_posix() for v in check_sources(tmp_path)} | {
        p.relative_to(tmp_path).as_posix() for p in sources.cpp_files(tmp_path)}
    keyed = {p.relative_to(tmp_path).as_posix() for p in sources.key_files(k)}
    assert {p for p in linted if p.startswith("kernels/")} <= keyed
    assert {s.relative_to(k).as_posix() for s in sources.kernel_sources(k)} == {
        "a.cu", "b.cpp", "c.cc", "d.cxx", "e_binding.cpp", "k.c"}


def test_nested_and_cxx_cc_sources_are_compiled(example_dir, tmp_path):
    sol = copy_example(tmp_path / "ws", {"kernels/swish.cpp": None})
    (sol / "kernels" / "impl").mkdir()
    (sol / "kernels" / "impl" / "swish.cxx").write_text((example_dir / "solution/kernels/swish.cpp").read_text())
    (sol / "kernels" / "impl" / "unused.cc").write_text("int ca_test_unused() { return 1; }\n")
    r = build(sol / "kernels", "cpu")
    assert r.ok, r.log
    assert {"impl/swish.cxx", "impl/unused.cc"} <= set(r.compiled)


def test_a_c_source_is_refused_with_a_clear_message(example_dir, tmp_path):
    sol = copy_example(tmp_path / "ws")
    (sol / "kernels" / "extra.c").write_text("int f(void) { return 1; }\n")
    r = build(sol / "kernels", "cpu")
    assert not r.ok
    assert r.log.startswith("kernels/extra.c: C sources are not built") and ".cpp" in r.log
