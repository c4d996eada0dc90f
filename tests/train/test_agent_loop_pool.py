"""``pool_db`` in the agent-loop YAML: the episode's checks become jobs in a GPU pool that a
``cuda-agent pool serve`` subprocess serves (here on one CPU slot), as on a training node
whose agent-loop workers see no GPU.  The reward is the served pool's real verdict."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install 'cuda-agent[train]')")

from cuda_agent.sandbox.evaluator import SandboxEvaluator  # noqa: E402
from cuda_agent.sandbox.pool.evaluator import POOL_DB_ENV, PoolEvaluator  # noqa: E402
from cuda_agent.sandbox.pool import Store  # noqa: E402

from .conftest import KERNEL, MODEL_NEW, binding, call  # noqa: E402
from .test_agent_loop import dataset_row, ppo_config, run_episode  # noqa: E402


def test_pool_db_sends_the_episode_checks_to_a_served_pool(task, tokenizer, verl_config_dir, tmp_path):
    db, log = tmp_path / "pool.sqlite", tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "cuda_agent.cli", "pool", "serve",
                             "--db", str(db), "--device", "cpu", "--slots", "1"],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 90
        while "SIGINT or SIGTERM stops" not in log.read_text():
            assert proc.poll() is None and time.time() < deadline, log.read_text()
            time.sleep(0.2)
        cfg = ppo_config(verl_config_dir, tokenizer, prompt_length=8192, response_length=24576)
        row = dataset_row(task, tokenizer, cfg, tmp_path)
        steps = [call("Write", file_path="kernels/relu6.cpp", content=KERNEL),
                 call("Write", file_path="kernels/relu6_binding.cpp", content=binding()),
                 call("Read", file_path="model_new.py"),  # Write replaces a file only after a Read
                 call("Write", file_path="model_new.py", content=MODEL_NEW),
                 "Done: ModelNew calls my relu6 kernel."]
        out, _ = run_episode(cfg, tokenizer, steps, row, timing=False, workdir=str(tmp_path / "eps"),
                             pool_db=str(db), pool_timeout_s=300)
        info = out.extra_fields["reward_extra_info"]
        assert out.reward_score == 1.0 and info["correct"], (info, [j.result.error for j in Store(db).jobs()])
        jobs = Store(db).jobs()
        assert jobs and all(j.tag == "agent-loop" and j.status == "done" for j in jobs)
        assert jobs[-1].result.correct and jobs[-1].slot == "cpu:0" and jobs[-1].task.id == task.id
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_without_pool_db_the_loop_checks_in_process(task, tokenizer, verl_config_dir, tmp_path):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    cfg = ppo_config(verl_config_dir, tokenizer, prompt_length=1024, response_length=1024)
    entry = OmegaConf.load(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path)[0]
    assert entry.pool_db is None
    kw = dict(trainer_config=DictConfigWrap(cfg), server_manager=None, tokenizer=tokenizer, processor=None,
              dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data), tools=ToolListWrap([]))
    plain = instantiate(entry, **kw)
    assert isinstance(plain.evaluator("cpu", "strict", "paper"), SandboxEvaluator)
    assert POOL_DB_ENV not in plain.agent_config("cpu").env
    pooled = instantiate(OmegaConf.merge(entry, {"pool_db": str(tmp_path / "p.sqlite"), "timing": False}), **kw)
    # the agent's shell sends its own compile/verify/profile to the same pool
    assert pooled.agent_config("cpu").env[POOL_DB_ENV] == str((tmp_path / "p.sqlite").resolve())
    ev = pooled.evaluator("cpu", "kernelbench", "paper")
    assert isinstance(ev, PoolEvaluator) and ev.pool.store.db == (tmp_path / "p.sqlite").resolve()
    assert (ev.options.rules, ev.options.timing, ev.timeout) == ("kernelbench", False, 7200.0)
