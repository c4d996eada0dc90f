"""What a solution's C++/CUDA files are: one definition for the build and the static rules.

A solution's kernels live under ``kernels/`` at any depth:
  ``.cu``                      CUDA, compiled by nvcc
  ``.cpp`` ``.cc`` ``.cxx``    C++, compiled by the C++ compiler (``*_binding.cpp``: op registration)
  ``.c``                       linted but refused by the build (C is not compiled; rename it to .cpp)
  ``.h`` ``.hh`` ``.hpp`` ``.cuh`` ``.inl``   headers, linted

The build key must cover everything the compiler can reach, and ``#include`` reaches any file,
whatever its name, so ``key_files`` is every regular file under ``kernels/`` (hidden ones too):
a verdict is never given on an object built from code that is no longer there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

KERNELS = "kernels"
COMPILED_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx")
REFUSED_SUFFIXES = (".c",)
SOURCE_SUFFIXES = COMPILED_SUFFIXES + REFUSED_SUFFIXES
HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".cuh", ".inl")
CPP_SUFFIXES = SOURCE_SUFFIXES + HEADER_SUFFIXES
BINDING_SUFFIX = "_binding.cpp"
# outside kernels/ the linter skips what a tool, not the author, put there
_SKIPPED_DIRS = ("build", "__pycache__")
_INCLUDE = re.compile(rb'^\s*#\s*include\s*["<]([^">]+)[">]', re.M)


def is_source(p: Path) -> bool:
    return p.suffix in SOURCE_SUFFIXES


def is_header(p: Path) -> bool:
    return p.suffix in HEADER_SUFFIXES


def is_binding(p: Path) -> bool:
    return p.name.endswith(BINDING_SUFFIX)


def _walk(root: Path, skip=lambda path: False) -> Iterator[Path]:
    # regular files only (reading a FIFO named x.cpp would block the judge forever); symlinked
    # directories are not followed (a loop would never end)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not skip(Path(dirpath, d)))
        for name in sorted(filenames):
            if skip(Path(dirpath, name)):
                continue
            p = Path(dirpath, name)
            if p.is_file():
                yield p


def key_files(kernels_dir: Path) -> list[Path]:
    """Every regular file under ``kernels_dir``: what the build key hashes."""
    return list(_walk(kernels_dir)) if kernels_dir.is_dir() else []


def kernel_sources(kernels_dir: Path) -> list[Path]:
    """The sources under ``kernels_dir`` (any depth), compiled ones and refused ones."""
    return [p for p in key_files(kernels_dir) if is_source(p)]


def included_names(files: list[Path]) -> set[str]:
    """Base names of every file named by an ``#include`` in ``files``."""
    names: set[str] = set()
    for p in files:
        try:
            names.update(Path(m.decode(errors="replace")).name for m in _INCLUDE.findall(p.read_bytes()))
        except OSError:
            pass
    return names


def cpp_files(root: Path) -> Iterator[Path]:
    """Every C/C++ source and header the static rules lint in a solution directory: all of
    ``kernels/`` (as the build sees it), elsewhere outside hidden, build and cache directories."""
    kernels = root / KERNELS

    def skip(p: Path) -> bool:
        return p == kernels or p.name.startswith(".") or (p.name in _SKIPPED_DIRS and p.is_dir())

    for p in _walk(root, skip):
        if p.suffix in CPP_SUFFIXES:
            yield p
    for p in key_files(kernels):
        if p.suffix in CPP_SUFFIXES:
            yield p
