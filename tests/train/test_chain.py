"""The CPU-runnable parts of ``cuda-agent train chain``: the scripted right/wrong solutions as
the evaluator judges them (C++ on the CPU, the same template as the CUDA ones), the warm start
(tokenizer, tiny model, fitting, data files), stage-1 samples -> RFT rows, the stage commands
the chain launches, and the plots.  verl's trainers themselves need a GPU (test_gpu.py)."""

from __future__ import annotations

import json

import pytest

from cuda_agent.agent.llm.text_format import parse_reply
from cuda_agent.train.chain import (Chain, answer_text, encode_example, episode_messages, plot_stage,
                                    read_metrics, rft_rows_from_samples, scripted_tasks, solution)
from cuda_agent.train.data import single_turn_messages
from cuda_agent.train.presets import PRESETS
from cuda_agent.train.reward_fn import compute_score


def test_right_solution_passes_and_wrong_one_fails_on_the_cpu():
    # a one-operator task and a two-operator one (the wrong body gets the last step wrong)
    for st in scripted_tasks(2, "cpu"):
        info = {"task_id": st.task.id, "task_sha": st.task.sha, "device": "cpu", "timing": False}
        right = compute_score("cuda_agent", answer_text(st.right), st.task.source, info)
        wrong = compute_score("cuda_agent", answer_text(st.wrong), st.task.source, info)
        assert right["correct"] and right["score"] > 0, (st.task.id, right)
        assert wrong["compiled"] and not wrong["correct"] and wrong["score"] < 0, (st.task.id, wrong)


def test_the_chain_tasks_are_synth_tasks():
    """The tasks are what synth's programmatic composer renders (over the seed operators the chain
    has C expressions for), the same on every call (the chain's second call reuses the first's
    warm start), and they pass synth's filters but the runtime band and compile (see synth_programs)."""
    import tempfile
    from pathlib import Path

    from cuda_agent.synth.compose.programmatic import ProgrammaticComposer
    from cuda_agent.synth.evaluate import FilterConfig, run_filters
    from cuda_agent.synth.seed_table import SEED_TABLE
    from cuda_agent.train.chain import C_OPS, synth_programs

    sts = scripted_tasks(PRESETS["tiny"].n_tasks, "cuda")
    assert len({st.task.id for st in sts}) == len(sts) and any(len(st.task.meta["ops"]) == 2 for st in sts)
    composer = ProgrammaticComposer(library=[s for s in SEED_TABLE if s.name in C_OPS], profile="cpu")
    sources = {composer.compose(b, k).source for b in ("1", "2") for k in range(50)}
    for st, prog in zip(sts, synth_programs(len(sts))):
        assert st.task.source in sources and st.task.meta["ops"] == prog.ops
        assert f"ops.{st.task.id.split('-', 1)[1]}(x)" in st.right["model_new.py"]
        with tempfile.TemporaryDirectory() as d:
            verdict = run_filters(st.task.source, FilterConfig(device="cpu", compile=False, band_ms=(0, 1e9)),
                                  Path(d))
        assert verdict.ok, (st.task.id, verdict)


def test_cuda_solutions_are_cuda_files():
    files = solution("relu", "v = fmaxf(v, 0.0f);", "cuda")
    assert set(files) == {"kernels/relu.cu", "kernels/relu_binding.cpp", "model_new.py"}
    assert "cuda_agent_stream()" in files["kernels/relu_binding.cpp"] and "<<<" in files["kernels/relu.cu"]
    with pytest.raises(ValueError):
        scripted_tasks(0, "cuda")


