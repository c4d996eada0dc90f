"""Stage 4: verl agent loop that runs OUR ReAct episode (agent/loop.py) with token ids.

verl creates one :class:`CudaAgentLoop` per row whose ``agent_name`` is ``cuda_agent``
(registered by ``configs/agent_loop.yaml``).  Its ``run`` lays out a fresh workspace for
the task, and runs :class:`cuda_agent.agent.loop.Agent` (the ten tools, budgets,
evaluator-checked snapshots, best-snapshot tracking) in a worker thread with a
:class:`VerlBackend` as the LLM: every model turn is one ``server_manager.generate`` call
with token ids in and out, so the ReAct logic exists once.

The token stream is append-only and never re-tokenized: the first prompt and each batch of
tool results are rendered by verl's Continuous Token builder (the model's chat template,
tools passed natively; replies are parsed with our ``<tool_call>`` parser, the format of
Qwen/Hermes templates); the model's tokens are appended as generated (mask 1, rollout
log-probs kept), observations get mask 0.  Tool results are merged only when the model is
asked for another turn, so an episode always ends on a model token (verl puts the reward on
the last valid token; GAE would drop it on an observation token).  Old tool outputs are
never shortened: when the response budget (``rollout.response_length``) is spent, the
episode stops.  Tool outputs are not cut to a fixed size either: compiler logs reach the
model as the tools return them.

Checks run in this process through the sandbox, or, with ``pool_db``, as jobs in the GPU pool
that ``cuda-agent pool serve --db <pool_db>`` serves on the GPU node (verl's agent-loop
workers are CPU-only Ray actors that may see no GPU).

``reward_score`` is the evaluator's reward for the episode's best snapshot (correct first,
then fastest; the final workspace is always among the checked snapshots); the same
diagnostics as the stage-1 reward go to ``extra_fields["reward_extra_info"]``.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from ..sandbox.evaluator import Evaluator
from ..sandbox.pool.evaluator import POOL_DB_ENV, evaluator_for
from ..agent.llm.base import BackendError, Reply, Usage
from ..agent.llm.text_format import parse_reply
from ..agent.loop import TRAIN_MAX_TURNS, Agent, AgentConfig, Budget, EpisodeResult
from ..agent.tools import ToolSet
from ..sandbox.workspace import create_workspace
from .data import episode_dir, task_from_row
from .reward_fn import Score, failure_score, score_of

logger = logging.getLogger(__name__)

_EXECUTORS: dict[int, ThreadPoolExecutor] = {}


def _executor(size: int) -> ThreadPoolExecutor:
    """One thread pool per size per process: an episode holds a thread for its whole run."""
    if size not in _EXECUTORS:
        _EXECUTORS[size] = ThreadPoolExecutor(max_workers=size, thread_name_prefix="cuda-agent-episode")
    return _EXECUTORS[size]


def split_reasoning(text: str) -> tuple[str | None, str]:
    """``<think>...</think>rest`` -> (reasoning, rest); (None, text) without a closing tag."""
    i = text.rfind("</think>")
    if i < 0:
        return None, text
    return text[:i].replace("<think>", "", 1).strip() or None, text[i + len("</think>"):]


class VerlBackend:
    """The Agent's LLM back-end inside a verl rollout: token ids through the server manager.

    ``complete``/``count_tokens`` are called from the episode's thread and run on the
    event loop of the agent loop.  ``ids`` is the whole token stream (prompt + response),
    ``mask``/``logprobs`` cover the response part.
    """

    name = "verl"

    def __init__(self, owner: "CudaAgentLoop", sampling_params: dict[str, Any], request_id: str,
                 loop: asyncio.AbstractEventLoop, tools: list[dict[str, Any]]) -> None:
        self.owner = owner
        self.tools = tools
        """The episode's tool schemas (rendered by the chat template from the first prompt on)."""
        self.sampling_params = dict(sampling_params)
        self.request_id = request_id
        self.loop = loop
        self.model = str(owner.config.actor_rollout_ref.model.get("path", "") or "")
        self.ids: list[int] | None = None
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.seen: list[dict[str, Any]] = []
        """The messages already in the token stream (up to the last assistant message)."""
        self._pending: tuple[int, tuple[list[int], list[int], list[float]]] | None = None

    # -- called from the episode thread ------------------------------------------------
    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def count_tokens(self, messages: list[dict[str, Any]]) -> int:
        """verl's frame: the configured prompt length + the response so far, with the
        messages appended since the last turn merged in (so the loop stops when the
        response budget is spent)."""
        _, mask, _ = self._call(self._context(messages, self.tools))
        return self.owner.prompt_length + len(mask)

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Reply:
        if tools != self.tools:
            raise BackendError("the tool set changed during the episode")
        return self._call(self._complete(messages, self.tools))

    # -- on the event loop -------------------------------------------------------------
    async def _context(self, messages: list[dict[str, Any]], tools) -> tuple[list[int], list[int], list[float]]:
        n = len(messages)
        if self._pending is not None and self._pending[0] == n:
            return self._pending[1]
        if self.ids is None:
            ids = await self.owner.ct_build_initial_tokens(list(messages), tools=tools)
            got = (ids, [], [])
        elif n == len(self.seen):
            got = (self.ids, self.mask, self.logprobs)
        else:
            try:
                merge, mask, lps = await self.owner.ct_merge_context_msg(
                    self.seen, list(messages), self.ids, self.mask, self.logprobs or None, tools=tools)
            except ValueError as e:  # the history is not an append of what was tokenized
                raise BackendError(f"cannot extend the token stream: {e}") from None
            got = (merge.token_ids, mask, list(lps or []))
        self._pending = (n, got)
        return got

    async def _complete(self, messages: list[dict[str, Any]], tools) -> Reply:
        ids, mask, lps = await self._context(messages, tools)
        left = self.owner.response_length - len(mask)
        if left <= 0:
            raise BackendError("the response budget (rollout.response_length) is spent")
        params = dict(self.sampling_params, max_tokens=left)
        out = await self.owner.server_manager.generate(request_id=self.request_id, prompt_ids=ids,
                                                       sampling_params=params)
        new = list(out.token_ids)[:left]
        new_lps = list(out.log_probs)[:len(new)] if out.log_probs else None
        merge, mask2, lps2 = await self.owner.ct_merge_assistant_token(
            ids, new, mask, lps if (lps or new_lps) else None, assistant_logprobs=new_lps)
        reasoning, text = split_reasoning(self.owner.tokenizer.decode(new, skip_special_tokens=True))
        content, calls = parse_reply(text)  # tool calls are read after the reasoning only
        reply = Reply(content=content, tool_calls=calls, reasoning=reasoning,
                      usage=Usage(prompt_tokens=len(ids), completion_tokens=len(new)),
                      finish_reason="length" if len(new) >= left else "stop")
        self.ids, self.mask, self.logprobs = merge.token_ids, mask2, list(lps2 or [])
        self.seen = list(messages) + [reply.message()]
        self._pending = None
        return reply

    # -- the result ----------------------------------------------------------------------
    def output_tokens(self) -> tuple[list[int], list[int], list[int], list[float] | None]:
        """(prompt ids, response ids, response mask, log-probs), cut after the last model token."""
        if self.ids is None:
            return [], [], [], None
        prompt = self.ids[:len(self.ids) - len(self.mask)]
        resp, mask = self.ids[len(prompt):], list(self.mask)
        last = max((i for i, m in enumerate(mask) if m == 1), default=-1)
        resp, mask = resp[:last + 1], mask[:last + 1]
        lps = self.logprobs[:last + 1] if len(self.logprobs) == len(self.mask) and self.logprobs else None
        return prompt, resp, mask, lps


