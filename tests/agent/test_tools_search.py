"""Glob, Grep (ripgrep and pure Python give the same output), NotebookEdit."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from cuda_agent.agent.tools import search


@pytest.fixture
def tree(ws):
    (ws / "kernels").mkdir()
    (ws / "kernels" / "add.cu").write_text("__global__ void add(float* x) {\n  x[0] += 1;\n}\n// TODO tune\n")
    (ws / "kernels" / "add_binding.cpp").write_text('#include "cuda_agent_binding.h"\nCUDA_AGENT_OPS(m) { m.def("add", &add); }\n')
    (ws / "kernels" / "relu.cpp").write_text("void relu(float* x, int n) {\n  for (int i = 0; i < n; ++i)\n    x[i] = x[i] > 0 ? x[i] : 0;\n}\n")
    (ws / "model_new.py").write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    pass  # todo\n")
    (ws / "a.txt").write_text("one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\nnine\nTODO ten\n")
    (ws / ".hidden").write_text("TODO hidden\n")
    (ws / "blob.bin").write_bytes(b"TODO\x00\x01")
    return ws


def test_glob(tools, tree):
    assert tools.call("Glob", {"pattern": "**/*.cu"}) == "kernels/add.cu"
    assert tools.call("Glob", {"pattern": "kernels/*.{cu,cpp}"}).splitlines() == [
        "kernels/add.cu", "kernels/add_binding.cpp", "kernels/relu.cpp"]
    assert tools.call("Glob", {"pattern": "*.cpp", "path": "kernels"}).splitlines() == [
        "kernels/add_binding.cpp", "kernels/relu.cpp"]
    assert tools.call("Glob", {"pattern": "*.rs"}).startswith("No files match")
    assert tools.call("Glob", {"pattern": "../*"}).startswith("Error:")
    assert "outside the workspace" in tools.call("Glob", {"pattern": "*", "path": "/"})


def test_glob_skips_symlinks_out(tools, tree, tmp_path):
    (tmp_path / "out.cu").write_text("x")
    os.symlink(tmp_path / "out.cu", tree / "kernels" / "link.cu")
    assert tools.call("Glob", {"pattern": "**/*.cu"}) == "kernels/add.cu"


def _both(ctx, **kw):
    py = search.grep(ctx, engine="python", **kw)
    if shutil.which("rg"):
        rg = search.grep(ctx, engine="rg", **kw)
        assert rg == py, f"ripgrep and python differ for {kw}:\n--- rg\n{rg}\n--- py\n{py}"
    return py


def test_grep_modes(tools, tree):
    ctx = tools.ctx
    assert _both(ctx, pattern="TODO").splitlines() == ["a.txt", "kernels/add.cu"]
    assert _both(ctx, pattern="(?i)todo", output_mode="count").splitlines() == [
        "a.txt:1", "kernels/add.cu:1", "model_new.py:1"]
    assert _both(ctx, pattern="todo", case_insensitive=True).splitlines() == [
        "a.txt", "kernels/add.cu", "model_new.py"]
    assert _both(ctx, pattern=r"x\[\w\]", output_mode="content").splitlines() == [
        "kernels/add.cu:2:  x[0] += 1;", "kernels/relu.cpp:3:    x[i] = x[i] > 0 ? x[i] : 0;"]
    assert _both(ctx, pattern="float", glob="*.cpp", output_mode="content") == \
        "kernels/relu.cpp:1:void relu(float* x, int n) {"
    assert _both(ctx, pattern="float", glob="*.{cu,cpp}").splitlines() == ["kernels/add.cu", "kernels/relu.cpp"]
    assert _both(ctx, pattern="float", path="kernels/add.cu", output_mode="content") == \
        "kernels/add.cu:1:__global__ void add(float* x) {"
    assert _both(ctx, pattern="nothing-here").startswith("No matches")


def test_grep_context_and_head_limit(tools, tree):
    ctx = tools.ctx
    out = _both(ctx, pattern="^(three|seven)$", path="a.txt", output_mode="content", context=1)
    assert out.splitlines() == ["a.txt-2-two", "a.txt:3:three", "a.txt-4-four", "--",
                                "a.txt-6-six", "a.txt:7:seven", "a.txt-8-eight"]
    out = _both(ctx, pattern="e", path="a.txt", output_mode="content", head_limit=2)
    assert out.splitlines()[:2] == ["a.txt:1:one", "a.txt:3:three"]
    assert "more lines not shown (head_limit=2)" in out


def test_grep_errors(tools, tree):
    assert tools.call("Grep", {"pattern": "("}).startswith("Error: invalid regular expression")
    assert tools.call("Grep", {"pattern": "x", "output_mode": "lines"}).startswith("Error: output_mode")
    assert "outside the workspace" in tools.call("Grep", {"pattern": "x", "path": "/etc"})
    assert tools.call("Grep", {"pattern": "x", "path": "missing"}).startswith("Error: missing does not exist")


@pytest.fixture
def nb(ws):
    data = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "markdown", "id": "m1", "metadata": {}, "source": ["# Title\n"]},
        {"cell_type": "code", "id": "c1", "metadata": {}, "source": ["x = 1\n", "print(x)"],
         "outputs": [{"output_type": "stream", "name": "stdout", "text": ["1\n"]}], "execution_count": 3},
    ]}
    p = ws / "nb.ipynb"
    p.write_text(json.dumps(data))
    return p


def _cells(p):
    return json.loads(p.read_text())["cells"]


def test_notebook_replace_insert_delete(tools, nb):
    out = tools.call("NotebookEdit", {"notebook_path": "nb.ipynb", "cell_id": "c1", "new_source": "y = 2\nprint(y)"})
    assert out.startswith("Replaced the source of cell 1")
    c = _cells(nb)[1]
    assert "".join(c["source"]) == "y = 2\nprint(y)" and c["outputs"] == [] and c["execution_count"] is None
    out = tools.call("NotebookEdit", {"notebook_path": "nb.ipynb", "cell_index": 0, "new_source": "z = 3",
                                      "edit_mode": "insert"})
    assert "at index 1" in out
    cells = _cells(nb)
    assert [c["cell_type"] for c in cells] == ["markdown", "code", "code"] and "id" in cells[1]
    tools.call("NotebookEdit", {"notebook_path": "nb.ipynb", "cell_index": -1, "new_source": "first",
                                "edit_mode": "insert", "cell_type": "markdown"})
    assert "".join(_cells(nb)[0]["source"]) == "first"
    assert tools.call("NotebookEdit", {"notebook_path": "nb.ipynb", "cell_id": "m1", "edit_mode": "delete"}).startswith("Deleted cell 1")
    assert [c.get("id") for c in _cells(nb)][1:] != ["m1"]
    assert "m1" not in [c.get("id") for c in _cells(nb)]
    read = tools.call("Read", {"file_path": "nb.ipynb"})
    assert "<cell index=0" in read and "first" in read


def test_notebook_errors(tools, nb, ws):
    assert "no cell with id 'zz'" in tools.call("NotebookEdit", {"notebook_path": "nb.ipynb", "cell_id": "zz", "new_source": "x"})
    assert "out of range" in tools.call("NotebookEdit", {"notebook_path": "nb.ipynb", "cell_index": 5, "new_source": "x"})
    assert "give cell_id or cell_index" in tools.call("NotebookEdit", {"notebook_path": "nb.ipynb", "new_source": "x"})
    assert "new_source" in tools.call("NotebookEdit", {"notebook_path": "nb.ipynb", "cell_index": 0})
    assert "edit_mode" in tools.call("NotebookEdit", {"notebook_path": "nb.ipynb", "cell_index": 0, "edit_mode": "swap"})
    (ws / "bad.ipynb").write_text("{not json")
    assert "not a valid notebook" in tools.call("NotebookEdit", {"notebook_path": "bad.ipynb", "cell_index": 0, "new_source": "x"})
    (ws / "x.py").write_text("")
    assert "not a .ipynb" in tools.call("NotebookEdit", {"notebook_path": "x.py", "cell_index": 0, "new_source": "x"})
