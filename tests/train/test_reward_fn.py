"""Stage-1 reward: answers in the file-block format are written out and really checked on the
CPU; malformed answers get the scheme's failure score without running anything.  The rows
come from our stage-1 parquet as verl's RLHFDataset reads it, and the function is loaded
the way verl loads a custom reward function."""

from __future__ import annotations

import pytest

from cuda_agent.train.data import JudgeSpec, single_turn_rows, write_parquet
from cuda_agent.train.reward_fn import FormatError, compute_score, parse_files

from .conftest import MODEL_NEW, answer


@pytest.fixture(scope="module")
def row(task, tmp_path_factory):
    return single_turn_rows([task], JudgeSpec(device="cpu", rules="strict", reward="paper"))[0]


def score(row, text, **kw):
    return compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], row["extra_info"], **kw)


def test_correct_answer_scores_plus_one(row):
    s = score(row, answer("6.0f"), timing=False)
    assert s["score"] == 1.0 and s["correct"] and s["compiled"] and s["format_ok"]
    assert s["n_files"] == 3 and s["failure"] == ""


def test_wrong_answer_scores_minus_one(row):
    s = score(row, answer("5.0f"), timing=False)  # clamps at 5: compiles, wrong outputs
    assert s["score"] == -1.0 and s["compiled"] and not s["correct"] and s["format_ok"]
    assert s["failure"]


@pytest.mark.parametrize("text, reason", [
    ("I would write a kernel here.", "no <file"),
    ('<file path="kernels/a.cpp">\nint x;\n</file>', "no model_new.py"),
    ('<file path="../evil.py">\nx\n</file>\n<file path="model_new.py">\nx\n</file>', "is not model_new.py"),
    ('<file path="model.py">\nx\n</file>', "is not model_new.py"),
    (None, "no <file"),
])
def test_malformed_answers_fail_clearly(row, text, reason):
    s = score(row, text)
    assert s["score"] == -1.0 and not s["format_ok"] and not s["compiled"]
    assert reason in s["failure"], s["failure"]


def test_schemes_by_name_and_bad_rows(row):
    # milestones gives -1 to a failure as well; speedup gives 0
    assert score(row, "nothing", reward="milestones")["score"] == -1.0
    assert score(row, "nothing", reward="speedup")["score"] == 0.0
    bad = score(row, answer(), reward="nope")
    assert bad["score"] == -1.0 and "unknown reward scheme" in bad["failure"]
    info = dict(row["extra_info"], task_sha="0" * 16)
    s = compute_score("cuda_agent", answer(), row["reward_model"]["ground_truth"], info)
    assert s["score"] == -1.0 and "does not match" in s["failure"]
    # every result has the same keys (verl batches them as reward extra info)
    assert len({tuple(sorted(x)) for x in (bad, s, score(row, "x"))}) == 1


def test_parse_files_reasoning_and_last_block_wins():
    text = ('<think>draft: <file path="model_new.py">\nold\n</file></think>\n'
            f'<file path="model_new.py">\nfirst\n</file>\n<file path="model_new.py">\n{MODEL_NEW}</file>')
    files = parse_files(text)
    assert files == {"model_new.py": MODEL_NEW}
    with pytest.raises(FormatError):
        parse_files('<think><file path="model_new.py">\nx\n</file></think>')


def test_rows_load_in_verl_and_the_function_loads_like_verl_loads_it(task, tokenizer, verl_config_dir, tmp_path):
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.utils.dataset.rl_dataset import RLHFDataset

    path = write_parquet(single_turn_rows([task], JudgeSpec(device="cpu")), tmp_path / "st.parquet")
    with initialize_config_dir(config_dir=str(verl_config_dir), version_base=None):
        cfg = compose("ppo_trainer", overrides=[
            "reward.custom_reward_function.path=pkg://cuda_agent.train.reward_fn",
            "reward.custom_reward_function.name=compute_score", "data.max_prompt_length=8192"])
    item = RLHFDataset(str(path), tokenizer, cfg.data)[0]
    assert item["agent_name"] == "single_turn_agent" and item["data_source"] == "cuda_agent"
    assert item["raw_prompt"][0]["role"] == "system" and '<file path="' in item["raw_prompt"][0]["content"]
    fn = get_custom_reward_fn(cfg)
    s = fn(data_source=item["data_source"], solution_str="no files", ground_truth=item["reward_model"]["ground_truth"],
           extra_info=item["extra_info"])
    assert s["score"] == -1.0 and "no <file" in s["failure"]
