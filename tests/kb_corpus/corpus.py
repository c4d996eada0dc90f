"""The KernelBench-format corpus: single-file solutions, the problems they solve, and what each
judge should say about them (``manifest.jsonl``, one case per line).

Fields of a case:

``id``        unique name
``solution``  ``cpu/x.py`` / ``cuda/x.py`` (relative to this directory) or ``upstream:<path>``:
              a file of KernelBench's own tree (relative to its root, e.g.
              ``upstream:kernelbench/prompts/model_new_ex_add.py``), read where it lies, never copied
``problem``   ``L<level>/<id>`` (KernelBench's dataset JSONL), ``file:<path>`` (relative to this
              directory) or ``upstream:<path>``
``backend``   ``cpu-cpp``, ``cuda``, ``triton``, ``cupy``, ``cute``, ``tilelang``, ``hip``,
              ``thunderkittens`` (KernelBench's ``backend`` argument is derived from it)
``device``    ``cpu`` or ``cuda``
``kind``      what the case is, and so what both our rule sets must say (checked at load):
              ``honest``: within both rule sets' rules, must pass both;
              ``kernelbench-only``: allowed by KernelBench's rules, outside the rules that
              ``strict`` adds on purpose (the paper's: no torch compute in ``forward`` or in the
              C++, a custom kernel must run, the operator at other sizes): passes
              ``kernelbench``, rejected by ``strict``;
              ``bug``: an honest mistake (a wrong output, a compile error), rejected by both;
              ``hack``: one of exploits.md's tricks, rejected by both
``class``     the exploits.md class of a hack (``../shared/notes/exploits.md``), or the class
              ``strict`` names for a ``kernelbench-only`` case; else null
``expect``    ``{"kb": ..., "kernelbench": ..., "strict": ...}``, each ``pass`` or ``reject``:
              KernelBench's ``eval_kernel_against_ref`` at its pinned commit (fp32 tolerance
              1e-4; null where it cannot run: CPU cases), ``cuda-agent check --rules
              kernelbench`` and ``--rules strict``
``timing``    true: the hack is a timing one, our check must run its timing phase to see it
``needs``     Python modules (or ``amd``) without which the case cannot run (skipped, not failed)
``note``      why the verdicts are what they are; for a hack that KernelBench passes, the reason
              we reject it

A disagreement between ``kb`` and ``kernelbench`` is only allowed for a hack (its ``class``
names what we catch that KernelBench does not).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "manifest.jsonl"
VERDICTS = ("pass", "reject")
BACKENDS = ("cpu-cpp", "cuda", "triton", "cupy", "cute", "tilelang", "hip", "thunderkittens")
OURS = {"honest": ("pass", "pass"), "kernelbench-only": ("pass", "reject"), "bug": ("reject", "reject"),
        "hack": ("reject", "reject")}
"""What ``--rules kernelbench`` and ``--rules strict`` must say about each kind (issue 13's done-when:
every honest solution passes both, every hack is rejected by both)."""
KEYS = {"id", "solution", "problem", "backend", "device", "kind", "class", "expect", "timing", "needs", "note"}


def upstream_root() -> Path:
    """KernelBench's evaluator tree (``$KB_UPSTREAM`` or ``<repo>/../shared/kernelbench/upstream``)."""
    return Path(os.environ.get("KB_UPSTREAM") or HERE.parents[2] / "shared" / "kernelbench" / "upstream")


def kernelbench_jsonl() -> Path:
    return Path(os.environ.get("CUDA_AGENT_KERNELBENCH")
                or upstream_root().parent / "kernelbench.jsonl")


@dataclass
class Case:
    id: str
    solution: str
    problem: str
    backend: str
    device: str
    kind: str
    expect: dict
    cls: int | None = None
    timing: bool = False
    needs: list = field(default_factory=list)
    note: str = ""

    @property
    def kb_backend(self) -> str:
        """KernelBench's ``backend`` argument: its tempfile loader for the JIT DSLs, exec otherwise."""
        return self.backend if self.backend in ("triton", "cute", "tilelang") else "cuda"

    def solution_path(self) -> Path:
        return _path(self.solution)

    def solution_source(self) -> str:
        return self.solution_path().read_text()

    def problem_ref(self) -> str:
        """What ``cuda-agent check`` takes as TASK (with ``--kernelbench`` for L<level>/<id>)."""
        return self.problem if self.problem.startswith("L") else str(_path(self.problem))

    def problem_source(self) -> str:
        if self.problem.startswith("L"):
            level, pid = (int(x) for x in self.problem[1:].split("/"))
            with kernelbench_jsonl().open() as f:
                for line in f:
                    row = json.loads(line)
                    if int(row["level"]) == level and int(row["problem_id"]) == pid:
                        return row["code"]
            raise KeyError(f"{self.problem} not in {kernelbench_jsonl()}")
        return _path(self.problem).read_text()

    def missing(self) -> list[str]:
        """What this case needs that this machine lacks (empty: it can run)."""
        import importlib.util

        out = []
        for n in self.needs:
            if n == "amd":
                out.append("an AMD GPU")
            elif importlib.util.find_spec(n) is None:
                out.append(n)
        return out


