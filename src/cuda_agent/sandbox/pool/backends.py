"""The pool's back-ends by name: the built-in ones (``local``, ``ray``: they register
themselves on import, ray itself is imported only when a Ray pool starts) and every back-end a
user registered with ``backend.register_backend``."""

from __future__ import annotations

from . import local, ray_backend  # noqa: F401  (register themselves)
from .backend import _BACKENDS, BackendFactory


def backend_names() -> list[str]:
    return sorted(_BACKENDS)


def get_backend(name: str) -> BackendFactory:
    try:
        return _BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown pool back-end {name!r}; known: {', '.join(sorted(_BACKENDS))}") from None