def test_scripted_episode_uses_the_real_tools():
    (st,) = scripted_tasks(1, "cpu")
    msgs, tools = episode_messages(st, st.right, "cpu")
    assert {t["function"]["name"] for t in tools} >= {"Write", "Read", "Bash"}
    calls = [m["tool_calls"][0]["function"]["name"] for m in msgs if m.get("tool_calls")]
    assert calls == ["Write", "Write", "Read", "Write"]
    results = [m["content"] for m in msgs if m["role"] == "tool"]
    assert all(not r.startswith("Error") for r in results), results  # Read before the model_new.py Write
    assert msgs[-1] == {"role": "assistant", "content": "ModelNew calls my kernel."}
    # laid out as the agent loop lays out an episode, a new path each time
    import re

    again, _ = episode_messages(st, st.right, "cpu")
    paths = [re.search(r"Your workspace is (\S+)\. ", m[1]["content"]).group(1) for m in (msgs, again)]
    assert paths[0] != paths[1] and all(re.fullmatch(r".*/cuda-agent-[0-9a-f]{12}-[^/]+/ws", p) for p in paths)


def test_warm_start_fits_and_writes_a_model_verl_can_load(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    chain = Chain(tmp_path / "run", PRESETS["cpu-smoke"], device="cpu", echo=lambda s: None)
    info = chain.prepare()
    assert info["examples"] == 2 + 2 * PRESETS["cpu-smoke"].path_variants and info["warm_loss_last"] < info["warm_loss_first"] + 0.5
    tok = AutoTokenizer.from_pretrained(chain.model0)
    model = AutoModelForCausalLM.from_pretrained(chain.model0)
    assert model.config.vocab_size == len(tok) and tok.eos_token == "<|im_end|>"
    # the prompt is a prefix of the conversation, and only the answer is learnt
    (st,) = chain.scripted
    msgs = single_turn_messages(st.task, "cpu") + [{"role": "assistant", "content": answer_text(st.right)}]
    ids, labels = encode_example(tok, msgs, None, 2)
    n = sum(1 for x in labels if x != -100)
    name = st.task.id.split("-", 1)[1]
    assert 0 < n < len(ids) and tok.decode(ids[-n:]).startswith(f'<file path="kernels/{name}.cpp">')
    assert info["prompt_tokens_max"] > len(ids) - n
    # the warm start learnt the ids verl feeds: its tokenizer loader and its prompt builder (the
    # only tokenization path of its agent loops) give every example's prompt as a prefix
    from verl.utils import hf_tokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    builder = create_continuous_token_builder(hf_tokenizer(str(chain.model0)), hf_model_type="qwen2")
    single = builder.build_initial_tokens(single_turn_messages(st.task, "cpu"))
    assert chain.warm_examples[0][0][:len(single)] == single and chain.warm_examples[0][1][len(single)] != -100
    for (msgs, tools), (ids, _) in zip(chain.warm_messages, chain.warm_examples):
        assert replay_episode(builder, tok, msgs, tools, ids) == ids
    for f in ("single_turn.parquet", "agentic.parquet"):
        assert (chain.data / f).stat().st_size > 0
    assert (tmp_path / "run" / "plots" / "0_warm_start.png").stat().st_size > 0
    # a second chain into the same directory continues: the warm start is reused, stages whose
    # output exists are not run again
    again = Chain(tmp_path / "run", PRESETS["cpu-smoke"], device="cpu", echo=lambda s: None)
    assert again.prepare()["reused"] and again.prompt_len == chain.prompt_len
    done = tmp_path / "run" / "x_stage" / "out"
    done.mkdir(parents=True)
    run = again.run_stage("x_stage", None, done=done)
    assert run.rc == 0 and run.note.startswith("reused")


def replay_episode(builder, tok, msgs: list[dict], tools: list[dict] | None, example: list[int]) -> list[int]:
    """The token stream of an episode as verl's agent loop builds it: the first prompt from its
    builder, each model turn appended as drawn (here: the example's tokens up to the next
    end-of-turn), each run of tool results merged by the builder. Each model turn must read back,
    through the agent loop's own parser, as the tool calls and text of its message."""
    ids = list(builder.build_initial_tokens(msgs[:2], tools=tools))
    k = 2
    while k < len(msgs):
        if msgs[k]["role"] == "assistant":
            assert example[:len(ids)] == ids, f"the stream left the example before turn {k}"
            turn = example[len(ids):example.index(tok.eos_token_id, len(ids)) + 1]
            content, calls = parse_reply(tok.decode(turn, skip_special_tokens=True))
            want = msgs[k].get("tool_calls") or []
            assert [(c.name, json.loads(c.arguments)) for c in calls] == [
                (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in want], k
            assert content == (msgs[k].get("content") or "").strip(), k
            ids = list(builder.merge_assistant_tokens(ids, turn).token_ids)
            k += 1
        else:
            j = next((j for j in range(k, len(msgs)) if msgs[j]["role"] != "tool"), len(msgs))
            ids = list(builder.merge_context_tokens(msgs[:k], msgs[:j], ids, tools=tools).token_ids)
            k = j
    return ids


def test_every_warm_start_example_is_verls_stream_for_the_tiny_preset(tmp_path):
    """The tiny preset as the GPU machine runs it (4 tasks, CUDA prompts, transformers' Qwen2
    tokenizer): an episode that opens with a tool call and no text renders, as one string, the
    generation prompt's "\n" beside the reply's "\n", which Qwen's pre-tokenizer joins into one
    token that the agent loop never produces (the H100 run stopped at that). Every example is the
    stream verl builds, and each model turn parses back to its tool calls."""
    import dataclasses

    from verl.utils import hf_tokenizer
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    small = dataclasses.replace(PRESETS["tiny"], hidden=32, layers=1, heads=2, warm_steps=1)
    chain = Chain(tmp_path / "run", small, device="cuda", echo=lambda s: None)
    chain.prepare()
    tok = hf_tokenizer(str(chain.model0))
    builder = create_continuous_token_builder(tok, hf_model_type="qwen2")
    assert len(chain.warm_examples) == 4 * 2 * (1 + small.path_variants)
    for (msgs, tools), (ids, labels) in zip(chain.warm_messages, chain.warm_examples):
        assert replay_episode(builder, tok, msgs, tools, ids) == ids
        assert ids[-1] == tok.eos_token_id and labels[-1] == tok.eos_token_id


def test_rft_rows_keep_positive_samples(tmp_path):
    sts = scripted_tasks(2, "cuda")
    tasks = {s.task.id: s.task for s in sts}
    d = tmp_path / "samples"
    # written by verl's own writer of trainer.rollout_data_dir, reward extra info included
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    RayPPOTrainer._write_generations(["p", "p"], [answer_text(sts[0].right), answer_text(sts[1].wrong)],
                                     [sts[0].task.source, sts[1].task.source], [1.0, -1.0],
                                     {"failure": ["", "not correct"]}, str(d), 1)
    RayPPOTrainer._write_generations(["p"], ["x"], ["not a task"], [1.0], {}, str(d), 2)
    rows, seen = rft_rows_from_samples(d, tasks, "cuda")
    assert seen == {"read": 3, "kept": 1, "not above min_reward": 1, "unknown task": 1}
    (row,) = rows
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant"]
    assert row["messages"][-1]["content"] == answer_text(sts[0].right) and row["task_id"] == sts[0].task.id


def test_stage_commands_of_the_chain(tmp_path):
    from cuda_agent.train.stages import LaunchSpec, command

    chain = Chain(tmp_path, PRESETS["tiny"], echo=lambda s: None)
    chain.prompt_len = 7000
    reg = chain.agent_loop_yaml(tmp_path / "s3", tmp_path / "pool.sqlite")
    import yaml

    (entry,) = yaml.safe_load(reg.read_text())
    assert entry["pool_db"] == str(tmp_path / "pool.sqlite") and entry["timing"] is False
    argv = command(LaunchSpec(stage=3, model="/m", data=["/d.parquet"], gpus=1, warmup_steps=3, rollout="hf",
                              agent_loop=str(reg), overrides=chain.ppo_overrides(2048, 4)))
    assert f"actor_rollout_ref.rollout.agent.agent_loop_config_path={reg}" in argv
    assert "actor_rollout_ref.rollout.name=hf" in argv and "trainer.critic_warmup=3" in argv
    assert "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=9048" in argv and "data.train_batch_size=4" in argv


def test_metrics_and_plots(tmp_path):
    m = tmp_path / "metrics.jsonl"
    m.write_text("\n".join(json.dumps({"step": i, "data": {"critic/score/mean": 0.1 * i, "actor/entropy": 1.0 / i,
                                                          "critic/vf_explained_var": -0.5 + 0.2 * i}})
                           for i in (1, 2, 3)) + "\n")
    rows = read_metrics(m)
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[2]["actor/entropy"] == pytest.approx(1 / 3)
    png = plot_stage("stage", rows, tmp_path / "p.png")
    assert png and png.stat().st_size > 1000
    assert plot_stage("empty", [{"step": 1}], tmp_path / "q.png") is None


def test_episode_stats_and_checkpoint_lookup(tmp_path):
    from cuda_agent.agent.trajectory import Trajectory, append_jsonl
    from cuda_agent.train.chain import _hf_dir, episode_stats

    call = {"id": "c", "type": "function", "function": {"name": "Read", "arguments": "{}"}}
    for i, (calls, reward) in enumerate([(2, 1.0), (0, -1.0)]):
        msgs = [{"role": "user", "content": "u"}] + [{"role": "assistant", "content": "", "tool_calls": [call]},
                                                     {"role": "tool", "tool_call_id": "c", "content": "r"}] * calls
        append_jsonl(tmp_path / "traj" / f"e{i}" / "trajectory.jsonl", Trajectory(
            id=f"e{i}", task_id="t", task_sha="s", model="m", backend="b", reward=reward, stop_reason="finished",
            messages=msgs + [{"role": "assistant", "content": "done"}]))
    s = episode_stats(tmp_path / "traj")
    assert s["episodes"] == 2 and s["with_tool_calls"] == 1 and s["tool_calls_max"] == 2
    assert s["final_rewards"] == {"-1.0": 1, "1.0": 1} and s["stop_reasons"] == {"finished": 2}
    assert episode_stats(tmp_path / "none")["episodes"] == 0
    # the actor's Hugging Face weights of the last step, never the critic's; the tokenizer copied in
    for step in (1, 3):
        for role in ("actor", "critic"):
            (tmp_path / "ck" / f"global_step_{step}" / role / "huggingface").mkdir(parents=True)
            (tmp_path / "ck" / f"global_step_{step}" / role / "huggingface" / "config.json").write_text("{}")
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    hf = _hf_dir(tmp_path / "ck", "actor", tmp_path / "tok")
    assert hf == tmp_path / "ck" / "global_step_3" / "actor" / "huggingface" and (hf / "tokenizer.json").is_file()
    assert _hf_dir(tmp_path / "nothing", "actor") is None


def test_a_stage_ends_with_its_whole_process_group(tmp_path, monkeypatch):
    import subprocess
    import time

    import cuda_agent.train.chain as mod

    chain = Chain(tmp_path, PRESETS["cpu-smoke"], device="cpu", stage_timeout_s=2, echo=lambda s: None)
    pid_file = tmp_path / "x" / "child.pid"

    class Spec:  # a stage whose command leaves a background child behind, then hangs
        stage = 2

    monkeypatch.setattr(mod, "command", lambda spec: ["sh", "-c", f"sleep 300 & echo $! > {pid_file}; sleep 300"])
    run = chain.run_stage("x", Spec())
    assert run.rc == 124 and "timed out" in run.note
    child = int(pid_file.read_text())
    time.sleep(0.5)
    alive = subprocess.run(["ps", "-o", "stat=", "-p", str(child)], capture_output=True, text=True).stdout.strip()
    assert alive in ("", "Z"), alive  # gone (or a zombie waiting for init)


def test_a_stage_that_would_not_fit_the_time_limit_is_not_started(tmp_path, monkeypatch):
    import cuda_agent.train.chain as mod

    chain = mod.Chain(tmp_path, PRESETS["cpu-smoke"], device="cpu", time_limit_s=30, echo=lambda s: None)
    started = []
    monkeypatch.setattr(mod, "command", lambda spec: started.append(spec) or ["true"])

    class Spec:
        stage = 2

    with pytest.raises(mod.OutOfTime, match="y_stage"):
        chain.run_stage("y_stage", Spec())
    assert not (tmp_path / "y_stage" / "log.txt").exists()
