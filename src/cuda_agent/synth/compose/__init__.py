"""Composer registry: a composer turns (bucket, seed) into one candidate task.

Buckets name the op-count mix (``"1"`` .. ``"5"`` operators, ``"transformers"`` for a
transformers building block).  Register your own with :func:`register_composer`; the pipeline
looks composers up by name and passes them the seed library and keyword options.  The shared
definitions are in ``base.py``; the built-in composers (``programmatic``, ``llm``) import it
and register themselves when this package is imported.
"""

from __future__ import annotations

from typing import Any

from . import llm, programmatic  # noqa: F401  (the built-in composers register themselves)
from .base import BUCKETS, COMPOSERS, PAPER_MIX, Candidate, Composer, parse_mix, quotas, register_composer

__all__ = ["BUCKETS", "COMPOSERS", "PAPER_MIX", "Candidate", "Composer", "get_composer", "parse_mix", "quotas",
           "register_composer"]


def get_composer(name: str, **options: Any) -> Composer:
    if name not in COMPOSERS:
        raise KeyError(f"unknown composer {name!r} (registered: {', '.join(sorted(COMPOSERS))})")
    return COMPOSERS[name](**options)
