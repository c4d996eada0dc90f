"""Task loading: single files, KernelBench (dataset rows and clone layout), generic rows,
``resolve`` references, and one clear TaskError per missing or broken piece."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuda_agent.tasks import (Task, TaskError, load_file, load_kernelbench, load_rows,
                              parse_kernelbench_ref, resolve, validate_source)

GOOD = """import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x * self.k

def get_inputs():
    return [torch.randn(4, 4)]

def get_init_inputs():
    return [3]
"""


def _rows(jsonl: Path, wanted: set[tuple[int, int]]) -> list[dict]:
    out = []
    with jsonl.open() as f:
        for line in f:
            r = json.loads(line)
            if (r["level"], r["problem_id"]) in wanted:
                out.append(r)
    return out


# --- single files --------------------------------------------------------------------

def test_load_file(tmp_path, example_dir):
    t = load_file(example_dir / "task.py")
    assert t.id == "cpu_scaled_swish"  # a file named task.py takes its directory's name
    (tmp_path / "my_op.py").write_text((example_dir / "task.py").read_text())
    assert load_file(tmp_path / "my_op.py").id == "my_op"
    assert "class Model" in t.source
    assert t.meta["path"] == str((example_dir / "task.py").resolve())
    assert len(t.sha) == 16 and t.sha == load_file(example_dir / "task.py").sha
    f = tmp_path / "my_task.py"
    f.write_text(GOOD)
    t2 = load_file(f)
    assert t2.id == "my_task" and t2.source == GOOD and t2.sha != t.sha


def test_task_roundtrip_and_sha_changes_with_source():
    t = Task("x", GOOD, {"level": 1})
    d = t.to_dict()
    assert d["sha"] == t.sha
    back = Task.from_dict(json.loads(json.dumps(d)))
    assert back == t
    assert Task("x", GOOD + "\n").sha != t.sha


def test_load_file_missing(tmp_path):
    with pytest.raises(TaskError, match="task file not found"):
        load_file(tmp_path / "nope.py")


BROKEN = {
    "syntax": ("class Model(nn.Module:\n    pass\n", r"syntax error at line 1"),
    "no_model": (GOOD.replace("class Model(", "class Other("), r"does not define Model"),
    "no_get_inputs": (GOOD.replace("def get_inputs", "def make_inputs"), r"does not define get_inputs"),
    "no_get_init_inputs": (GOOD.replace("def get_init_inputs", "def init_inputs"),
                           r"does not define get_init_inputs"),
    "model_not_class": (GOOD.replace("class Model(nn.Module):", "def Model():\n    pass\nclass M(nn.Module):"),
                        r"Model must be a class"),
    "get_inputs_is_class": (GOOD.replace("def get_inputs():\n    return [torch.randn(4, 4)]",
                                         "class get_inputs:\n    pass"), r"get_inputs must be a function"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_task_has_clear_error(tmp_path, case):
    src, pattern = BROKEN[case]
    f = tmp_path / f"{case}.py"
    f.write_text(src)
    with pytest.raises(TaskError, match=pattern) as e:
        load_file(f)
    assert "\n" not in str(e.value)  # one sentence, no traceback
    with pytest.raises(TaskError, match=pattern):
        validate_source(src)


def test_missing_several_names_listed_together():
    src = "import torch\nclass Model: pass\n"
    with pytest.raises(TaskError) as e:
        validate_source(src)
    assert "get_inputs" in str(e.value) and "get_init_inputs" in str(e.value)


def test_names_from_imports_and_assignments_count():
    src = "from other import Model, get_inputs\nget_init_inputs = lambda: []\n"
    validate_source(src)  # imported / assigned names are accepted


# --- KernelBench ---------------------------------------------------------------------

@pytest.mark.parametrize("ref,expected", [
    ("kernelbench/L1/12", (1, 12)), ("L1/12", (1, 12)), ("level1/12", (1, 12)), ("1/12", (1, 12)),
    ("l2_14", (2, 14)), ("Level3/8", (3, 8)), ("kernelbench:L2:5", (2, 5)),
    ("foo.py", None), ("L12", None), ("", None),
])
def test_parse_kernelbench_ref(ref, expected):
    assert parse_kernelbench_ref(ref) == expected


def test_kernelbench_from_jsonl(kernelbench_jsonl):
    (t,) = load_kernelbench(kernelbench_jsonl, 1, 12)
    assert t.id == "kernelbench/L1/12"
    assert t.meta == {"level": 1, "problem_id": 12, "name": "12_Matmul_with_diagonal_matrices_.py",
                      "source_set": "kernelbench"}
    assert "A.unsqueeze(1) * B" in t.source
    lvl3 = load_kernelbench(kernelbench_jsonl, 3)
    assert len(lvl3) >= 40
    assert all(x.meta["level"] == 3 for x in lvl3)
    ids = [x.meta["problem_id"] for x in lvl3]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_kernelbench_whole_dataset_is_valid(kernelbench_jsonl):
    tasks = load_kernelbench(kernelbench_jsonl)
    assert len(tasks) >= 250
    assert {t.meta["level"] for t in tasks} >= {1, 2, 3}
    assert len({t.id for t in tasks}) == len(tasks)


def test_kernelbench_no_match(kernelbench_jsonl):
    with pytest.raises(TaskError, match="no KernelBench problem matches level 1 problem 9999"):
        load_kernelbench(kernelbench_jsonl, 1, 9999)


@pytest.mark.parametrize("nested", [False, True])
def test_kernelbench_from_clone_directory(tmp_path, kernelbench_jsonl, nested):
    rows = _rows(kernelbench_jsonl, {(1, 12), (1, 1), (2, 14), (3, 8)})
    assert len(rows) == 4
    root = tmp_path / "clone"
    base = root / "KernelBench" if nested else root
    for r in rows:
        d = base / f"level{r['level']}"
        d.mkdir(parents=True, exist_ok=True)
        (d / r["name"]).write_text(r["code"])
    (base / "level1" / "README.md").write_text("not a problem")
    (base / "level1" / "helper.py").write_text("x = 1\n")  # no NN_ prefix: ignored
    (t,) = load_kernelbench(root, 1, 12)
    assert t.id == "kernelbench/L1/12"
    assert t.source == next(r["code"] for r in rows if r["problem_id"] == 12)
    assert [x.id for x in load_kernelbench(root, 1)] == ["kernelbench/L1/1", "kernelbench/L1/12"]
    assert [x.id for x in load_kernelbench(root)] == ["kernelbench/L1/1", "kernelbench/L1/12",
                                                       "kernelbench/L2/14", "kernelbench/L3/8"]
    with pytest.raises(TaskError, match="no KernelBench problem"):
        load_kernelbench(root, 2, 99)


def test_kernelbench_broken_row_names_the_problem(tmp_path):
    f = tmp_path / "kb.jsonl"
    f.write_text(json.dumps({"level": 1, "problem_id": 7, "name": "7_x.py", "code": "def get_inputs(): pass\n"}) + "\n")
    with pytest.raises(TaskError, match=r"kernelbench/L1/7.*does not define Model"):
        load_kernelbench(f)


# --- generic rows --------------------------------------------------------------------

def _write_rows(tmp_path, id_key: str = "task_id") -> list[dict]:
    return [{id_key: "alpha", "code": GOOD, "ops": 1, "composer": "test"},
            {id_key: "beta", "code": GOOD.replace("x * self.k", "x + self.k"), "ops": 1, "composer": "test"}]


def test_load_rows_jsonl(tmp_path):
    rows = _write_rows(tmp_path)
    f = tmp_path / "rows.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    tasks = load_rows(f)
    assert [t.id for t in tasks] == ["alpha", "beta"]
    assert tasks[1].source == rows[1]["code"]
    assert tasks[0].meta == {"task_id": "alpha", "ops": 1, "composer": "test"}


def test_load_rows_with_id_column(tmp_path):
    f = tmp_path / "rows.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in _write_rows(tmp_path, "id")))
    tasks = load_rows(f)
    assert [t.id for t in tasks] == ["alpha", "beta"]


def test_load_rows_parquet_and_custom_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = [{"name": r["task_id"], "src": r["code"]} for r in _write_rows(tmp_path)]
    f = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(rows), f)
    tasks = load_rows(f, source_column="src", id_column="name")
    assert [t.id for t in tasks] == ["alpha", "beta"]
    assert tasks[0].source == GOOD


def test_load_rows_json_list_and_default_ids(tmp_path):
    f = tmp_path / "rows.json"
    f.write_text(json.dumps([{"code": GOOD}, {"task_id": "t9", "code": GOOD}]))
    assert [t.id for t in load_rows(f)] == ["0", "t9"]


def test_load_rows_errors(tmp_path):
    with pytest.raises(TaskError, match="dataset file not found"):
        load_rows(tmp_path / "missing.jsonl")
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({"task_id": "a", "code": GOOD}) + "\n{not json\n")
    with pytest.raises(TaskError, match=r"bad.jsonl:2: not valid JSON"):
        load_rows(f)
    g = tmp_path / "nocol.jsonl"
    g.write_text(json.dumps({"id": "a", "source": GOOD}) + "\n")
    with pytest.raises(TaskError, match=r"row 0 has no column 'code' \(columns: id, source\)"):
        load_rows(g)
    h = tmp_path / "broken.jsonl"
    h.write_text(json.dumps({"task_id": "zz", "code": "class Model: pass\n"}) + "\n")
    with pytest.raises(TaskError, match=r"task zz does not define get_inputs"):
        load_rows(h)


# --- resolve -------------------------------------------------------------------------

@pytest.mark.parametrize("ref", ["L1/12", "kernelbench/L1/12", "level1/12", "1/12"])
def test_resolve_kernelbench_ref(kernelbench_jsonl, ref):
    t = resolve(ref, kernelbench_jsonl)
    assert t.id == "kernelbench/L1/12"


def test_resolve_kernelbench_env(kernelbench_jsonl, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_KERNELBENCH", str(kernelbench_jsonl))
    assert resolve("L2/14").id == "kernelbench/L2/14"
    monkeypatch.delenv("CUDA_AGENT_KERNELBENCH")
    with pytest.raises(TaskError, match=r"looks like a KernelBench reference.*CUDA_AGENT_KERNELBENCH"):
        resolve("L2/14")


def test_resolve_file_and_rows(tmp_path, example_dir):
    assert resolve(example_dir / "task.py").source == (example_dir / "task.py").read_text()
    f = tmp_path / "rows.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in _write_rows(tmp_path)))
    assert resolve(f"{f}#beta").id == "beta"
    assert resolve(f"{f}#beta").source == _write_rows(tmp_path)[1]["code"]
    with pytest.raises(TaskError, match="no row with id 'gamma'"):
        resolve(f"{f}#gamma")
    with pytest.raises(TaskError, match="task not found: .*nothing.py"):
        resolve(tmp_path / "nothing.py")
