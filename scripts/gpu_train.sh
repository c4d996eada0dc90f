#!/usr/bin/env bash
# tests/train on the device machine (H200 image: torch 2.11 + CUDA 13, no verl, no ray).
# Carry .whl (the pruned ray wheel and its missing needs, docs/pool.md) and .whl-train (verl and
# the rest of its closure the image lacks, built by the lines below), and .devdata.
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
#     -d .whl-train verl==0.9.1 hydra-core==1.3.8 omegaconf==2.3.1 codetiming tensordict==0.10.0 \
#     torchdata datasets dill multiprocess pylatexenc cachetools uvicorn fastapi starlette \
#     pydantic==2.13.4 pydantic_core==2.46.4 annotated-types typing-inspection opentelemetry-api \
#     importlib_metadata lazy-importer orjson pyvers annotated-doc
#   pip wheel --no-deps -w .whl-train antlr4-python3-runtime==4.9.3     # sdist only: build it here
# (wandb is left out: 20 MB, and verl imports it only when the wandb logger is on.)
# Usage (device machine, repo root): bash scripts/gpu_train.sh OUTDIR [tests|chain]
#   tests: pytest tests/train (CPU tests + the gpu test), ~2.5 min
#   chain: `cuda-agent train chain --preset tiny` (warm start + stages 1-4 on verl, hf rollout,
#          checks on this GPU); its summary, logs, metrics and plots go to OUTDIR/chain. The run
#          directory is .train-run/chain in the checkout (git-ignored: checkpoints are too big to
#          come back, and a warm machine keeps it), so the same command again continues a chain
#          cut by CHAIN_LIMIT (s, default 440) from the first stage without output. CHAIN_STAGES
#          (default 1,2,3,4) splits a chain over calls that each end after a whole stage; CHAIN_PRESET
#          (default tiny) picks another preset, in .train-run/chain-<preset>.
set -u
OUT=${1:-/tmp/train-out}; MODE=${2:-tests}; mkdir -p "$OUT"
# a warm machine keeps /tmp/site from the previous call: install once
[ -f /tmp/site/.installed ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl .whl-train/*.whl && touch /tmp/site/.installed; } || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
export CUDA_AGENT_KERNELBENCH=${CUDA_AGENT_KERNELBENCH:-$PWD/.devdata/kernelbench.jsonl}
# the agent's in-workspace commands are shell commands: give its shell a `cuda-agent`
mkdir -p /tmp/ca-bin && printf '#!/bin/sh\nexec python3 -m cuda_agent.cli "$@"\n' > /tmp/ca-bin/cuda-agent && chmod +x /tmp/ca-bin/cuda-agent
export PATH=/tmp/ca-bin:$PATH
python3 -c "import verl, ray, transformers, pandas, pyarrow, torch; print('verl', verl.__version__, 'ray', ray.__version__, 'transformers', transformers.__version__, 'pandas', pandas.__version__, 'pyarrow', pyarrow.__version__, 'torch', torch.__version__)" | tee "$OUT/versions.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/versions.txt"
if [ "$MODE" = chain ]; then
  # HF_BENCH=1: first the hf rollout's generation speed alone (scripts/bench_hf_rollout.py, ~1 min)
  if [ "${HF_BENCH:-0}" = 1 ]; then
    for flag in "" --cudnn-sdp; do
      timeout 120 python3 scripts/bench_hf_rollout.py "$OUT/hf-rollout$flag.json" --new 64 $flag 2>&1 \
        | grep -v -i "warn\|it/s" | tee -a "$OUT/hf-rollout.log"
    done
  fi
  T0=$(date +%s)
  RUN=.train-run/chain${CHAIN_PRESET:+-$CHAIN_PRESET}  # CHAIN_PRESET=small: the 0.6B model (docs/training.md)
  timeout -k 10 "$(( ${CHAIN_LIMIT:-440} + 30 ))" python3 -m cuda_agent.cli train chain --preset "${CHAIN_PRESET:-tiny}" --out "$RUN" \
    --device cuda --rollout hf --time-limit "${CHAIN_LIMIT:-440}" --stages "${CHAIN_STAGES:-1,2,3,4}" --copy-to "$OUT/chain" 2>&1 | tee "$OUT/chain.log" | grep -E "^(==|warm|summary)"
  echo "chain: exit ${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s" | tee -a "$OUT/chain.log"
  # after a timeout the copy in the chain's `finally` may not have run: copy what is there
  python3 -c "from pathlib import Path; from cuda_agent.train.chain import copy_plots; copy_plots(Path('$RUN'), Path('$OUT/chain'))"
  # only a few files come back from the device: the whole copy as one archive
  tar czf "$OUT/chain.tgz" -C "$OUT" chain && rm -rf "$OUT/chain"
  exit 0
fi
timeout "${TRAIN_LIMIT:-500}" python3 -m pytest tests/train -q -p no:cacheprovider -o addopts="" -rs --durations=6 \
  -W ignore::DeprecationWarning -W ignore::UserWarning 2>&1 | tee "$OUT/pytest-train-gpu.log" | tail -30
