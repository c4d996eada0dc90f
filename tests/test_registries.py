"""Every registry at an extension point refuses a second, different thing under a taken name
(a plug-in cannot silently replace a built-in), and accepts the same thing registered again."""

from __future__ import annotations

import pytest

from cuda_agent import reward
import cuda_agent.agent.llm  # noqa: F401  (registers the built-in back-ends)
from cuda_agent.agent.llm import base as llm
from cuda_agent.agent.tools import base as tools
from cuda_agent.registry import Registry, RegistryError
from cuda_agent.sandbox import rules
from cuda_agent.sandbox.pool import backend as pool_backend
from cuda_agent.synth import compose


def test_registry_refuses_conflicts_and_accepts_the_same_object():
    r = Registry("widget")

    @r.register("a")
    def a():
        return 1

    assert r.register("a")(a) is a  # the same object again: no conflict
    with pytest.raises(RegistryError, match="widget 'a' is already registered"):
        r.add("a", lambda: 2)
    assert r["a"] is a and list(r) == ["a"]


@pytest.mark.parametrize("register,taken", [
    (reward.register, "paper"),
    (llm.register_backend, "scripted"),
    (compose.register_composer, "programmatic"),
    (pool_backend.register_backend, "local"),
])
def test_builtin_names_cannot_be_taken(register, taken):
    import cuda_agent.sandbox.pool.backends  # noqa: F401  (the built-in back-ends register on import)
    with pytest.raises(RegistryError, match=f"'{taken}' is already registered"):
        register(taken)(lambda **kw: None)


def test_tool_and_rule_names_cannot_be_taken():
    name = next(iter(tools.registered_tools()))
    with pytest.raises(RegistryError):
        tools.register_tool(tools.Tool(name=name, description="x", parameters={}, fn=lambda ctx, **a: ""))
    rid = next(iter(rules.RULES))
    with pytest.raises(RegistryError):
        rules.define_rule(rid, None, "another rule under a taken id")
