"""Name -> object registries at the extension points (reward schemes, rules, LLM back-ends,
composers, pool back-ends, agent tools).  One definition of what registering means: a name
names one thing, and a second, different thing under a taken name is refused (as verl's
registries do), so a plug-in cannot silently replace a built-in.  Registering the same thing
again (a module imported twice, e.g. as ``__main__`` and by name) is not a conflict."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _same(a: Any, b: Any) -> bool:
    if a is b or (not callable(a) and a == b):
        return True
    ident = lambda o: (getattr(o, "__module__", None), getattr(o, "__qualname__", None))  # noqa: E731
    return ident(a) == ident(b) and ident(a)[1] is not None


class RegistryError(ValueError):
    """A name is already registered to something else."""


class Registry(dict):
    """A dict of ``kind`` by name whose :meth:`add` refuses conflicting names."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def add(self, name: str, obj: T) -> T:
        old = self.get(name)
        if old is not None and not _same(old, obj):
            raise RegistryError(f"{self.kind} {name!r} is already registered "
                                f"({getattr(old, '__qualname__', type(old).__name__)}); choose another name")
        self[name] = obj
        return obj

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@registry.register("name")``."""
        return lambda obj: self.add(name, obj)
