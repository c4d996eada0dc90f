"""Parsing Nsight Compute's CSV and compute-sanitizer's logs, the rooflines and the GPU-only
messages (CPU).  The fixtures in tests/fixtures/gputools were recorded on the H200 (see their
README and docs/benchmarks/gputools-h200.md); one older-format log is still hand-written."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from cuda_agent.cli import main
from cuda_agent.sandbox import ncu, roofline, sanitizer
from cuda_agent.sandbox.results import CheckResult, KernelProfile, NcuReport

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "gputools"
EXAMPLES = ROOT / "examples"
# the H200's peaks as the recorded run read them from the device's properties
H200 = roofline.Peaks(4.814304e12, 66.90816e12, "device properties")


def _sources(name: str) -> str:
    d = EXAMPLES / name
    return "\n".join(p.read_text() for p in sorted(d.rglob("*")) if p.is_file() and p.suffix in (".py", ".cu", ".cpp"))


def _csv(case: str) -> str:
    return (FIX / f"ncu_{case}_h200.csv").read_text()


@pytest.fixture(scope="module")
def l3_8() -> list[KernelProfile]:
    return ncu.profiles(_csv("l3_8"), _sources("l3_8_resnet_basic_block"), H200)


# --- ncu ---------------------------------------------------------------------------------------

def test_unit_scale_and_numbers():
    # ncu 2025.3 prints short units under --print-units base: ns, byte, inst, %, register/thread
    assert ncu.unit_scale("ns") == 1e-9 and ncu.unit_scale("nsecond") == 1e-9 and ncu.unit_scale("usecond") == 1e-6
    assert ncu.unit_scale("msecond") == 1e-3 and ncu.unit_scale("second") == 1.0
    assert ncu.unit_scale("Kbyte") == 1e3 and ncu.unit_scale("Mbyte/second") == 1e6 and ncu.unit_scale("byte") == 1
    assert ncu.unit_scale("%") == 1 and ncu.unit_scale("register/thread") == 1 and ncu.unit_scale("ms") == 1e-3
    assert ncu.unit_scale("byte/block") == 1 and ncu.unit_scale("inst") == 1
    assert ncu.number("134,348,800") == 134348800 and ncu.number("n/a") is None and ncu.number("91.40") == 91.4


def test_base_name_of_demangled_kernels():
    assert ncu.base_name("row_scale_vec4(const float *, const float4 *, float4 *, long, long)") == "row_scale_vec4"
    assert ncu.base_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                         "at::detail::Array<char *, 1>>(int, at::native::FillFunctor<float>)") == \
        "vectorized_elementwise_kernel"
    assert ncu.base_name("sm90_xmma_gemm_f32f32_tn_n_kernel__5x_cublas") == "sm90_xmma_gemm_f32f32_tn_n_kernel__5x_cublas"


def test_parse_raw_csv_rows_units_and_prof_lines():
    text = _csv("l1_12")
    assert text.startswith("==WARNING==") and "==PROF== Connected" in text  # ncu's own lines are not rows
    rows = ncu.parse_raw_csv(text)
    assert len(rows) == 1 and len(rows[0]) == 756  # the raw page: every metric of the sections asked for
    assert rows[0]["gpu__time_duration.sum"] == ("32,032", "ns")
    assert rows[0]["Kernel Name"][0] == "row_scale_vec4(const float *, const float4 *, float4 *, long, long)"
    assert [len(ncu.parse_raw_csv(_csv(c))) for c in ("l2_14", "l3_8")] == [2, 8]


def test_every_metric_of_the_table_is_in_the_recorded_csv():
    """The names the table reads exist on the H200 with ncu 2025.3 (the DRAM % under its
    gpu__ name; dram__throughput is absent there)."""
    row = ncu.parse_raw_csv(_csv("l1_12"))[0]
    need = [ncu.TIME, ncu.OCCUPANCY, ncu.THEORETICAL, ncu.L2, ncu.L1, ncu.SM, "launch__registers_per_thread",
            "launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic", "launch__grid_size",
            "launch__block_size", *ncu.METRICS]
    assert [m for m in need if m not in row] == []
    assert [m for m in ncu.DRAM if m in row] == ["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]
    assert any(ncu.TENSOR.match(k) for k in row)
    assert len([k for k in row if ncu.STALL.match(k)]) == 19


def test_kernel_profile_of_l1_12():
    (k,) = ncu.profiles(_csv("l1_12"), _sources("l1_12_diag_matmul"), H200)
    assert k.name == "row_scale_vec4" and k.yours
    assert k.duration_us == pytest.approx(32.032) and k.grid == "1056" and k.block == "256"
    assert k.dram_pct == pytest.approx(72.01) and k.l2_pct == pytest.approx(85.48) and k.sm_pct == pytest.approx(18.15)
    assert k.occupancy_pct == pytest.approx(91.45) and k.theoretical_occupancy_pct == 100
    assert k.registers == 20 and k.smem_bytes == 0 and k.tensor_pct == 0
    assert k.stalls == [["long_scoreboard", 66.83], ["wait", 2.94], ["short_scoreboard", 0.86]]
    assert all(r != "selected" for r, _ in k.stalls)  # 'selected' is issuing, not a stall
    assert k.dram_bytes == 110_774_272 and k.flops == 16_777_216  # one FMUL per element
    # 110.8 MB in 32.0 us = 3.46 TB/s of 4.81 TB/s: memory-bound at 72%, as ncu's own DRAM % says
    assert k.roofline.bound == "memory" and k.roofline.pct_of_roof == pytest.approx(
        100 * (110_774_272 / 4.814304e12) / 32.032e-6, abs=0.01)
    assert ncu.hint(k).startswith("DRAM at 72% of peak: memory-bound near the roof")


def test_kernel_profiles_of_l3_8_mix_cudnn_and_ours(l3_8):
    names = [k.name for k in l3_8]
    conv = "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize256x64x8_stage3_warpsize2x2x1_" \
           "g1_ffma_aligna4_alignc4_execute_kernel__5x_cudnn"
    assert names == [conv, "channel_stats", "bn_relu", conv, "channel_stats", conv, "channel_stats", "bn_add_relu"]
    assert [k.yours for k in l3_8] == [False, True, True, False, True, False, True, True]
    big = max((k for k in l3_8 if k.name == conv), key=lambda k: k.duration_us)
    assert big.duration_us == pytest.approx(944.128) and big.registers == 255 and big.smem_bytes == 33_280
    assert big.theoretical_occupancy_pct == pytest.approx(12.5)  # 255 registers cap the resident warps
    assert big.roofline.bound == "compute" and big.roofline.pct_of_roof == pytest.approx(58.67, abs=0.01)
    assert "compute-bound" in ncu.hint(big)
    assert ncu.hint(l3_8[1]).startswith("neither memory (27%) nor compute (44%) is busy: latency-bound")


def test_no_roofline_where_tensor_cores_ran_but_constant_moves_do_not_count(l3_8):
    """channel_stats has no MMA, yet its tensor pipe reads 1.04% (HFMA2 constant moves issue there):
    it keeps its roofline.  The same row with the pipe busy as in a tensor-core GEMM has none, since
    MMA FLOPs are not among the counted instructions."""
    stats = l3_8[1]
    assert stats.name == "channel_stats" and stats.tensor_pct == pytest.approx(1.04)
    assert stats.roofline is not None and stats.roofline.bound == "memory"
    row = ncu.parse_raw_csv(_csv("l3_8"))[1]
    row["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"] = ("61.77", "%")
    text = io.StringIO()
    w = csv.writer(text, quoting=csv.QUOTE_ALL)
    w.writerow(list(row))
    w.writerow([u for _, u in row.values()])
    w.writerow([v for v, _ in row.values()])
    (mma,) = ncu.profiles(text.getvalue(), "channel_stats", H200)
    assert mma.tensor_pct == pytest.approx(61.77) and mma.roofline is None


RECORDED_TABLE_L3_8 = """\
ncu: 8 kernel launch(es) in one forward (first input set), 1825.6 us on the GPU; yours: 3 kernel(s), 684.2 us
 # kernel                     n      us  occ%/th  dram%  L2%  SM%  TC%  regs  smem_B  roof        top stalls
 1 sm80_xmma_fprop_implicit_g  3  1141.4   12/12       5    9   82    0   255   33280  com 59%     not_selected 0.76, dispatch_stall 0.12
 2 channel_stats*              3   308.1   68/75      26   33   44    1    40     512  -           long_scoreboard 14.8, wait 3.28
 3 bn_add_relu*                1   240.0   69/75      32   41   79    0    34       0  mem 32%     long_scoreboard 4.52, wait 3.35
 4 bn_relu*                    1   136.2   90/100     35   43   81    1    32       0  mem 35%     long_scoreboard 6.95, not_selected 3.29"""


def test_table_of_the_recorded_runs(l3_8):
    """The tables printed on the H200 come back from the recorded CSVs, except the roof of
    channel_stats, which the recorded run left out (tensor-pipe threshold 1%, now 5%)."""
    t = ncu.table(NcuReport(kernels=l3_8))
    want = RECORDED_TABLE_L3_8.replace("  -           long_scoreboard 14.8", "  mem 26%     long_scoreboard 14.8")
    assert t.startswith(want + "\n"), t
    assert "hint channel_stats: neither memory (26%) nor compute (44%) is busy: latency-bound" in t
    assert len(t) / 2 < 1500
    one = ncu.table(NcuReport(kernels=ncu.profiles(_csv("l1_12"), _sources("l1_12_diag_matmul"), H200)),
                    forward_ms=0.0368)
    assert one.splitlines()[0] == ("ncu: 1 kernel launch(es) in one forward (first input set), 32.0 us on the GPU "
                                   "of 36.8 us timed; yours: 1 kernel(s), 32.0 us")
    assert " 1 row_scale_vec4*             1    32.0   91/100     72   85   18    0    20       0  mem 72%     " \
           "long_scoreboard 66.83, wait 2.94" in one
    two = ncu.table(NcuReport(kernels=ncu.profiles(_csv("l2_14"), _sources("l2_14_gemm_divide_sum_scaling"), H200)))
    assert "yours: 2 kernel(s), 77.2 us" in two and "hint row_dot: DRAM at 62% of peak" in two


def test_hints_for_occupancy_limits():
    tight = KernelProfile("k", True, 10.0, "4096", "512", 20.0, 25.0, 10.0, 5.0, 5.0, 20.0, None, 128, 49152,
                          [["barrier", 4.0]])
    assert ncu.hint(tight).startswith("theoretical occupancy 25% (128 registers/thread, 49152 B shared/block)")
    assert "top stall barrier (waiting at __syncthreads)" in ncu.hint(tight)
    few = KernelProfile("k", True, 10.0, "1", "256", 12.0, 100.0, 3.0, 4.0, 1.0, 2.0, None, 20, 0,
                        [["long_scoreboard", 9.0]])
    assert ncu.hint(few).startswith("achieved occupancy 12%: too few warps (grid 1 x block 256)")


def _many_kernels(ncu_text: str, n: int) -> str:
    """The recorded rows repeated under ``n`` distinct kernel names (a larger forward than L3/8)."""
    lines = [ln for ln in ncu_text.splitlines() if ln.startswith('"')]
    header, units, *rows = list(csv.reader(lines))
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL)
    w.writerow(header)
    w.writerow(units)
    name = header.index("Kernel Name")
    for i in range(n):
        r = list(rows[i % len(rows)])
        r[0], r[name] = str(i), f"void fused_conv_bn_relu_variant_{i}<128, 64, true>(const float *, float *, int)"
        w.writerow(r)
    return out.getvalue()


def test_profile_output_stays_within_1500_tokens():
    """The agent reads `cuda-agent profile --ncu` as tool output: the table stays under 1,500 tokens
    whatever the number of kernels.  No tokenizer here: counted as characters / 2, since for this
    text characters / 3 is not a safe bound (the recorded L1/12 output: 1,396 characters, 460
    GPT-style pre-tokens, each at least one token; docs/benchmarks/gputools-h200.md)."""
    for n in (1, 12, 64):
        rep = NcuReport(kernels=ncu.profiles(_many_kernels(_csv("l3_8"), n), "fused_conv_bn_relu_variant_3", H200))
        t = ncu.table(rep, forward_ms=1.2)
        assert len(t) / 2 < 1500, (n, len(t))
        assert f"{n} kernel launch(es)" in t
    assert "more kernel(s)" in t


def test_report_round_trips_through_json(l3_8):
    r = CheckResult("t", "sha", "cuda", "strict", ncu=NcuReport(kernels=l3_8))
    back = CheckResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r and back.ncu.kernels[0].roofline.bound == "compute"


def test_no_kernels_and_errors_read_clearly():
    assert ncu.profiles("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission", "") == []
    assert ncu.table(NcuReport(error="ncu (Nsight Compute) is not on the PATH")).startswith("ncu: ncu (Nsight")


def test_command_uses_ncu_sections_and_keeps_clocks():
    cmd = ncu.command("/usr/local/cuda/bin/ncu", Path("/job/ncu.csv"))
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--profile-from-start") + 1] == "off"
    assert cmd[cmd.index("--page") + 1] == "raw" and "--csv" in cmd and cmd[-1] == "/job/ncu.csv"
    assert {cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"} == set(ncu.SECTIONS)
    assert "dram__bytes_read.sum" in cmd[cmd.index("--metrics") + 1]


def test_admin_only_counters_from_driver_params(tmp_path):
    p = tmp_path / "params"
    p.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\nEnableMSI: 1\n")
    assert ncu.counters_admin_only(p)
    p.write_text("RmProfilingAdminOnly: 0\n")
    assert not ncu.counters_admin_only(p)
    assert not ncu.counters_admin_only(tmp_path / "missing")


# --- compute-sanitizer -------------------------------------------------------------------------

def test_memcheck_out_of_bounds_with_file_line():
    log = (FIX / "memcheck_planted_oob_h200.log").read_text()
    fs, errors = sanitizer.parse("memcheck", log, {"oob.cu", "oob_binding.cpp", "model_new.py"})
    assert errors == 3 and len(fs) == 3  # the read and the two API calls that failed after it
    oob = fs[0]
    assert oob.kind == "Invalid __global__ read of size 4 bytes" and oob.kernel == "double_peek"
    assert oob.where == "kernels/oob.cu:10" and oob.count == 1  # the last thread reads x[n]
    assert oob.detail == ("and is 1 bytes after the nearest allocation at 0x7fd80a800000 of size 4,000,000 bytes")
    assert [f.kind[:60] for f in fs[1:]] == [
        'Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaFree.'[:60],
        'Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to '
        'cudaGetLastError.'[:60]]
    text = sanitizer.describe([sanitizer.SanitizerReport("memcheck", True, errors, fs, seconds=5.0)])
    assert text.splitlines()[:2] == [
        "memcheck  3 error(s)  (5 s)",
        "  Invalid __global__ read of size 4 bytes in double_peek at kernels/oob.cu:10; and is 1 bytes after "
        "the nearest allocation at 0x7fd80a800000 of size 4,000,000 bytes"]
    assert "process didn't terminate" not in text and "Target application" not in text  # exit status, not findings


def test_memcheck_merges_the_same_access_by_several_threads():
    """Two reports of one access (the recorded one, its thread changed) are one finding, x2."""
    log = (FIX / "memcheck_planted_oob_h200.log").read_text().splitlines()
    first = log[1:log.index("========= ")]
    again = [ln.replace("by thread (63,0,0)", "by thread (62,0,0)") for ln in first]
    fs, _ = sanitizer.parse("memcheck", "\n".join([log[0], *first, "========= ", *again, *log[len(first) + 1:]]),
                            {"oob.cu"})
    assert fs[0].where == "kernels/oob.cu:10" and fs[0].count == 2
    assert "at kernels/oob.cu:10 (x2)" in sanitizer.describe([sanitizer.SanitizerReport("memcheck", True, 4, fs)])


def test_racecheck_hazard_between_two_lines():
    fs, errors = sanitizer.parse("racecheck", (FIX / "racecheck_planted_race_h200.log").read_text(), {"race.cu"})
    assert errors == 1 and len(fs) == 1
    f = fs[0]
    assert f.kind == "Race reported between Write access" and f.kernel == "row_sum_racy"
    assert f.where == "kernels/race.cu:14" and f.detail == "and Read access at kernels/race.cu:16 [2097152 hazards]"
    src = (ROOT / "tests" / "gpu" / "planted" / "race" / "solution" / "kernels" / "race.cu").read_text().splitlines()
    assert "sh[t] = v;" in src[13] and "sh[t + s]" in src[15]  # the lines the recorded log names


def test_older_sanitizer_format_and_no_line_info():
    fs, errors = sanitizer.parse("memcheck", (FIX / "memcheck_old_format_handwritten.log").read_text())
    assert errors == 1 and fs[0].where == "my_helper.cuh:75" and fs[0].kernel == "vector_projection"
    fs, _ = sanitizer.parse("memcheck", "========= Invalid __global__ write of size 4 bytes\n"
                                        "=========     at k2(float *)+0x90\n========= ERROR SUMMARY: 1 error\n")
    assert fs[0].kernel == "k2" and fs[0].where == "k2+0x90"


def test_clean_run_and_a_tool_that_did_not_run():
    fs, errors = sanitizer.parse("memcheck", (FIX / "memcheck_clean_l1_12_h200.log").read_text())
    assert fs == [] and errors == 0
    assert sanitizer.parse("initcheck", "")[1] is None
    text = sanitizer.describe([sanitizer.SanitizerReport("memcheck", True, 0, seconds=3.0),
                               sanitizer.SanitizerReport("initcheck", error="load: ImportError: x")])
    assert "memcheck  0 error(s) - clean  (3 s)" in text and "initcheck could not run: load: ImportError" in text
    assert sanitizer.run("nosuchtool", Path("/nonexistent/job.json"), 1).error.startswith("unknown tool")


def test_sanitizer_command_and_environment():
    cmd = sanitizer.command("/usr/local/cuda/bin/compute-sanitizer", "racecheck", Path("/job/r.log"))
    assert cmd[1:3] == ["--tool", "racecheck"] and cmd[cmd.index("--log-file") + 1] == "/job/r.log"
    assert sanitizer.ENV["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"


# --- rooflines ---------------------------------------------------------------------------------

def test_roofline_bound_and_percent():
    mem = roofline.roofline("forward", 0.075, 3 * 64 * 2**20, 2 * 16 * 2**20, H200)
    assert mem.bound == "memory" and mem.pct_of_roof == pytest.approx(100 * 3 * 64 * 2**20 / H200.bytes_s / 75e-6, rel=1e-3)
    gemm = roofline.roofline("forward", 2.8, 3 * 4096 * 4096 * 4, 2 * 4096**3, H200)
    assert gemm.bound == "compute" and gemm.pct_of_roof == pytest.approx(100 * 2 * 4096**3 / H200.flops_s / 2.8e-3, rel=1e-3)
    line = roofline.describe(gemm)
    assert "of the compute roof" in line and "FLOP/B (ridge 13.9)" in line and "device properties" in line
    tc = roofline.roofline("forward", 0.5, 3 * 4096 * 4096 * 2, 2 * 4096**3, H200)  # an FP16 GEMM on tensor cores
    assert tc.pct_of_roof > 100 and "above the FP32 CUDA-core peak" in roofline.describe(tc)


def test_fp32_lanes_by_compute_capability():
    assert roofline.fp32_lanes(9, 0) == 128 and roofline.fp32_lanes(8, 0) == 64 and roofline.fp32_lanes(8, 6) == 128
    assert roofline.fp32_lanes(3, 5) is None


def test_cpu_roofline_against_measured_bandwidth():
    import torch

    pk = roofline.cpu_peaks()
    assert pk.source == "measured copy" and pk.flops_s is None and 1e8 < pk.bytes_s < 1e13
    model = torch.nn.Linear(256, 128)
    nbytes, flops = roofline.forward_work(model, [torch.randn(64, 256)])
    assert nbytes == 4 * (64 * 256 + 256 * 128 + 128 + 64 * 128) and flops == 2 * 64 * 256 * 128
    r = roofline.forward_roofline(model, [torch.randn(64, 256)], 0.5, "cpu")
    assert r.bound == "memory" and r.peak_source == "measured copy" and r.pct_of_roof > 0
    assert roofline.forward_roofline(object(), [], 1.0, "cpu") is None  # feedback never raises


# --- the CLI on the CPU backend ------------------------------------------------------------------

@pytest.fixture(scope="module")
def cpu_workspace(tmp_path_factory, example_task):
    from cuda_agent.sandbox.workspace import create_workspace

    d = tmp_path_factory.mktemp("ws") / "w"
    create_workspace(example_task, d, "cpu")
    return d


@pytest.mark.parametrize("args,what", [(["sanitize"], "sanitize is GPU-only"),
                                       (["profile", "--ncu"], "profile --ncu is GPU-only"),
                                       (["sanitize", "--tool", "racecheck", "--device", "cpu"], "GPU-only")])
def test_gpu_only_commands_are_usage_errors_on_cpu(cpu_workspace, args, what):
    r = CliRunner().invoke(main, [args[0], str(cpu_workspace), *args[1:]])
    assert r.exit_code == 2 and what in r.output and "Traceback" not in r.output


def test_check_sanitize_on_cpu_is_a_usage_error(example_task, example_dir):
    r = CliRunner().invoke(main, ["check", str(example_dir / "task.py"), str(example_dir / "solution"),
                                  "--device", "cpu", "--sanitize"])
    assert r.exit_code == 2 and "--sanitize is GPU-only" in r.output


def test_skill_md_shows_recorded_output():
    """The worked example of SKILL.md's performance block and the README's excerpt are lines of
    the `profile --ncu` output recorded on the H200, in order; the sanitizer line is recorded too."""
    from cuda_agent.sandbox.workspace import skill_text

    raw = ROOT / "docs" / "benchmarks" / "raw" / "gputools-h200"
    rec = (raw / "profile-ncu-l1_12.txt").read_text().splitlines()
    text = skill_text("cuda")
    block = text[text.index("$ cuda-agent profile --ncu"):].split("```")[0].splitlines()[1:]
    shown = [ln for ln in block if ln != "..."]
    assert len(shown) >= 6 and [rec.index(ln) for ln in shown] == sorted(rec.index(ln) for ln in shown)
    finding = next(ln for ln in text.splitlines() if ln.startswith("`Invalid __global__ read"))
    assert finding.rstrip(".").strip("`") in (raw / "sanitize-planted-oob.txt").read_text()
    readme = (ROOT / "README.md").read_text()
    excerpt = readme[readme.index("```text\nroofline  76%") + 8:].split("```")[0].splitlines()
    assert excerpt and all(ln in rec for ln in excerpt)
