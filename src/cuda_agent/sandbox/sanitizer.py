"""compute-sanitizer on one forward of a candidate: memcheck, racecheck, initcheck, synccheck.

Each tool wraps the runner inside the same sandbox as a check (process.run_under) for one
forward on the task's first input set, with ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``: PyTorch's
caching allocator hands out pieces of large blocks, and an access past a tensor's end lands
inside the block, where memcheck sees nothing (measured on the H200: 0 errors with the
cache, the write reported without it).  Workspace builds always carry ``-lineinfo``;
``NVCC_APPEND_FLAGS`` adds it to a ``load_inline`` build made during the run.

The tools write to a log file in the job directory; every line starts with ``=========``.  A
report opens at the prefix's indentation (``Invalid __global__ write of size 4 bytes``,
``Error: Race reported between Write access at k(float *)+0x1a0 in race.cu:15``,
``Uninitialized __global__ memory read ...``, ``Barrier error detected ...``) and goes on with
indented lines (``at double_peek(const float *, float *, long)+0x110 in oob.cu:10`` as recorded
with 2025.3, older tools ``at 0x80 in /src/oob.cu:12:k(...)``; the thread and block; the address against the
nearest allocation; host frames); a summary line ends the log (``ERROR SUMMARY: 1 error``,
``RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)``).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import replace
from pathlib import Path

from . import inline_build
from .isolation import Limits
from .process import find_cuda_tool, keep_log, run_under
from .results import SanitizerFinding, SanitizerReport

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
PRINT_LIMIT = 20
ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "NVCC_APPEND_FLAGS": "-lineinfo"}

_PREFIX = re.compile(r"^=========(?P<indent> *)(?P<body>.*)$")
_AT_NEW = re.compile(r"\bat\s+(?P<fn>.+?)(?P<off>\+0x[0-9a-fA-F]+)(?:\s+in\s+(?P<file>[^\s:]+):(?P<line>\d+))?")
_AT_OLD = re.compile(r"\bat\s+0x[0-9a-fA-F]+\s+in\s+(?P<file>[^\s:]+):(?P<line>\d+):(?P<fn>.+)")
_SUMMARY = re.compile(r"(?:ERROR SUMMARY:\s*(?P<n>[\d,]+)\s+error)|(?:\((?P<r>[\d,]+)\s+errors?,)")
_SKIP = ("Host Frame", "Device Frame", "Saved host backtrace", "COMPUTE-SANITIZER", "by thread", "=========")
# the tool's account of how the process ended, not a finding (not in its ERROR SUMMARY count);
# recorded after the planted out-of-bounds read killed the forward (tests/fixtures/gputools)
_EXIT = ("Error: process didn't terminate successfully", "Target application returned")


def find_sanitizer() -> str | None:
    return find_cuda_tool("compute-sanitizer")


def command(exe: str, tool: str, log_file: Path) -> list[str]:
    return [exe, "--tool", tool, "--log-file", str(log_file), "--print-limit", str(PRINT_LIMIT),
            "--target-processes", "all"]


def _where(file: str | None, line: str | None, fn: str, names: set[str]) -> str:
    if file and line:
        base = Path(file).name
        return (f"kernels/{base}:{line}" if base in names and not base.endswith(".py") else f"{base}:{line}")
    return fn.strip()


def _kernel(fn: str) -> str:
    from .ncu import base_name

    return base_name(fn) if fn else ""


def _location(line: str, names: set[str]) -> tuple[str, str] | None:
    """(kernel, where) of an ``at ...`` clause, or None."""
    m = _AT_OLD.search(line)
    if m:
        return _kernel(m.group("fn")), _where(m.group("file"), m.group("line"), m.group("fn"), names)
    m = _AT_NEW.search(line)
    if m:
        k = _kernel(m.group("fn"))
        return k, _where(m.group("file"), m.group("line"), k + m.group("off"), names)
    return None


def parse(tool: str, text: str, source_names: set[str] | None = None) -> tuple[list[SanitizerFinding], int | None]:
    """(findings, the summary's error count or None) of one tool's log."""
    names = source_names or set()
    records: list[list[str]] = []
    errors: int | None = None
    for raw in text.splitlines():
        m = _PREFIX.match(raw)
        if not m:
            continue
        body = m.group("body").rstrip()
        s = _SUMMARY.search(body)
        if s and ("SUMMARY" in body):
            errors = int((s.group("n") or s.group("r")).replace(",", ""))
            continue
        if not body or body.startswith("COMPUTE-SANITIZER"):
            continue
        if not m.group("indent").strip(" ") and len(m.group("indent")) <= 1:
            records.append([body])
        elif records:
            records[-1].append(body.strip())
    merged: dict[tuple[str, str, str], SanitizerFinding] = {}
    for rec in records:
        head = rec[0]
        if head.startswith(_EXIT) or (head.startswith("Program hit") and tool != "memcheck"):
            continue
        kernel = where = detail = ""
        kind = head
        loc = _location(head, names)
        if loc:  # racecheck puts the first access on the head line
            kernel, where = loc
            kind = re.sub(r"^(?:Error|ERROR|Warning|WARN(?:ING)?):\s*", "", head.split(" at ", 1)[0])
        for ln in rec[1:]:
            if ln.startswith(_SKIP):
                continue
            got = _location(ln, names) if ln.startswith(("at ", "and ")) else None
            if got and not where:
                kernel, where = got
            elif got:
                detail = detail or (ln.split(" at ", 1)[0] + " at " + got[1] + _hazards(ln))
            elif "nearest allocation" in ln or (not detail and ("out of bounds" in ln or "misaligned" in ln)):
                detail = ln  # where the access fell relative to a buffer says most
        key = (kind, kernel, where)
        if key in merged:
            merged[key].count += 1
        else:
            merged[key] = SanitizerFinding(tool, kind[:160], kernel, where, 1, detail[:200])
    return list(merged.values()), errors


def _hazards(line: str) -> str:
    m = re.search(r"\[[\d,]+ hazards?\]", line)
    return f" {m.group(0)}" if m else ""


def run(tool: str, job_file: Path, seed: int, source_names: set[str] | None = None, *,
        env: dict[str, str] | None = None, limits: Limits | None = None, timeout: float = 300.0) -> SanitizerReport:
    """One compute-sanitizer tool on one forward of the job's solution; never raises."""
    t0 = time.perf_counter()
    if tool not in TOOLS:
        return SanitizerReport(tool, error=f"unknown tool {tool!r}; known: {', '.join(TOOLS)}")
    exe = find_sanitizer()
    if exe is None:
        return SanitizerReport(tool, error="compute-sanitizer is not on the PATH: install the CUDA toolkit")
    log = Path(job_file).parent / f"sanitizer-{tool}.log"
    lim = replace(limits or Limits(), loopback=True)
    try:
        why, runner = run_under(command(exe, tool, log), Path(job_file), seed, env={**(env or {}), **ENV},
                                limits=lim, timeout=timeout, on_build=inline_build.server_for(Path(job_file), timeout))
    except Exception as e:  # noqa: BLE001 - feedback, never a lost result
        return SanitizerReport(tool, error=f"compute-sanitizer could not be started: {type(e).__name__}: {e}")
    try:
        text = log.read_text(errors="replace")
    except OSError:
        text = ""
    keep_log(log)
    findings, errors = parse(tool, text, source_names)
    ran = errors is not None
    error = None
    if not ran:
        tail = runner.log_tail(400).strip()
        error = (why or "the tool wrote no summary") + (f"; last output: {tail[-300:]}" if tail else "")
    return SanitizerReport(tool, ran, errors if errors is not None else len(findings), findings, error,
                           round(time.perf_counter() - t0, 2))


def describe(reps: list[SanitizerReport], max_findings: int = 8) -> str:
    """A few lines per tool: the verdict, then the findings with file:line."""
    lines = []
    for r in reps:
        if not r.ran:
            lines.append(f"{r.tool:<9} could not run: {r.error}")
            continue
        lines.append(f"{r.tool:<9} {r.errors} error(s)" + ("" if r.errors else " - clean") + f"  ({r.seconds:.0f} s)")
        for f in r.findings[:max_findings]:
            lines.append(f"  {f.kind}" + (f" in {f.kernel}" if f.kernel else "") + (f" at {f.where}" if f.where else "")
                         + (f" (x{f.count})" if f.count > 1 else "") + (f"; {f.detail}" if f.detail else ""))
        if len(r.findings) > max_findings:
            lines.append(f"  ... {len(r.findings) - max_findings} more")
    return "\n".join(lines)
