"""``rollout.name=hf``: a verl rollout backend on transformers ``generate`` (no vLLM, no SGLang).

verl 0.9.1 knows rollout backends by name in two registries, and this module adds ``hf`` to
both when it is imported (every Ray process imports it: ``cuda-agent train stage N --rollout hf``
sets ``VERL_USE_EXTERNAL_MODULES=cuda_agent.train.hf_rollout`` for the run, and a pip install
declares it as a ``verl.plugins`` entry point):

- :class:`HFReplica` (``RolloutReplicaRegistry``): one replica = one :class:`HFServer` Ray actor
  on the node (and GPU) of its trainer worker, or, without trainer workers (standalone), on the
  node's first GPU or on the CPU.
- :class:`HFServerAdapter` (``_ROLLOUT_REGISTRY[("hf", "async")]``): built inside each trainer
  worker; the trainer pushes its weights through it after every update (verl's ``naive``
  checkpoint engine) and it forwards them to its replica's server.

The server answers the agent loop's one call, ``generate(request_id, prompt_ids,
sampling_params)`` -> ``TokenOutput`` (token ids and their log-probs, as verl's
``logprobs_mode`` says), by batching the requests that arrive together into one left-padded
``generate`` call per set of sampling parameters.  ``sleep`` moves the model to host memory
while the trainer runs on the same GPU; ``wake_up`` brings it back.  There is no KV cache kept
between requests, so the cache calls are no-ops.  This is the single-GPU and CI path: slower
per token than vLLM, and without tensor parallelism (``tensor_model_parallel_size`` must be 1).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

import ray
import torch
from verl.workers.rollout import base as _rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput

logger = logging.getLogger(__name__)

NAME = "hf"
MODULE = __name__
"""What ``VERL_USE_EXTERNAL_MODULES`` must name so that every Ray process registers ``hf``."""
BATCH_WAIT_S = 0.005
"""How long the server waits for more requests before it starts a batch."""
PUSH_BUCKET_BYTES = 256 << 20
"""Weights go from the trainer to the server in pieces of about this size."""


def server_name(replica_rank: int, suffix: str = "") -> str:
    """The Ray actor name of a replica's server: how a trainer worker's adapter finds it."""
    return f"cuda_agent_hf_server_{replica_rank}{suffix}"


def _max_new_tokens(params: dict[str, Any], default: int) -> int:
    for key in ("max_tokens", "max_new_tokens"):
        if params.get(key) is not None:
            return int(params[key])
    return default


def _sampling_key(params: dict[str, Any]) -> tuple:
    """Requests with equal keys share one ``generate`` call."""
    t = float(params.get("temperature") if params.get("temperature") is not None else 1.0)
    if t <= 0:
        return (0.0, 1.0, 0, 1.0)
    k = int(params.get("top_k") if params.get("top_k") is not None else -1)
    return (t, float(params.get("top_p") if params.get("top_p") is not None else 1.0), max(k, 0),
            float(params.get("repetition_penalty") or 1.0))


@dataclass
class _Request:
    prompt: list[int]
    max_new: int
    done: asyncio.Future
    key: tuple = field(default=())


class HFServer:
    """A transformers model answering token-in/token-out requests (a Ray actor, async methods).

    One model instance per replica; requests queue on the actor's event loop and a single
    batching task drains them, so a weight update or a sleep never runs in the middle of a
    ``generate``.
    """

    def __init__(self, config, model_config, replica_rank: int = 0, cuda_visible_devices: str | None = None,
                 device: str | None = None) -> None:
        if cuda_visible_devices is not None:  # before the first CUDA call of this process
            os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
        from transformers import AutoModelForCausalLM
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig, RolloutConfig

        self.config = config if isinstance(config, RolloutConfig) else omega_conf_to_dataclass(config, RolloutConfig)
        mc = model_config if isinstance(model_config, HFModelConfig) else omega_conf_to_dataclass(model_config, HFModelConfig)
        self.replica_rank = replica_rank
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if self.device.type == "cuda":
            # every decode step of a rollout is a new attention shape (the cache grows by one,
            # prompts differ per batch); on an H100 a new shape cost ~65 ms a step, which
            # points at cuDNN's attention planning each shape; the flash and memory-efficient
            # kernels do not plan (scripts/bench_hf_rollout.py compares the two)
            torch.backends.cuda.enable_cudnn_sdp(False)
        # bf16 (the rollout's dtype) on a GPU; full precision on the CPU, where bf16 is slow
        dtype = getattr(torch, str(self.config.dtype)) if self.device.type == "cuda" else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(mc.local_path, dtype=dtype,
                                                          trust_remote_code=mc.trust_remote_code)
        self.model.to(self.device).eval()
        gen = self.model.generation_config
        eos = gen.eos_token_id if gen.eos_token_id is not None else mc.tokenizer.eos_token_id
        self.eos: set[int] = set(eos if isinstance(eos, list) else [eos])
        pad = gen.pad_token_id if gen.pad_token_id is not None else getattr(mc.tokenizer, "pad_token_id", None)
        self.pad = int(pad if pad is not None else min(self.eos))
        self.max_len = int(self.config.prompt_length) + int(self.config.response_length)
        self.max_batch = max(1, int(self.config.max_num_seqs))
        self.logprobs_mode = str(getattr(self.config, "logprobs_mode", None) or "processed_logprobs")
        self.global_steps: int | None = None
        self.counts = {"requests": 0, "batches": 0, "tokens": 0}
        self._queue: list[_Request] = []
        self._drain: asyncio.Task | None = None
        self._model_lock = asyncio.Lock()
        self._open = asyncio.Event()
        self._open.set()
        self._reject = False

    # -- generation ------------------------------------------------------------------------
    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data=None, video_data=None, **kwargs: Any) -> TokenOutput:
        if image_data or video_data:
            raise ValueError("the hf rollout takes text token ids only")
        if not self._open.is_set():
            if self._reject:
                return TokenOutput(token_ids=[], log_probs=[], stop_reason="aborted",
                                   extra_fields={"global_steps": self.global_steps})
            await self._open.wait()
        prompt = [int(t) for t in prompt_ids]
        room = self.max_len - len(prompt)
        if room < 1:
            raise ValueError(f"prompt of {len(prompt)} tokens leaves no room in {self.max_len}")
        max_new = max(1, min(_max_new_tokens(sampling_params, int(self.config.response_length)), room))
        req = _Request(prompt, max_new, asyncio.get_running_loop().create_future(), _sampling_key(sampling_params))
        self._queue.append(req)
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._drain_queue())
        ids, lps, stop = await req.done
        return TokenOutput(token_ids=ids, log_probs=lps if sampling_params.get("logprobs", True) else None,
                           stop_reason=stop, extra_fields={"global_steps": self.global_steps})

    async def _drain_queue(self) -> None:
        await asyncio.sleep(BATCH_WAIT_S)  # let the requests of one agent-loop wave arrive together
        while self._queue:
            key = self._queue[0].key
            batch = [r for r in self._queue if r.key == key][:self.max_batch]
            self._queue = [r for r in self._queue if not any(r is b for b in batch)]
            self.counts["requests"] += len(batch)
            self.counts["batches"] += 1
            try:
                async with self._model_lock:
                    t0 = time.perf_counter()
                    results = await asyncio.to_thread(self._generate_batch, batch, key)
                    # one line per batch in the stage's log: where generation time goes (device,
                    # batch, lengths) is the first question about a slow rollout
                    print(f"hf rollout: {len(batch)} requests, prompts <= {max(len(r.prompt) for r in batch)} "
                          f"tokens, {max(len(r[0]) for r in results)} new, {time.perf_counter() - t0:.2f} s "
                          f"on {next(self.model.parameters()).device}", flush=True)
            except Exception as e:  # every waiting request gets the error, the server lives on
                for r in batch:
                    if not r.done.done():
                        r.done.set_exception(e)
                continue
            for r, res in zip(batch, results):
                self.counts["tokens"] += len(res[0])
                if not r.done.done():
                    r.done.set_result(res)

    @torch.no_grad()
    def _generate_batch(self, batch: list[_Request], key: tuple) -> list[tuple[list[int], list[float], str]]:
        from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

        temperature, top_p, top_k, rep = key
        # Log-probs of the drawn tokens, one step at a time (memory of one step's logits, not of
        # the whole generation): the processor sees the step's scores before sampling, the stopping
        # criterion sees the token that was drawn.  "processed_logprobs" (verl's default, what the
        # trainer recomputes): the distribution at the sampling temperature; "raw_logprobs": the
        # model's own.  Top-k/top-p truncation is not renormalised in either, like the trainer.
        scale = temperature if temperature > 0 and self.logprobs_mode != "raw_logprobs" else 1.0
        step_lp: list[torch.Tensor] = []
        last: dict[str, torch.Tensor] = {}

        class Record(LogitsProcessor):
            def __call__(self, input_ids, scores):
                last["lp"] = torch.log_softmax(scores.float() / scale, dim=-1)
                return scores

        class Gather(StoppingCriteria):
            def __call__(self, input_ids, scores, **kw):
                step_lp.append(last["lp"].gather(-1, input_ids[:, -1:]).squeeze(-1))
                return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

        width = max(len(r.prompt) for r in batch)
        ids = torch.full((len(batch), width), self.pad, dtype=torch.long)
        attn = torch.zeros_like(ids)
        for i, r in enumerate(batch):  # left padding: every prompt ends where generation starts
            ids[i, width - len(r.prompt):] = torch.tensor(r.prompt)
            attn[i, width - len(r.prompt):] = 1
        sample = temperature > 0
        out = self.model.generate(
            input_ids=ids.to(self.device), attention_mask=attn.to(self.device),
            max_new_tokens=max(r.max_new for r in batch), do_sample=sample,
            temperature=temperature if sample else None, top_p=top_p if sample else None,
            top_k=top_k if sample else None, repetition_penalty=rep,
            eos_token_id=sorted(self.eos), pad_token_id=self.pad,
            logits_processor=LogitsProcessorList([Record()]), stopping_criteria=StoppingCriteriaList([Gather()]))
        new = out[:, width:].cpu()
        lps = torch.stack(step_lp, dim=1).cpu()
        results = []
        for i, r in enumerate(batch):
            toks = new[i, :r.max_new].tolist()
            stop = "length"
            for j, t in enumerate(toks):
                if t in self.eos:
                    toks, stop = toks[:j + 1], "completed"
                    break
            results.append((toks, lps[i, :len(toks)].tolist(), "completed" if stop == "completed" else "length"))
        return results

    # -- control: weights, memory, admission -----------------------------------------------
    async def load_weights(self, named: list[tuple[str, torch.Tensor]], global_steps: int | None = None) -> int:
        """Copy trainer weights into the model (names as the trainer's Hugging Face model)."""
        async with self._model_lock:
            params = self.model.state_dict(keep_vars=True)  # tied weights under each of their names
            loaded = 0
            for name, t in named:
                p = params.get(name)
                if p is None:
                    raise KeyError(f"the trainer sent {name!r}, which the rollout model does not have")
                if tuple(p.shape) != tuple(t.shape):
                    raise ValueError(f"{name}: trainer shape {tuple(t.shape)} != rollout shape {tuple(p.shape)}")
                p.data.copy_(t.to(device=p.device, dtype=p.dtype))
                loaded += 1
            if global_steps is not None:
                self.global_steps = global_steps
            return loaded

    async def sleep(self) -> None:
        """Free the GPU for the trainer: the model waits in host memory."""
        async with self._model_lock:
            if self.device.type == "cuda":
                self.model.to("cpu")
                torch.cuda.empty_cache()

    async def wake_up(self) -> None:
        async with self._model_lock:
            self.model.to(self.device)

    async def abort_all_requests(self, reject_request: bool = False) -> dict[str, Any]:
        """Stop admitting requests; queued ones wait (or, with reject_request, come back aborted)."""
        self._open.clear()
        self._reject = bool(reject_request)
        aborted = 0
        if reject_request:
            for r in self._queue:
                if not r.done.done():
                    r.done.set_result(([], [], "aborted"))
                    aborted += 1
            self._queue = []
        return {"aborted": aborted}

    async def resume_generation(self) -> None:
        self._reject = False
        self._open.set()

    async def clear_kv_cache(self) -> None:
        """No cache outlives a request here."""

    async def release_kv_cache(self) -> None:
        """No cache outlives a request here."""

    async def resume_kv_cache(self) -> None:
        """No cache outlives a request here."""

    async def start_profile(self, **kwargs: Any) -> None:
        """Profiling is not wired for this backend."""

    async def stop_profile(self) -> None:
        """Profiling is not wired for this backend."""

    async def device_of_model(self) -> str:
        return str(next(self.model.parameters()).device)

    async def stats(self) -> dict[str, int]:
        """Requests, ``generate`` batches and tokens served so far."""
        return dict(self.counts)


class HFReplica(RolloutReplica):
    """One :class:`HFServer` per replica (tensor parallelism is not supported)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.world_size != 1:
            raise ValueError("rollout.name=hf runs one model per GPU: set tensor_model_parallel_size, "
                             "data_parallel_size and pipeline_model_parallel_size to 1")

    def _actor(self, cuda_visible_devices: str | None, device: str | None, node_id: str | None, num_gpus: float):
        opts: dict[str, Any] = dict(name=server_name(self.replica_rank, self.name_suffix),
                                    max_concurrency=self.max_concurrency, num_gpus=num_gpus)
        if node_id is not None:
            opts["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node_id=node_id, soft=False)
        if cuda_visible_devices is not None:
            # share the trainer worker's GPU: Ray must not reset the variable, and the process starts
            # with it (an import that initialises CUDA before __init__ would otherwise see every GPU)
            opts["runtime_env"] = {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
                                                "CUDA_VISIBLE_DEVICES": cuda_visible_devices}}
        return ray.remote(HFServer).options(**opts).remote(
            self.config, self.model_config, replica_rank=self.replica_rank,
            cuda_visible_devices=cuda_visible_devices, device=device)

    async def launch_servers(self) -> None:
        """Hybrid: the server sits on its trainer worker's node and sees that worker's GPU."""
        worker = self.workers[0]
        node_id, gpu = await worker.__ray_call__.remote(
            lambda w: (ray.get_runtime_context().get_node_id(),
                       (ray.get_runtime_context().get_accelerator_ids().get("GPU") or [None])[0]))
        server = self._actor(str(gpu) if gpu is not None else None, "cuda" if gpu is not None else "cpu",
                             node_id, num_gpus=0)
        await self._register(server)

    async def init_standalone(self) -> None:
        """Standalone: no trainer workers to sit beside; one GPU of its own if the cluster has
        one, else the CPU (CI, the rollout-half test)."""
        from verl.workers.rollout.replica import RolloutMode

        self.rollout_mode = RolloutMode.STANDALONE
        gpus = ray.cluster_resources().get("GPU", 0)
        server = self._actor(None, "cuda" if gpus else "cpu", None, num_gpus=1 if gpus else 0)
        await self._register(server)

    async def _register(self, server) -> None:
        await server.device_of_model.remote()  # the model is loaded: fail here, not at the first request
        self.servers = [server]
        self._server_handle = server
        # the load balancer keys servers by address; this backend serves no HTTP
        self._server_address = f"hf-replica-{self.replica_rank}{self.name_suffix}"


def _buckets(weights: Iterable[tuple[str, torch.Tensor]], limit: int = PUSH_BUCKET_BYTES):
    bucket, size = [], 0
    for name, t in weights:
        t = t.detach()
        if hasattr(t, "full_tensor"):  # a DTensor shard: the trainer engine hands full ones, but be sure
            t = t.full_tensor()
        t = t.to("cpu", non_blocking=False).contiguous()
        bucket.append((name, t))
        size += t.numel() * t.element_size()
        if size >= limit:
            yield bucket
            bucket, size = [], 0
    if bucket:
        yield bucket


class HFServerAdapter(BaseRollout):
    """The trainer worker's end of the weight path: ``update_weights`` sends the trainer's
    tensors to this rank's replica server; ``resume``/``release`` wake it and put it to sleep."""

    def __init__(self, config, model_config, device_mesh=None, replica_rank: int = -1, **kwargs: Any) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank = rank if replica_rank == -1 else replica_rank  # one GPU per replica
        self.is_leader_rank = True
        self._server = None

    def server(self):
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        if "weights" in tags:
            await self.server().wake_up.remote()

    async def release(self) -> None:
        await self.server().sleep.remote()

    async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"rollout.name=hf takes full named tensors, not {wire_format!r}")
        steps = kwargs.get("global_steps")
        for bucket in _buckets(weights):
            await self.server().load_weights.remote(bucket, global_steps=steps)


