"""The LLM composer: asks a chat model (any OpenAI-compatible server, through the ``openai``
client) to fuse a sampled set of seed operators into one KernelBench-format task.

The prompt shows each sampled operator as a one-op seed task; the reply's python code block is
parsed and checked for the format; a malformed reply is sent back with the error for another
try (``retries``).  The result goes through the same filters as programmatic tasks.
"""

from __future__ import annotations

import random
import re
from typing import Any

from ...tasks import TaskError, validate_source
from ..ops import OpSpec
from ..program import ComposeError
from .base import BUCKETS, Candidate, register_composer
from .programmatic import ProgrammaticComposer

SYSTEM = ("You write PyTorch reference problems for a GPU-kernel benchmark. A problem is one Python file that "
          "defines `class Model(nn.Module)` with `__init__` and `forward`, module-level size constants, "
          "`get_inputs()` returning a list of CPU tensors and `get_init_inputs()` returning the constructor "
          "arguments. No randomness inside the model (no dropout), no prints, no file or network access.")

PROMPT = """Fuse the following {k} operator(s) into ONE new problem whose forward applies them in a sensible
order (you may reorder them, add a residual connection or combine branches where the shapes allow).
Choose realistic sizes so that the eager forward on a modern GPU takes between 1 and 100 ms.

{examples}

Reply with the complete problem file in a single ```python code block and nothing else."""

_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def extract_code(text: str) -> str:
    """The first python code block of a reply (the whole reply if it has no fence)."""
    blocks = _BLOCK.findall(text or "")
    if blocks:
        return max(blocks, key=len).strip() + "\n"
    if "class Model" in (text or ""):
        return text.strip() + "\n"
    raise ComposeError("the reply has no python code block")


@register_composer("llm")
class LLMComposer:
    """Composes with a chat model; ``base_url``/``api_key``/``model`` select the server."""

    name = "llm"

    def __init__(self, library: list[OpSpec] | None = None, profile: str = "gpu", *, base_url: str | None = None,
                 api_key: str | None = None, model: str = "gpt-4o-mini", temperature: float = 0.7,
                 max_tokens: int = 2048, retries: int = 3, timeout_s: float = 120.0, client: Any = None) -> None:
        self._examples = ProgrammaticComposer(library=library, profile=profile)
        self.profile = profile
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.retries = retries
        if client is None:
            try:
                from openai import OpenAI
            except ImportError:  # pragma: no cover - depends on the install
                raise ComposeError("the llm composer needs the openai package: pip install openai") from None
            client = OpenAI(base_url=base_url, api_key=api_key or "EMPTY", timeout=timeout_s, max_retries=1)
        self.client = client

    def buckets(self) -> tuple[str, ...]:
        return self._examples.buckets()

    def _seed_examples(self, bucket: str, rng: random.Random) -> tuple[list[OpSpec], list[str]]:
        pool = self._examples.hf_ops if bucket == "transformers" else self._examples.torch_ops
        k = 1 if bucket == "transformers" else int(bucket)
        specs: list[OpSpec] = []
        texts: list[str] = []
        for spec in rng.sample(pool, min(len(pool), 4 * k)):
            if len(specs) == k:
                break
            try:
                prog, _ = self._examples._start(spec, rng)
            except ComposeError:
                continue
            specs.append(spec)
            texts.append(f"Operator {len(specs)}: {spec.name} ({spec.category})\n```python\n{prog.render()}```")
        if len(specs) < k:
            raise ComposeError(f"could not sample {k} seed operators")
        return specs, texts

    def compose(self, bucket: str, seed: int) -> Candidate:
        if bucket not in BUCKETS:
            raise ComposeError(f"unknown bucket {bucket!r}")
        rng = random.Random(seed)
        specs, texts = self._seed_examples(bucket, rng)
        messages: list[dict[str, str]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": PROMPT.format(k=len(specs), examples="\n\n".join(texts))}]
        last = ""
        for attempt in range(self.retries):
            try:
                resp = self.client.chat.completions.create(model=self.model, messages=messages,
                                                           temperature=self.temperature, max_tokens=self.max_tokens,
                                                           seed=seed % (2 ** 31))
                text = resp.choices[0].message.content or ""
            except Exception as e:  # noqa: BLE001 - API/network errors become a compose failure
                last = f"chat request failed: {type(e).__name__}: {e}"
                continue
            try:
                code = extract_code(text)
                validate_source(code)
            except (ComposeError, TaskError) as e:
                last = str(e)
                messages += [{"role": "assistant", "content": text},
                             {"role": "user", "content": f"That reply is not usable: {e}. Send the complete file "
                                                         "again in one ```python code block."}]
                continue
            extra: dict[str, Any] = {"model": self.model, "attempts": attempt + 1}
            if self.profile == "gpu":  # free-form code cannot be rescaled; the estimate is recorded
                from ..gpucost import estimate_ms

                extra["est_gpu_ms"] = estimate_ms(code)
            return Candidate(source=code, bucket=bucket, ops=[s.name for s in specs],
                             categories=[s.category for s in specs], composer=self.name, seed=seed, extra=extra)
        raise ComposeError(f"llm composer: no usable task after {self.retries} tries ({last[:300]})")
