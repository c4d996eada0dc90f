"""``cuda-agent train prepare | rft | stage`` through the real entry point."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from click.testing import CliRunner

from cuda_agent.agent.trajectory import Trajectory, append_jsonl
from cuda_agent.cli import main

from .conftest import TASK_SRC


def test_prepare_writes_both_stages_and_skips_bad_rows(tmp_path):
    rows = [{"task_id": "t/relu6", "code": TASK_SRC, "bucket": "1"},
            {"task_id": "t/broken", "code": "def Model(:\n", "bucket": "1"},
            {"task_id": "t/relu6_2", "code": TASK_SRC.replace("6.0", "4.0"), "bucket": "2"}]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = CliRunner().invoke(main, ["train", "prepare", str(tmp_path), "--out", str(tmp_path / "out"),
                                  "--device", "cpu", "--reward", "milestones"])
    assert r.exit_code == 0, r.output
    assert "2 tasks (cpu, rules strict, reward milestones)" in r.output
    assert "skipped 1 row(s): row 1 (t/broken): task t/broken has a syntax error at line 1" in r.output
    st = pq.read_table(tmp_path / "out" / "train_single_turn.parquet").to_pylist()
    ag = pq.read_table(tmp_path / "out" / "train_agentic.parquet").to_pylist()
    assert [x["extra_info"]["task_id"] for x in st] == ["t/relu6", "t/relu6_2"]
    assert {x["agent_name"] for x in st} == {"single_turn_agent"} and {x["agent_name"] for x in ag} == {"cuda_agent"}
    assert ag[1]["extra_info"]["reward"] == "milestones" and json.loads(ag[1]["extra_info"]["task_meta"]) == {"bucket": "2"}
    # bad input: a clear message, exit 2, no traceback
    r = CliRunner().invoke(main, ["train", "prepare", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "dataset not found" in r.output
    r = CliRunner().invoke(main, ["train", "prepare", str(tmp_path / "tasks.jsonl"), "--out", str(tmp_path / "o"),
                                  "--source-column", "src"])
    assert r.exit_code == 2 and "no valid task" in r.output and "no column 'src'" in r.output


def test_rft_command(tmp_path):
    for i, reward in enumerate([2.0, -1.0, None]):
        append_jsonl(tmp_path / "run" / "trajectory.jsonl", Trajectory(
            id=f"t{i}", task_id="x", task_sha="s", model="m", backend="b", reward=reward,
            messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                      {"role": "assistant", "content": "A"}]))
    r = CliRunner().invoke(main, ["train", "rft", str(tmp_path), "--out", str(tmp_path / "rft.parquet")])
    assert r.exit_code == 0, r.output
    assert r.output.strip() == (f"read 3 trajectories from 1 file(s); kept 1 (reward > 0); dropped: "
                                f"1 no reward, 1 reward <= 0; wrote {tmp_path / 'rft.parquet'}")
    assert pq.read_table(tmp_path / "rft.parquet").num_rows == 1
    r = CliRunner().invoke(main, ["train", "rft", str(tmp_path), "--out", str(tmp_path / "x.parquet"),
                                  "--min-reward", "5", "--json"])
    assert r.exit_code == 1 and json.loads(r.output)["kept"] == 0
    r = CliRunner().invoke(main, ["train", "rft", str(tmp_path / "missing"), "--out", str(tmp_path / "y.parquet")])
    assert r.exit_code == 2 and "no trajectory file or directory" in r.output


def test_stage_dry_run_and_errors(tmp_path):
    data = tmp_path / "train_agentic.parquet"
    data.write_bytes(b"")
    base = ["train", "stage"]
    r = CliRunner().invoke(main, base + ["1", "--model", "/m", "--data", str(data), "--dry-run"])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert lines[0] == "# stage 1: single-turn PPO warm-up (32K context)"
    assert " -m verl.trainer.main_ppo --config-path " in lines[1] and "--config-name stage1_single_turn" in lines[1]
    r = CliRunner().invoke(main, base + ["4", "--model", "/m", "--data", str(data), "--resume-from",
                                         "/ck/global_step_20", "--steps", "150", "--dry-run", "trainer.save_freq=25"])
    assert r.exit_code == 0, r.output
    assert "trainer.total_training_steps=170" in r.output and r.output.rstrip().endswith("trainer.save_freq=25")
    r = CliRunner().invoke(main, base + ["4", "--model", "/m", "--data", str(data), "--dry-run"])
    assert r.exit_code == 2 and "--resume-from" in r.output
    # --rollout hf: verl's processes import our backend, one model per GPU
    r = CliRunner().invoke(main, base + ["1", "--model", "/m", "--data", str(data), "--rollout", "hf", "--dry-run"])
    assert r.exit_code == 0, r.output
    cmd = r.output.strip().splitlines()[1]
    assert cmd.startswith("VERL_USE_EXTERNAL_MODULES=cuda_agent.train.hf_rollout ")
    assert "actor_rollout_ref.rollout.name=hf" in cmd and "rollout.tensor_model_parallel_size=1" in cmd
    r = CliRunner().invoke(main, base + ["1", "--model", "/m", "--data", str(data), "--rollout", "tgi", "--dry-run"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, base + ["2", "--model", "/m", "--data", str(data), "--dry-run", "oops"])
    assert r.exit_code == 2 and "key=value" in r.output
    r = CliRunner().invoke(main, base + ["1", "--model", "/m", "--data", str(tmp_path / "none.parquet")])
    assert r.exit_code == 2 and "file not found" in r.output
    reg = tmp_path / "loop.yaml"
    reg.write_text("- name: cuda_agent\n")
    r = CliRunner().invoke(main, base + ["3", "--model", "/m", "--data", str(data), "--agent-loop", str(reg), "--dry-run"])
    assert r.exit_code == 0 and f"agent_loop_config_path={reg}" in r.output, r.output
    r = CliRunner().invoke(main, base + ["5", "--model", "/m", "--data", str(data)])
    assert r.exit_code == 2


def test_prepare_reads_a_saved_datasets_directory(tmp_path):
    import datasets

    rows = {"task_id": ["t/relu6", "t/relu6_4"], "code": [TASK_SRC, TASK_SRC.replace("6.0", "4.0")]}
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows)}).save_to_disk(str(tmp_path / "ds"))
    r = CliRunner().invoke(main, ["train", "prepare", str(tmp_path / "ds"), "--out", str(tmp_path / "out"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["tasks"] == 2
    ids = [x["extra_info"]["task_id"] for x in pq.read_table(tmp_path / "out" / "train_agentic.parquet").to_pylist()]
    assert ids == ["t/relu6", "t/relu6_4"]
    r = CliRunner().invoke(main, ["train", "prepare", str(tmp_path / "out"), "--out", str(tmp_path / "o2")])
    assert r.exit_code == 2 and "not a saved `datasets` data set" in r.output

