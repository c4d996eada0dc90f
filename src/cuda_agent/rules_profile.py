"""The rules profiles: which rules a check applies (the static rules in sandbox/rules/, the
runtime ones in sandbox/check.py).  A module of its own at the bottom of the package, so that
the sandbox and the command-line options (cliopts.py) take the names from one place.
"""

from __future__ import annotations

from enum import StrEnum


class RulesProfile(StrEnum):
    """Which rules apply (``CheckOptions.rules``, ``CheckResult.rules``, ``--rules``).  A ``str``
    enum: ``options.rules == "kernelbench"`` holds, and JSON results keep the plain name."""

    STRICT = "strict"
    """Our protocol: the solution's compute is its own kernels (no torch ops in C++, no foreign
    libraries), and the code that could reach the evaluator is checked."""
    KERNELBENCH = "kernelbench"
    """KernelBench's protocol (torch allowed anywhere): the rules reject hacks, not style."""
