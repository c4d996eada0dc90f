"""Single-file KernelBench-format solutions (``load_inline`` C++ on CPU) end to end through
``check()`` under both rule sets: the CPU half of ``tests/kb_corpus`` (issue 13).

Every CPU case solves ``tests/kb_corpus/tasks/l2_9_cpu_sizes.py`` (KernelBench L2/9 at CPU sizes)
and, except the one whose build must fail, builds the same C++ source under the same
extension name: a content-keyed build cache compiles it once for the whole module. Each case
is checked once per rule set in a session fixture; the tests read those results.

What the result must say beyond the verdict (issue 13, "say what ran") is read in one place,
``ran``: the names of the extensions whose build or load failed inside the solution (caught
or not), and whether a custom kernel ran during the forward.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

from cuda_agent.sandbox.check import CheckOptions, check
from cuda_agent.tasks import load_file

CORPUS_DIR = Path(__file__).resolve().parent / "kb_corpus"


def _corpus():
    spec = importlib.util.spec_from_file_location("kb_corpus_manifest", CORPUS_DIR / "corpus.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


corpus = _corpus()
CPU_CASES = corpus.load("cpu")
RULES = ("kernelbench", "strict")
SHARED_EXTENSION = "kbc_cpu_linear"
BROKEN_EXTENSION = "kbc_cpu_broken"


def _field(obj, name):
    return obj[name] if isinstance(obj, dict) else getattr(obj, name)


def ran(res) -> tuple[list[str], bool | None]:
    """(extensions that failed to build or load, whether a custom kernel ran in the forward).

    The evaluator's names for these two facts: ``res.extensions`` (one entry per
    ``load_inline``/``load`` build or load the solution attempted, each with ``name`` and
    ``ok``) and ``res.custom_calls`` (calls of the solution's own code during verification)."""
    failed = sorted(_field(e, "name") for e in res.extensions if not _field(e, "ok"))
    return failed, (None if res.custom_calls is None else res.custom_calls > 0)


def verdict(res) -> str:
    return "pass" if res.compiled and res.correct else "reject"


def _options(rules: str) -> CheckOptions:
    return CheckOptions(device="cpu", rules=rules, timing=False, baselines=False, compile_baseline=False,
                        build_timeout=600, verify_timeout=300)


@pytest.fixture(scope="session")
def kb_results():
    """{(case id, rules): CheckResult} for every CPU case of the corpus, each checked once."""
    task = load_file(CORPUS_DIR / "tasks" / "l2_9_cpu_sizes.py")
    out = {}
    for case in CPU_CASES:
        for rules in RULES:
            out[case.id, rules] = check(task, case.solution_path(), _options(rules))
    return out


def _why(res) -> str:
    return (f"error={res.error!r} violations={[(v.rule, v.message) for v in res.violations]} "
            f"classes={res.exploit_classes}")


# --- the corpus itself (no build) --------------------------------------------------------

def test_cpu_cases_share_one_extension():
    """All CPU cases but the failing build carry the same C++ text under the same name, so one
    cold build (30-60 s on a 2-core machine) serves the module."""
    texts, names = {}, {}
    for case in CPU_CASES:
        tree = ast.parse(case.solution_source())
        consts = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                  and "#include <torch/extension.h>" in n.value]
        assert len(consts) == 1, case.id
        texts[case.id] = consts[0]
        names[case.id] = [kw.value.value for n in ast.walk(tree) if isinstance(n, ast.Call)
                          for kw in n.keywords if kw.arg == "name" and isinstance(kw.value, ast.Constant)]
    shared = {cid: t for cid, t in texts.items() if names[cid] == [SHARED_EXTENSION]}
    assert len(set(shared.values())) == 1
    assert set(texts) - set(shared) == {"cpu_tryexcept_build_fails"}
    assert names["cpu_tryexcept_build_fails"] == [BROKEN_EXTENSION]


def test_manifest_is_complete():
    ids = {c.id for c in corpus.load()}
    assert {"cpu_plain", "cpu_build_dir_tmp", "cpu_renamed_params", "cpu_prefolded_params",
            "cpu_tryexcept_build_fails", "cpu_wrong_output"} <= ids
    for c in corpus.load():
        assert c.solution_path().is_file(), c.id
        if c.device == "cpu":
            assert c.expect["kb"] is None  # KernelBench's evaluator needs CUDA


# --- verdicts ----------------------------------------------------------------------------

@pytest.mark.parametrize("rules", RULES)
@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.id)
def test_verdict(kb_results, case, rules):
    res = kb_results[case.id, rules]
    assert res.rules == rules
    assert verdict(res) == case.expect[rules], f"{case.id} under {rules}: {_why(res)}"
    if case.expect[rules] == "pass":
        assert res.error is None and res.violations == [] and res.exploit_classes == [], _why(res)


@pytest.mark.parametrize("rules", RULES)
@pytest.mark.parametrize("case", [c for c in CPU_CASES if c.id != "cpu_tryexcept_build_fails"],
                         ids=lambda c: c.id)
def test_the_extension_built_and_ran(kb_results, case, rules):
    res = kb_results[case.id, rules]
    assert res.compiled, _why(res)
    assert ran(res) == ([], True), f"{case.id} under {rules}: {ran(res)}"
    # its cold build compiled against the precompiled torch/extension.h (gcc said nothing against it)
    assert [e.get("pch") for e in res.extensions] == ["used"], res.extensions


@pytest.mark.parametrize("rules", RULES)
def test_caught_build_failure_is_recorded(kb_results, rules):
    """The solution swallows its failed build and torch answers: the numbers are right, and the
    result still says that the extension never loaded and no custom kernel ran."""
    res = kb_results["cpu_tryexcept_build_fails", rules]
    assert ran(res) == ([BROKEN_EXTENSION], False), ran(res)
    if rules == "kernelbench":
        assert res.correct, _why(res)  # KernelBench's protocol: torch computed the right answer
    else:
        assert not res.correct and 1 in res.exploit_classes, _why(res)  # fallback to PyTorch


def test_mixed_kernel_and_torch_is_strict_only_reject(kb_results):
    assert kb_results["cpu_mixed_torch_kernel", "kernelbench"].correct
    res = kb_results["cpu_mixed_torch_kernel", "strict"]
    assert not res.correct and 1 in res.exploit_classes, _why(res)
    assert res.violations, _why(res)  # a rule, not the numbers


@pytest.mark.parametrize("rules", RULES)
def test_wrong_output_fails_on_the_numbers(kb_results, rules):
    res = kb_results["cpu_wrong_output", rules]
    assert res.compiled and not res.correct
    assert res.verdict is not None and res.verdict.stage == "compare", _why(res)
    assert res.exploit_classes == [], _why(res)  # a bug, not a named hack

