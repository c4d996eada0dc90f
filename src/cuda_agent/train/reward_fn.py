"""Stage-1 reward: verl's custom ``compute_score`` for single-turn answers.

The answer holds the solution as ``<file path="...">...</file>`` blocks (the format the
stage-1 prompt states, :data:`cuda_agent.train.data.RESPONSE_FORMAT`).  The files are
written to a fresh directory and judged by :func:`cuda_agent.sandbox.check.check` with
the device, rules and reward scheme stored in the row's ``extra_info`` (keyword arguments
``device``/``rules``/``reward`` override them, e.g. through verl's
``custom_reward_function.reward_kwargs``).  A malformed answer (no blocks, a path outside
the allowed set, no ``model_new.py``) scores the scheme's failure value without running
anything; nothing here raises into the trainer.

The returned dict always has the same keys, so verl can batch them as reward extra info.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import reward as rewards
from ..sandbox.results import CheckResult
from ..tasks import TaskError
from .data import task_from_row

_FILE = re.compile(r'^<file path="([^"\n]+)">[ \t]*\n(.*?)\n?^</file>[ \t]*$', re.S | re.M)
ALLOWED_PATH = re.compile(r"^(model_new\.py|kernels/[A-Za-z0-9_][A-Za-z0-9_.-]*\.(cu|cuh|cpp|h|hpp))$")


class FormatError(ValueError):
    """The answer is not a solution in the file-block format."""


def strip_reasoning(text: str) -> str:
    """Drop a reasoning preamble that ends with ``</think>`` (thinking models)."""
    i = text.rfind("</think>")
    return text[i + len("</think>"):] if i >= 0 else text


def parse_files(text: str) -> dict[str, str]:
    """Answer text -> {relative path: content}; raises :class:`FormatError` with the reason."""
    files: dict[str, str] = {}
    for path, body in _FILE.findall(strip_reasoning(text)):
        path = path.strip()
        if not ALLOWED_PATH.match(path) or ".." in path:
            raise FormatError(f"file path {path!r} is not model_new.py or kernels/<name>.<cu|cuh|cpp|h|hpp>")
        files[path] = body + "\n"
    if not files:
        raise FormatError('no <file path="..."> blocks in the answer')
    if "model_new.py" not in files:
        raise FormatError("the answer has no model_new.py block")
    return files


def write_solution(files: dict[str, str], directory: Path) -> Path:
    (directory / "kernels").mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        (directory / rel).write_text(text)
    return directory


@dataclass
class Score:
    """What compute_score returns (as a dict); same keys for every answer."""

    score: float
    format_ok: bool
    compiled: bool
    correct: bool
    speedup_eager: float
    speedup_compile: float
    n_files: int
    failure: str
    """Empty when the solution is correct; else the first reason it is not."""


def failure_score(scheme: str) -> float:
    """The scheme's value for a solution that does not compile."""
    return rewards.compute(scheme, rewards.Outcome(compiled=False, correct=False))


def _failure(r: CheckResult) -> str:
    if r.correct and r.compiled:
        return ""
    if r.error:
        return r.error.strip().splitlines()[0][:500]
    if r.violations:
        v = r.violations[0]
        return f"violation {v.rule}: {v.message}"[:500]
    return "not correct" if r.compiled else "did not compile"


def judge(files: dict[str, str], task, device: str, rules: str, scheme: str, **options: Any) -> CheckResult:
    """Write ``files`` to a temporary directory and check them."""
    from ..sandbox.check import CheckOptions, check

    with tempfile.TemporaryDirectory(prefix="ca-reward-") as d:
        sol = write_solution(files, Path(d) / "solution")
        return check(task, sol, CheckOptions(device=device, rules=rules, reward=scheme, **options))


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  device: str | None = None, rules: str | None = None, reward: str | None = None,
                  timing: bool | None = None, **_: Any) -> dict[str, Any]:
    """verl's custom reward entry point (``reward.custom_reward_function.name=compute_score``).

    ``timing=False`` (or ``extra_info["timing"]`` false) judges correctness only: no timing
    and no baselines, so the speed tiers of the scheme cannot be reached."""
    info = dict(extra_info or {})
    device = device or info.get("device") or "cuda"
    rules = rules or info.get("rules") or "strict"
    scheme = reward or info.get("reward") or "paper"
    if scheme not in rewards.names():
        scheme_error = f"unknown reward scheme {scheme!r}; known: {', '.join(rewards.names())}"
        return asdict(Score(failure_score("paper"), False, False, False, 0.0, 0.0, 0, scheme_error))
    fail = failure_score(scheme)
    try:
        files = parse_files(solution_str if isinstance(solution_str, str) else "")
        task = task_from_row(ground_truth, info)
    except (FormatError, TaskError) as e:
        return asdict(Score(fail, False, False, False, 0.0, 0.0, 0, f"{type(e).__name__}: {e}"))
    timed = timing if timing is not None else bool(info.get("timing", True))
    try:
        r = judge(files, task, device, rules, scheme, timing=timed, baselines=timed)
    except Exception as e:  # check() never raises by contract; keep the trainer alive anyway
        return asdict(Score(fail, True, False, False, 0.0, 0.0, len(files), f"evaluator failed: {type(e).__name__}: {e}"))
    return asdict(score_of(r, fail, n_files=len(files)))


def score_of(r: CheckResult, fail: float, n_files: int, format_ok: bool = True) -> Score:
    """A CheckResult as a :class:`Score` (``fail`` when the check gave no reward)."""
    return Score(float(r.reward if r.reward is not None else fail), format_ok, bool(r.compiled),
                 bool(r.correct and r.compiled), float(r.speedup_eager or 0.0),
                 float(r.speedup_compile or 0.0), n_files, _failure(r))
