from __future__ import annotations

import pytest

from cuda_agent.agent.tools import ToolSet


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def tools(ws):
    ts = ToolSet(ws, bash_timeout_s=30)
    yield ts
    ts.close()
