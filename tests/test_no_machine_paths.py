"""No machine paths in the package: data comes from an option, an environment variable or a
documented download, never from where one machine happened to keep it."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
MACHINE_PATH = re.compile(r"(?<![\w.])/(work|root|home)/")


def test_src_holds_no_absolute_machine_paths():
    hits = []
    for p in sorted(SRC.rglob("*")):
        if (not p.is_file() or "__pycache__" in p.parts or p.suffix in (".so", ".pyc")
                or any(d.endswith(".egg-info") for d in p.parts)):  # pip's copy of the README, not ours
            continue
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
            if MACHINE_PATH.search(line):
                hits.append(f"{p.relative_to(SRC)}:{n}: {line.strip()[:120]}")
    assert hits == [], "machine paths in src/:\n" + "\n".join(hits)


def test_the_pattern_finds_what_it_is_for():
    assert MACHINE_PATH.search('DEFAULT = "/work/shared/kernelbench/kernelbench.jsonl"')
    assert MACHINE_PATH.search("p = Path('/root/.cache/x')") and MACHINE_PATH.search("/home/me/data")
    assert not MACHINE_PATH.search("docs: https://example.org/home/page") and not MACHINE_PATH.search("a/work/b")