def _n_files(snapshot: Path | None) -> int:
    """Solution files in a snapshot directory (model_new.py + kernels/); it may be gone already."""
    if snapshot is None or not snapshot.is_dir():
        return 0
    k = snapshot / "kernels"
    return int((snapshot / "model_new.py").is_file()) + (sum(1 for p in k.rglob("*") if p.is_file()) if k.is_dir() else 0)


class CudaAgentLoop(AgentLoopBase):
    """One ReAct episode per row; options come from the registration YAML (keys beside
    ``name``/``_target_``)."""

    def __init__(self, *args: Any, max_turns: int = TRAIN_MAX_TURNS, wall_time_s: float | None = 3600.0,
                 bash_timeout_s: float = 300.0, timing: bool = True, workdir: str | None = None,
                 trajectory_dir: str | None = None, keep_workspaces: bool = False,
                 max_parallel_episodes: int = 256, pool_db: str | None = None,
                 pool_timeout_s: float = 7200.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.max_turns = int(max_turns)
        self.wall_time_s = wall_time_s
        self.bash_timeout_s = float(bash_timeout_s)
        self.timing = bool(timing)
        self.workdir = workdir
        self.trajectory_dir = trajectory_dir
        self.keep_workspaces = bool(keep_workspaces)
        self.max_parallel_episodes = int(max_parallel_episodes)
        self.pool_db = pool_db
        self.pool_timeout_s = float(pool_timeout_s)

    def evaluator(self, device: str, rules: str, scheme: str) -> Evaluator:
        """The sandbox in this process, or the pool at ``pool_db`` when it is set."""
        opts = dict(device=device, rules=rules, reward=scheme, timing=self.timing, baselines=self.timing)
        return evaluator_for(self.pool_db, timeout=self.pool_timeout_s, tag="agent-loop", **opts)

    def agent_config(self, device: str) -> AgentConfig:
        budget = Budget(max_turns=self.max_turns, wall_time_s=self.wall_time_s,
                        context_tokens=self.prompt_length + self.response_length - 1,
                        keep_recent_tool_outputs=1 << 30)  # never shorten: the stream is append-only
        env = {POOL_DB_ENV: str(Path(self.pool_db).resolve())} if self.pool_db else {}
        return AgentConfig(budget=budget, device=device, bash_timeout_s=self.bash_timeout_s, env=env)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        info = dict(kwargs.get("extra_info") or {})
        reward_model = kwargs.get("reward_model") or {}
        task = task_from_row(reward_model.get("ground_truth"), info)
        device, rules, scheme = info.get("device") or "cuda", info.get("rules") or "strict", info.get("reward") or "paper"
        traj_id, ep_dir = episode_dir(Path(self.workdir) if self.workdir else Path(tempfile.gettempdir()))
        loop = asyncio.get_running_loop()
        evaluator = self.evaluator(device, rules, scheme)
        config = self.agent_config(device)
        out_dir = Path(self.trajectory_dir) / traj_id if self.trajectory_dir else None
        try:
            ws = create_workspace(task, ep_dir / "ws", device=device)
            backend = VerlBackend(self, sampling_params, traj_id, loop,
                                  tools=ToolSet(ws, config.tool_names).schemas())
            agent = Agent(backend, evaluator, config)
            res: EpisodeResult = await loop.run_in_executor(
                _executor(self.max_parallel_episodes), agent.run, task, ws, out_dir, traj_id)
            fail = failure_score(scheme)
            score: Score = (score_of(res.best, fail, n_files=_n_files(res.best_dir)) if res.best is not None
                            else Score(fail, False, False, False, 0.0, 0.0, 0, "no snapshot was checked"))
        finally:
            if not self.keep_workspaces:
                shutil.rmtree(ep_dir, ignore_errors=True)
        prompt, response, mask, lps = backend.output_tokens()
        if not response:
            raise BackendError(f"episode {traj_id} of {task.id} ended without a model token "
                               f"({res.trajectory.stop_reason})")
        traj = res.trajectory
        return AgentLoopOutput(
            prompt_ids=prompt, response_ids=response, response_mask=mask, response_logprobs=lps,
            reward_score=score.score, num_turns=sum(1 for m in traj.messages if m["role"] != "system"),
            metrics=AgentLoopMetrics(),
            extra_fields={"reward_extra_info": asdict(score), "turn_scores": [], "tool_rewards": [],
                          "stop_reason": traj.stop_reason, "trajectory_id": traj.id,
                          "final_reward": traj.reward})
