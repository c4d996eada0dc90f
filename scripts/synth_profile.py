"""Where the synthesis time goes, per task: process start + torch import, compose, decontamination,
and each filter phase (load, first eager run, non-trivial + determinism runs, timing, torch.compile
split into dynamo tracing / AOT / inductor codegen / C++ build (``compile_file``: g++ runs)), on candidates composed exactly as ``run_synth`` does.

    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) python scripts/synth_profile.py N SEED [--sizes cpu]

Runs everything in this one process on one thread (the way one evaluation worker runs), prints a
table of per-phase seconds (mean and total) as JSON.  No filter is changed or skipped.
"""

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path


def main() -> None:
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    import_torch_s = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, torch._inductor.codecache, torch._dynamo"], check=True)
    import_inductor_s = time.perf_counter() - t

    import torch

    torch.set_num_threads(1)
    import torch._inductor.config as ic

    ic.compile_threads = 1
    from cuda_agent.synth.compose import get_composer, parse_mix, quotas
    from cuda_agent.synth.crawl import seed_library
    from cuda_agent.synth.decontam import ReferenceIndex
    from cuda_agent.synth.evaluate import FilterConfig
    from cuda_agent.synth import evaluate as ev
    from cuda_agent.synth.pipeline import DEFAULT_KERNELBENCH, _derive_seed
    from cuda_agent.synth.program import ComposeError

    t = time.perf_counter()
    lib = seed_library()
    lib_s = time.perf_counter() - t
    t = time.perf_counter()
    index = ReferenceIndex.kernelbench(os.environ.get("CUDA_AGENT_KERNELBENCH", DEFAULT_KERNELBENCH))
    index_s = time.perf_counter() - t
    comp = get_composer("programmatic", library=lib, profile="cpu")
    q = quotas(n, parse_mix(None))
    cfg = FilterConfig(device="cpu", compile=True)
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"synth_profile_{os.getpid()}"
    workdir.mkdir(exist_ok=True)

    from torch._dynamo.utils import compilation_time_metrics as ctm

    keys = ("_compile.compile_inner", "bytecode_tracing", "create_aot_dispatcher_function", "GraphLowering.codegen",
            "compile_file")
    split = {k: [0, 0.0] for k in keys}
    tot: dict[str, float] = defaultdict(float)
    codes: dict[str, int] = defaultdict(int)
    evaluated = 0
    for b, k in q.items():
        j = 0
        while k > 0 and j < 20 * k:
            t = time.perf_counter()
            try:
                cand = comp.compose(b, _derive_seed(seed, b, j))
            except ComposeError:
                tot["compose_fail"] += time.perf_counter() - t
                j += 1
                continue
            tot["compose"] += time.perf_counter() - t
            j += 1
            t = time.perf_counter()
            index.max_similarity(cand.source)
            tot["decontam"] += time.perf_counter() - t
            t0 = time.perf_counter()
            v = ev.safe_run_filters(cand.source, cfg, workdir)
            evaluated += 1
            codes[v.code or "accepted"] += 1
            for p, sec in v.phase_s.items():
                tot[f"filter.{p}"] += sec
            tot["filter.total"] += time.perf_counter() - t0
            # run_filters resets dynamo (and with it these metrics) before each compile: add them up here
            for k in keys:
                split[k][0] += len(ctm.get(k, []))
                split[k][1] += sum(ctm.get(k, []))
            if v.ok:
                k -= 1
    compile_split = {k: {"calls": c, "total_s": round(t, 2)} for k, (c, t) in split.items()}
    print(json.dumps({"import_torch_s": round(import_torch_s, 2), "import_inductor_s": round(import_inductor_s, 2),
                      "seed_library_s": round(lib_s, 2), "kernelbench_index_s": round(index_s, 2),
                      "evaluated": evaluated, "verdicts": codes,
                      "total_s": {k: round(v, 2) for k, v in sorted(tot.items())},
                      "per_evaluated_s": {k: round(v / max(1, evaluated), 3) for k, v in sorted(tot.items())},
                      "compile_split": compile_split},
                     indent=1))


if __name__ == "__main__":
    main()
