"""Read, Write, Edit, MultiEdit and workspace confinement."""

from __future__ import annotations

import os


def test_read_numbers_lines_and_pages(tools, ws):
    (ws / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = tools.call("Read", {"file_path": "f.txt"})
    assert out.splitlines()[0] == "     1\tline 1"
    assert out.splitlines()[-1] == "    10\tline 10"
    page = tools.call("Read", {"file_path": str(ws / "f.txt"), "offset": 4, "limit": 2})
    assert page.splitlines()[:2] == ["     4\tline 4", "     5\tline 5"]
    assert "showing lines 4-5 of 10" in page
    assert tools.call("Read", {"file_path": "f.txt", "offset": 50}).startswith("Error: offset 50 is past the end")
    assert tools.call("Read", {"file_path": "f.txt", "limit": 0}).startswith("Error: limit")


def test_read_edge_cases(tools, ws):
    (ws / "empty.txt").write_text("")
    assert "is empty" in tools.call("Read", {"file_path": "empty.txt"})
    (ws / "bin.so").write_bytes(b"\x7fELF\x00\x01\x02" * 10)
    assert tools.call("Read", {"file_path": "bin.so"}).startswith("Error: bin.so is a binary file")
    assert tools.call("Read", {"file_path": "nope.txt"}).startswith("Error: nope.txt does not exist")
    (ws / "d").mkdir()
    assert "is a directory" in tools.call("Read", {"file_path": "d"})
    (ws / "long.txt").write_text("x" * 5000 + "\n")
    assert "[... line truncated]" in tools.call("Read", {"file_path": "long.txt"})


def test_read_huge_file_truncated_with_note(tools, ws):
    (ws / "big.txt").write_text("".join(f"{i}\n" for i in range(5000)))
    out = tools.call("Read", {"file_path": "big.txt"})
    assert "showing lines 1-2000 of 5000" in out
    tools.ctx.max_output_chars = 2000
    assert "output truncated" in tools.call("Read", {"file_path": "big.txt"})


def test_confinement(tools, ws, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    for p in (str(outside), "../secret.txt", "sub/../../secret.txt"):
        assert "outside the workspace" in tools.call("Read", {"file_path": p})
    os.symlink(outside, ws / "link.txt")
    assert "outside the workspace" in tools.call("Read", {"file_path": "link.txt"})
    assert "outside the workspace" in tools.call("Write", {"file_path": "link.txt", "content": "x"})
    os.symlink(tmp_path, ws / "escape_dir")
    assert "outside the workspace" in tools.call("Write", {"file_path": "escape_dir/new.txt", "content": "x"})
    assert not (tmp_path / "new.txt").exists()
    assert outside.read_text() == "secret"
    # a symlink that stays inside is fine
    (ws / "real.txt").write_text("inside\n")
    os.symlink(ws / "real.txt", ws / "alias.txt")
    assert "inside" in tools.call("Read", {"file_path": "alias.txt"})


def test_write_requires_read_before_overwrite(tools, ws):
    assert tools.call("Write", {"file_path": "new/dir/a.py", "content": "a = 1\n"}).startswith("Created new/dir/a.py")
    (ws / "existing.py").write_text("old\n")
    out = tools.call("Write", {"file_path": "existing.py", "content": "new\n"})
    assert out.startswith("Error: existing.py exists and was not read")
    assert (ws / "existing.py").read_text() == "old\n"
    tools.call("Read", {"file_path": "existing.py"})
    # changed behind the agent's back after the read
    os.utime(ws / "existing.py", ns=(1, 1))
    assert "changed since it was last read" in tools.call("Write", {"file_path": "existing.py", "content": "x"})
    tools.call("Read", {"file_path": "existing.py"})
    assert tools.call("Write", {"file_path": "existing.py", "content": "new\n"}).startswith("Overwrote")
    assert (ws / "existing.py").read_text() == "new\n"
    # a file the agent wrote itself can be rewritten
    assert tools.call("Write", {"file_path": "new/dir/a.py", "content": "a = 2\n"}).startswith("Overwrote")
    assert tools.call("Write", {"file_path": "x.py", "content": 3}).startswith("Error: content must be a string")


def test_edit_unique_match(tools, ws):
    f = ws / "k.cu"
    f.write_text("int a = 1;\nint b = 1;\nint a2 = 1;\n")
    assert "occurs 3 times (lines 1, 2, 3)" in tools.call(
        "Edit", {"file_path": "k.cu", "old_string": "= 1", "new_string": "= 2"})
    out = tools.call("Edit", {"file_path": "k.cu", "old_string": "int b = 1;", "new_string": "int b = 5;"})
    assert out.startswith("Edited k.cu: 1 replacement") and "int b = 5;" in out
    assert f.read_text() == "int a = 1;\nint b = 5;\nint a2 = 1;\n"
    out = tools.call("Edit", {"file_path": "k.cu", "old_string": "= 1", "new_string": "= 9", "replace_all": True})
    assert "2 replacements" in out
    assert f.read_text() == "int a = 9;\nint b = 5;\nint a2 = 9;\n"


def test_edit_errors(tools, ws):
    f = ws / "m.py"
    f.write_text("def f():\n    return 1\n")
    err = tools.call("Edit", {"file_path": "m.py", "old_string": "def f():\n  return 1", "new_string": "x"})
    assert err.startswith("Error: old_string was not found") and "line 1" in err
    assert "identical" in tools.call("Edit", {"file_path": "m.py", "old_string": "f", "new_string": "f"})
    assert "empty" in tools.call("Edit", {"file_path": "m.py", "old_string": "", "new_string": "x"})
    assert "does not exist" in tools.call("Edit", {"file_path": "no.py", "old_string": "a", "new_string": "b"})
    assert f.read_text() == "def f():\n    return 1\n"


def test_multiedit_atomic(tools, ws):
    f = ws / "m.py"
    original = "alpha\nbeta\ngamma\n"
    f.write_text(original)
    bad = tools.call("MultiEdit", {"file_path": "m.py", "edits": [
        {"old_string": "alpha", "new_string": "ALPHA"},
        {"old_string": "missing", "new_string": "x"}]})
    assert bad.startswith("Error: edit 2 of 2: old_string was not found") and "No edit was applied" in bad
    assert f.read_text() == original
    ok = tools.call("MultiEdit", {"file_path": "m.py", "edits": [
        {"old_string": "alpha", "new_string": "ALPHA"},
        {"old_string": "ALPHA\nbeta", "new_string": "AB"},  # sees the previous edit
        {"old_string": "a", "new_string": "o", "replace_all": True}]})
    assert ok.startswith("Applied 3 edits")
    assert f.read_text() == "AB\ngommo\n"
    assert tools.call("MultiEdit", {"file_path": "m.py", "edits": []}).startswith("Error: edits must be")
    assert "edit 1 must be an object" in tools.call("MultiEdit", {"file_path": "m.py", "edits": ["x"]})


def test_schemas_are_openai_tools(tools):
    schemas = tools.schemas()
    names = [s["function"]["name"] for s in schemas]
    assert names == ["Bash", "BashOutput", "KillBash", "Read", "Write", "Edit", "MultiEdit", "Glob",
                     "Grep", "NotebookEdit"]
    for s in schemas:
        assert s["type"] == "function"
        p = s["function"]["parameters"]
        assert p["type"] == "object" and set(p["required"]) <= set(p["properties"])