def _path(ref: str) -> Path:
    if ref.startswith("upstream:"):
        return upstream_root() / ref[len("upstream:"):]
    if ref.startswith("file:"):
        return HERE / ref[len("file:"):]
    return HERE / ref


def load(device: str | None = None) -> list[Case]:
    cases, seen = [], set()
    for i, line in enumerate(MANIFEST.read_text().splitlines(), 1):
        if not line.strip():
            continue
        d = json.loads(line)
        unknown = set(d) - KEYS
        assert not unknown, f"manifest line {i}: unknown keys {unknown}"
        assert d["id"] not in seen, f"manifest line {i}: duplicate id {d['id']}"
        seen.add(d["id"])
        assert d["backend"] in BACKENDS and d["kind"] in OURS, d
        assert all(d["expect"].get(k) in VERDICTS + (None,) for k in ("kb", "kernelbench", "strict")), d
        assert (d["expect"]["kernelbench"], d["expect"]["strict"]) == OURS[d["kind"]], \
            f"{d['id']}: a {d['kind']} case is expected {OURS[d['kind']]} by kernelbench and strict"
        assert d["kind"] != "hack" or d.get("class") is not None, f"{d['id']}: a hack names its class"
        assert d["kind"] in ("hack", "kernelbench-only") or d.get("class") is None, d
        c = Case(id=d["id"], solution=d["solution"], problem=d["problem"], backend=d["backend"],
                 device=d["device"], kind=d["kind"], expect=d["expect"], cls=d.get("class"),
                 timing=bool(d.get("timing")), needs=list(d.get("needs", [])), note=d.get("note", ""))
        if device is None or c.device == device:
            cases.append(c)
    return cases


def kb_protocol(problem_src: str, solution_src: str, device: str = "cpu", trials: int = 5,
                tol: float = 1e-4, seed: int = 42) -> tuple[bool, str]:
    """KernelBench's correctness protocol (eval.py at the pinned commit), restated in a few lines
    to check this corpus itself on any device, without our evaluator: seed 42 before each
    constructor, no weight copy, per-trial seeds drawn from ``manual_seed(42)``, the reference
    first, a shape check, ``allclose(atol=rtol=tol)`` on every trial. Runs the candidate in
    this process: corpus self-checks only, never for untrusted code."""
    import torch

    ref_ns: dict = {}
    exec(compile(problem_src, "<problem>", "exec"), ref_ns)
    new_ns: dict = {"__name__": "kb_corpus_candidate"}
    exec(compile(solution_src, "<candidate>", "exec"), new_ns)
    torch.manual_seed(seed)
    init = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ref_ns["get_init_inputs"]()]
    with torch.no_grad():
        torch.manual_seed(seed)
        ref = ref_ns["Model"](*init).to(device)
        torch.manual_seed(seed)
        new = new_ns["ModelNew"](*init).to(device)
        torch.manual_seed(seed)
        seeds = [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(trials)]
        for t, s in enumerate(seeds):
            torch.manual_seed(s)
            xs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ref_ns["get_inputs"]()]
            out = ref(*xs)
            got = new(*xs)
            if out.shape != got.shape:
                return False, f"trial {t}: shape {tuple(got.shape)} != {tuple(out.shape)}"
            if not torch.allclose(out, got, atol=tol, rtol=tol):
                return False, f"trial {t}: max abs diff {(out - got).abs().max().item():.3g}"
    return True, f"{trials}/{trials} trials within {tol}"


if __name__ == "__main__":  # self-check: python tests/kb_corpus/corpus.py [--device cpu] [ids...]
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("ids", nargs="*")
    a = ap.parse_args()
    for c in load(a.device):
        if a.ids and c.id not in a.ids:
            continue
        if c.missing():
            print(f"{c.id:40s} skipped (needs {', '.join(c.missing())})")
            continue
        try:
            ok, why = kb_protocol(c.problem_source(), c.solution_source(), a.device)
        except Exception as e:  # a build failure not caught by the solution
            ok, why = False, f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
        exp = c.expect["kb"] if c.expect["kb"] is not None else c.expect["kernelbench"]
        verdict = "pass" if ok else "reject"
        print(f"{c.id:40s} {verdict:6s} (expected {exp}) {why}")
