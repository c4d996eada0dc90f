#!/usr/bin/env bash
# Everything the H200 session runs, in one call: GPU tests, benchmarks, case studies.
# Usage (device machine, repo root): bash scripts/gpu_run.sh OUTDIR
set -u
OUT=${1:-/tmp/gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
export CUDA_AGENT_KERNELBENCH=${CUDA_AGENT_KERNELBENCH:-$PWD/.devdata/kernelbench.jsonl}
# the in-workspace commands are shell commands: give the agent's shell a `cuda-agent`
mkdir -p /tmp/ca-bin && printf '#!/bin/sh\nexec python3 -m cuda_agent.cli "$@"\n' > /tmp/ca-bin/cuda-agent && chmod +x /tmp/ca-bin/cuda-agent
export PATH=/tmp/ca-bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.get_device_name())" | tee -a "$OUT/gpu.txt"
stage=${2:-all}
carried_wheels() {  # .whl (and .whl-train: pydantic for KernelBench's evaluator) into /tmp/site, once per machine
  [ -f /tmp/site/.installed ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site $(ls .whl/*.whl .whl-train/*.whl 2>/dev/null) && touch /tmp/site/.installed; }
  export PYTHONPATH=$PYTHONPATH:/tmp/site
}
if [ "$stage" = all ] || [ "$stage" = examples ]; then
  python3 scripts/run_examples.py "$OUT/examples.json" "$CUDA_AGENT_KERNELBENCH" 2>&1 | tee "$OUT/examples.log"
fi
if [ "$stage" = all ] || [ "$stage" = tests ]; then
  timeout "${TESTS_LIMIT:-300}" python3 -m pytest -m gpu tests/gpu -q -p no:cacheprovider -o addopts="" -rs --durations=8 \
    2>&1 | tee "$OUT/pytest-gpu.log" | tail -30
fi
if [ "$stage" = all ] || [ "$stage" = bench ]; then
  python3 scripts/bench_build.py "$OUT/build.json" 2>&1 | tail -12
  python3 scripts/bench_timing.py "$OUT/timing.json" 2>&1 | tail -6
fi
if [ "$stage" = pch ]; then
  # issue 13: cold load_inline builds with and without the precompiled torch/extension.h (CUDA + C++)
  python3 scripts/bench_inline_pch.py "$OUT/pch-cuda.json" --device cuda --rounds "${PCH_ROUNDS:-2}" 2>&1 | tail -12
fi
if [ "$stage" = hardening ]; then
  # issue 3 on the GPU: the adversarial suite (each outcome logged for the report) and the fault suite
  export CUDA_AGENT_ADVERSARIAL_LOG="$OUT/adversarial.jsonl"
  timeout "${HARDENING_LIMIT:-560}" python3 -m pytest -m gpu tests/adversarial tests/faults -q -p no:cacheprovider \
    -o addopts="" -rs 2>&1 | tee "$OUT/pytest-hardening.log" | tail -40
fi
if [ "$stage" = synth ]; then
  # the synthesis filters on the GPU, incl. a real CUDA OOM between two workers retried alone
  timeout "${SYNTH_LIMIT:-300}" python3 -m pytest -m gpu tests/synth -q -p no:cacheprovider -o addopts="" -rs 2>&1 \
    | tee "$OUT/pytest-synth-gpu.log" | tail -15
fi
if [ "$stage" = profile ]; then
  # where a check's time goes: the bundled CUDA example through `cuda-agent check`, per stage
  for i in 1 2 3; do
    s=$(date +%s.%N)
    python3 -m cuda_agent.cli check examples/cuda_axpby/task.py examples/cuda_axpby/solution --json > "$OUT/check-$i.json"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('check', sys.argv[2], 'wall', round($(date +%s.%N)-$s, 2), 's; in check', d['seconds'], 's;', d['phases'], 'correct', d['correct'])" "$OUT/check-$i.json" "$i" | tee -a "$OUT/profile.txt"
  done
fi
if [ "$stage" = eval ]; then
  # `cuda-agent eval` on the GPU: the three bundled case-study solutions as a solutions tree
  # (L1/12, L2/14, L3/8), the paper's metrics and report over those three problems
  S=/tmp/case-solutions; rm -rf "$S"; mkdir -p "$S/L1" "$S/L2" "$S/L3"
  cp -r examples/l1_12_diag_matmul "$S/L1/12"; cp -r examples/l2_14_gemm_divide_sum_scaling "$S/L2/14"
  cp -r examples/l3_8_resnet_basic_block "$S/L3/8"
  python3 -m cuda_agent.cli eval "$S" --out "$OUT/eval" --kernelbench "$CUDA_AGENT_KERNELBENCH" \
    --ids L1/12,L2/14,L3/8 --device cuda --no-progress 2>&1 | tee "$OUT/eval.log" | tail -20
fi
if [ "$stage" = episode ]; then
  # a scripted agent episode on a real KernelBench CUDA task: the policy replays the bundled
  # L1/12 solution through the ten tools and the in-workspace compile/verify/profile commands
  python3 -m cuda_agent.cli solve L1/12 --kernelbench "$CUDA_AGENT_KERNELBENCH" --backend scripted \
    --script examples/l1_12_diag_matmul --device cuda --out "$OUT/episode" 2>&1 | tail -15
fi
if [ "$stage" = load ]; then
  # issue 18: evaluations/min of a mixed batch on GPU 0, verdicts alone vs 8 in flight + CPU
  # stress, an infinite-loop kernel (seconds to its verdict, the next job), SIGKILL of a judge
  # mid-job (processes and GPU memory left); raw numbers in OUT/load/load.json, load.md.
  # LOAD_STAGES=alone,slots LOAD_SLOTS=3: the batch again with 3 slots on GPU 0 (verdicts vs alone)
  # LOAD_CONTENDED_LIMIT=s: the contended stage starts no check after s seconds (it reports what it has);
  # LOAD_ALONE_FROM=f: compare with the alone stage of an earlier call's load.json (a file carried in the tree)
  # and keep the contended rows it has: the contended stage runs only the rest (it resumes over calls)
  timeout "${LOAD_LIMIT:-560}" python3 scripts/bench_load.py "$OUT/load" --n "${LOAD_N:-20}" --single "${LOAD_SINGLE:-0}" \
    --stages "${LOAD_STAGES:-alone,contended,hang,judge}" --limit "${LOAD_ALONE_LIMIT:-300}" \
    ${LOAD_SLOTS:+--slots-per-gpu "$LOAD_SLOTS"} ${LOAD_CONTENDED_LIMIT:+--contended-limit "$LOAD_CONTENDED_LIMIT"} \
    ${LOAD_ALONE_FROM:+--alone-from "$LOAD_ALONE_FROM"} 2>&1 | tee "$OUT/load.log" | tail -20
fi
if [ "$stage" = serve ]; then
  # checks from a process that never touches the GPU: `cuda-agent pool serve` owns GPU 0, and a
  # scripted agent episode (L1/12's bundled solution) sends every check to it with --pool-db
  D=/tmp/pool-serve; rm -rf "$D" /tmp/serve-episode; mkdir -p "$D"
  python3 -m cuda_agent.cli pool serve --db "$D/pool.sqlite" --device cuda --gpus 0 > "$OUT/serve.log" 2>&1 &
  SP=$!
  sleep 3
  CUDA_VISIBLE_DEVICES= python3 -m cuda_agent.cli solve L1/12 --kernelbench "$CUDA_AGENT_KERNELBENCH" --backend scripted \
    --script examples/l1_12_diag_matmul --device cuda --pool-db "$D/pool.sqlite" --out /tmp/serve-episode 2>&1 \
    | tee "$OUT/serve-solve.log" | tail -15
  python3 -m cuda_agent.cli pool results --db "$D/pool.sqlite" 2>&1 | tee "$OUT/serve-results.txt"
  kill -TERM $SP; wait $SP; echo "pool serve exited with status $?" | tee -a "$OUT/serve.log"
fi
if [ "$stage" = gputools ]; then
  # issue 17: ncu and compute-sanitizer through check() (planted out-of-bounds read and race, the
  # three case studies), then the agent's view: `cuda-agent profile --ncu` in an L1/12 workspace. Samples and the raw tool logs (the source of tests/fixtures/gputools) go to OUT.
  G="$OUT/gputools"; mkdir -p "$G"
  export CUDA_AGENT_CACHE=/tmp/ca-gputools-cache CUDA_AGENT_TEST_KEEP_CACHE=1 CUDA_AGENT_GPUTOOLS_OUT="$G"
  export CUDA_AGENT_KEEP_TOOL_LOGS="$G/raw"
  (ncu --version; compute-sanitizer --version; grep RmProfilingAdminOnly /proc/driver/nvidia/params) > "$G/tools.txt" 2>&1
  s=$(date +%s)
  timeout "${GPUTOOLS_LIMIT:-270}" python3 -m pytest -m gpu tests/gpu/test_gputools_gpu.py -q -p no:cacheprovider \
    -o addopts="" -rs 2>&1 | tee "$G/pytest-gputools.log" | tail -15
  echo "pytest: $(( $(date +%s) - s )) s" | tee -a "$G/tools.txt"
  W=/tmp/ca-gputools-ws; rm -rf "$W"
  python3 -m cuda_agent.cli workspace L1/12 "$W/l1_12" --device cuda > /dev/null && \
    cp -r examples/l1_12_diag_matmul/model_new.py examples/l1_12_diag_matmul/kernels "$W/l1_12/"
  s=$(date +%s)
  (cd "$W/l1_12" && timeout 150 cuda-agent profile --ncu) 2>&1 | tee "$G/profile-ncu-l1_12.txt" | tail -20
  echo "cli: $(( $(date +%s) - s )) s" | tee -a "$G/tools.txt"
fi
if [ "$stage" = kb ]; then
  # issue 13: single-file (load_inline/Triton/CuPy) solutions; KernelBench's own evaluator beside ours.
  # KernelBench's evaluator needs pydantic (carried as wheels in .whl-train) and its tree (.devdata/kb_upstream).
  carried_wheels
  export KB_UPSTREAM=$PWD/.devdata/kb_upstream CUDA_AGENT_CACHE=/tmp/ca-kb-cache
  K="$OUT/kb"; mkdir -p "$K"
  # load_inline figures: KernelBench's own add example, a cold check then warm ones (its evaluator ~50 s)
  P=$KB_UPSTREAM/kernelbench/prompts
  # KB_FIGURES=0: the agreement table alone (the three add checks take ~95 s)
  [ "${KB_FIGURES:-1}" = 1 ] && for i in 1 2 3; do
    s=$(date +%s.%N)
    python3 -m cuda_agent.cli check "$P/model_ex_add.py" "$P/model_new_ex_add.py" --rules kernelbench --no-timing --json \
      > "$K/add-$i.json" 2>> "$K/add.err"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('check', sys.argv[2], 'wall', round($(date +%s.%N)-$s, 2), 's; in check', d['seconds'], d['phases'], 'correct', d['correct'], d['extensions'], d['error'])" "$K/add-$i.json" "$i" | tee -a "$K/load_inline.txt"
  done
  timeout "${KB_LIMIT:-420}" python3 scripts/kb_agreement.py --out "$K/agreement" --workers "${KB_WORKERS:-6}" \
    --upstream "$KB_UPSTREAM" --kernelbench "$PWD/.devdata/kernelbench.jsonl" 2>&1 | tee "$K/agreement.log" | tail -60
  tar czf "$OUT/kb.tgz" -C "$OUT" kb
fi
if [ "$stage" = kbsome ]; then
  # a subset of the agreement benchmark (after fixes): KB_ONLY="case ids"
  carried_wheels
  export KB_UPSTREAM=$PWD/.devdata/kb_upstream CUDA_AGENT_CACHE=/tmp/ca-kb-cache
  timeout "${KB_LIMIT:-200}" python3 scripts/kb_agreement.py --out "$OUT/kbsome" --workers 4 --only $KB_ONLY \
    --upstream "$KB_UPSTREAM" --kernelbench "$PWD/.devdata/kernelbench.jsonl" 2>&1 | tee "$OUT/kbsome.log" | tail -30
  tar czf "$OUT/kbsome.tgz" -C "$OUT" kbsome && rm -rf "$OUT/kbsome"
fi