def register() -> None:
    """Add ``hf`` to verl's two rollout registries (idempotent; refuses a different owner)."""
    key = (NAME, "async")
    target = f"{MODULE}.HFServerAdapter"
    have = _rollout_base._ROLLOUT_REGISTRY.get(key)
    if have not in (None, target):
        raise RuntimeError(f"rollout {NAME!r} is already registered to {have}")
    _rollout_base._ROLLOUT_REGISTRY[key] = target
    RolloutReplicaRegistry.register(NAME, lambda: HFReplica)


def critic_without_flash_attn() -> None:
    """verl 0.9.1 loads the critic as ``AutoModelForTokenClassification`` with
    ``attn_implementation="flash_attention_2"`` written into the call (its config's
    ``attn_implementation`` is not consulted there) and, when that fails, only tries trl's value
    head.  On a machine without flash-attn (this backend's single-GPU users, the H200 image) every
    stage with a critic then fails at start.  Where flash-attn is missing, load the critic with the
    attention its config names (sdpa unless set), as the actor already is."""
    import importlib.util

    import verl.utils.model as vm

    orig = vm.load_valuehead_model
    if importlib.util.find_spec("flash_attn") is not None or getattr(orig, "__wrapped__", None):
        return

    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        from transformers import AutoModelForTokenClassification

        impl = getattr(model_config, "_attn_implementation", None)
        return AutoModelForTokenClassification.from_pretrained(
            local_path, torch_dtype=torch_dtype, config=model_config, trust_remote_code=trust_remote_code,
            attn_implementation=impl if impl and not impl.startswith("flash") else "sdpa")

    load_valuehead_model.__wrapped__ = orig  # type: ignore[attr-defined]
    vm.load_valuehead_model = load_valuehead_model


register()
critic_without_flash_attn()
