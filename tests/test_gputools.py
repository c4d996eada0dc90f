"""Parsing Nsight Compute's CSV and compute-sanitizer's logs, the rooflines and the GPU-only
messages (CPU).  The fixtures in tests/fixtures/gputools are HAND-WRITTEN after the tools'
documented formats until recorded ones replace them (see their README)."""

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
L1_12 = ROOT / "examples" / "l1_12_diag_matmul"
H200 = roofline.Peaks(4.8e12, 66.9e12, "device properties")


def _sources(d: Path) -> str:
    return "\n".join(p.read_text() for p in sorted(d.rglob("*")) if p.is_file() and p.suffix in (".py", ".cu", ".cpp"))


@pytest.fixture(scope="module")
def ncu_text() -> str:
    return (FIX / "ncu_raw_handwritten.csv").read_text()


# --- ncu ---------------------------------------------------------------------------------------

def test_unit_scale_and_numbers():
    assert ncu.unit_scale("nsecond") == 1e-9 and ncu.unit_scale("usecond") == 1e-6
    assert ncu.unit_scale("msecond") == 1e-3 and ncu.unit_scale("second") == 1.0
    assert ncu.unit_scale("Kbyte") == 1e3 and ncu.unit_scale("Mbyte/second") == 1e6 and ncu.unit_scale("byte") == 1
    assert ncu.unit_scale("%") == 1 and ncu.unit_scale("register/thread") == 1 and ncu.unit_scale("ms") == 1e-3
    assert ncu.number("134,348,800") == 134348800 and ncu.number("n/a") is None and ncu.number("91.40") == 91.4


def test_base_name_of_demangled_kernels():
    assert ncu.base_name("row_scale_vec4(const float *, const float4 *, float4 *, long, long)") == "row_scale_vec4"
    assert ncu.base_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                         "at::detail::Array<char *, 1>>(int, at::native::FillFunctor<float>)") == \
        "vectorized_elementwise_kernel"
    assert ncu.base_name("sm90_xmma_gemm_f32f32_tn_n_kernel__5x_cublas") == "sm90_xmma_gemm_f32f32_tn_n_kernel__5x_cublas"


def test_parse_raw_csv_rows_units_and_prof_lines(ncu_text):
    rows = ncu.parse_raw_csv(ncu_text)
    assert len(rows) == 4  # the ==PROF== lines, comments and the units row are not kernels
    assert rows[1]["gpu__time_duration.sum"] == ("46,784", "nsecond")
    assert rows[1]["Kernel Name"][0].startswith("row_scale_vec4(")


def test_kernel_profiles_from_the_csv(ncu_text):
    ks = ncu.profiles(ncu_text, _sources(L1_12), H200)
    by = {k.name: k for k in ks}
    assert list(by) == ["vectorized_elementwise_kernel", "row_scale_vec4",
                        "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
                        "row_scale_scalar"]
    k = by["row_scale_vec4"]
    assert k.yours and not by["vectorized_elementwise_kernel"].yours
    assert k.duration_us == pytest.approx(46.784)
    assert k.dram_pct == pytest.approx(91.40) and k.l2_pct == pytest.approx(47.92) and k.sm_pct == pytest.approx(14.83)
    assert k.occupancy_pct == pytest.approx(84.77) and k.theoretical_occupancy_pct == 100
    assert k.registers == 26 and k.smem_bytes == 0 and k.grid == "2112" and k.block == "256"
    assert k.stalls[0] == ["long_scoreboard", 15.31]  # 'selected' is issuing, not a stall
    assert all(r != "selected" for r, _ in k.stalls) and len(k.stalls) == 3
    assert k.dram_bytes == 134_348_800 + 67_125_248 and k.flops == 16_777_216
    # per-kernel roofline: 201 MB in 46.8 us = 4.3 TB/s of 4.8 TB/s, memory-bound
    assert k.roofline.bound == "memory" and k.roofline.pct_of_roof == pytest.approx(
        100 * (201_474_048 / 4.8e12) / 46.784e-6, rel=1e-3)
    g = by["sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"]
    assert g.tensor_pct == pytest.approx(61.77) and g.smem_bytes == 213_248 and g.registers == 168
    assert g.flops == 0  # an n/a metric counts as missing, the others as zero
    assert g.theoretical_occupancy_pct == pytest.approx(9.38)
    assert g.roofline is None  # tensor-core FLOPs are not counted: no roofline to speak of
    assert "compute-bound" in ncu.hint(g) and "memory-bound" in ncu.hint(k)
    assert ncu.hint(by["row_scale_scalar"]).startswith("achieved occupancy 12%: too few warps (grid 1 x block 256)")
    tight = KernelProfile("k", True, 10.0, "4096", "512", 20.0, 25.0, 10.0, 5.0, 5.0, 20.0, None, 128, 49152,
                          [["barrier", 4.0]])
    assert ncu.hint(tight).startswith("theoretical occupancy 25% (128 registers/thread, 49152 B shared/block)")
    assert "top stall barrier (waiting at __syncthreads)" in ncu.hint(tight)


def test_table_is_short_and_names_your_kernels(ncu_text):
    rep = NcuReport(kernels=ncu.profiles(ncu_text, _sources(L1_12), H200))
    t = ncu.table(rep, forward_ms=0.075)
    assert "row_scale_vec4*" in t and "hint row_scale_vec4: DRAM at 91% of peak" in t
    assert "4 kernel launch(es)" in t and "of 75.0 us timed" in t and "yours: 2 kernel(s)" in t
    assert len(t) < 2000, t  # a few hundred tokens


def _many_kernels(ncu_text: str, n: int) -> str:
    """The fixture's rows repeated under ``n`` distinct kernel names (a ResNet-sized forward)."""
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


def test_profile_output_stays_within_1500_tokens(ncu_text):
    """The agent reads `cuda-agent profile --ncu` as tool output: the table stays under 1,500 tokens
    (counted as characters / 3, an over-estimate for this text) whatever the number of kernels."""
    for n in (1, 12, 64):
        rep = NcuReport(kernels=ncu.profiles(_many_kernels(ncu_text, n), "fused_conv_bn_relu_variant_3", H200))
        t = ncu.table(rep, forward_ms=1.2)
        assert len(t) / 3 < 1500, (n, len(t))
        assert f"{n} kernel launch(es)" in t
    assert "more kernel(s)" in t


def test_report_round_trips_through_json(ncu_text):
    r = CheckResult("t", "sha", "cuda", "strict", ncu=NcuReport(kernels=ncu.profiles(ncu_text, "row_scale_vec4", H200)))
    back = CheckResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r and back.ncu.kernels[1].roofline.bound == "memory"


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
    fs, errors = sanitizer.parse("memcheck", (FIX / "memcheck_oob_handwritten.log").read_text(),
                                 {"oob.cu", "model_new.py"})
    assert errors == 3
    oob = fs[0]
    assert oob.kind == "Invalid __global__ read of size 4 bytes" and oob.kernel == "oob_shift"
    assert oob.where == "kernels/oob.cu:11" and oob.count == 2  # the same access by two threads, merged
    assert "1 bytes after the nearest allocation" in oob.detail
    assert fs[1].kind.startswith("Program hit cudaErrorLaunchFailure")
    text = sanitizer.describe([sanitizer.SanitizerReport("memcheck", True, errors, fs)])
    assert "memcheck  3 error(s)" in text and "at kernels/oob.cu:11 (x2)" in text


def test_racecheck_hazard_between_two_lines():
    fs, errors = sanitizer.parse("racecheck", (FIX / "racecheck_handwritten.log").read_text(), {"race.cu"})
    assert errors == 1 and len(fs) == 1
    f = fs[0]
    assert f.kind == "Race reported between Write access" and f.kernel == "block_sum"
    assert f.where == "kernels/race.cu:14" and f.detail == "and Read access at kernels/race.cu:17 [1,016 hazards]"


def test_older_sanitizer_format_and_no_line_info():
    fs, errors = sanitizer.parse("memcheck", (FIX / "memcheck_old_format_handwritten.log").read_text())
    assert errors == 1 and fs[0].where == "my_helper.cuh:75" and fs[0].kernel == "vector_projection"
    fs, _ = sanitizer.parse("memcheck", "========= Invalid __global__ write of size 4 bytes\n"
                                        "=========     at k2(float *)+0x90\n========= ERROR SUMMARY: 1 error\n")
    assert fs[0].kernel == "k2" and fs[0].where == "k2+0x90"


def test_clean_run_and_a_tool_that_did_not_run():
    fs, errors = sanitizer.parse("synccheck", "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    assert fs == [] and errors == 0
    assert sanitizer.parse("initcheck", "")[1] is None
    text = sanitizer.describe([sanitizer.SanitizerReport("synccheck", True, 0),
                               sanitizer.SanitizerReport("initcheck", error="load: ImportError: x")])
    assert "synccheck 0 error(s) - clean" in text and "initcheck could not run: load: ImportError" in text
    assert sanitizer.run("nosuchtool", Path("/nonexistent/job.json"), 1).error.startswith("unknown tool")


def test_sanitizer_command_and_environment():
    cmd = sanitizer.command("/usr/local/cuda/bin/compute-sanitizer", "racecheck", Path("/job/r.log"))
    assert cmd[1:3] == ["--tool", "racecheck"] and cmd[cmd.index("--log-file") + 1] == "/job/r.log"
    assert sanitizer.ENV["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"


# --- rooflines ---------------------------------------------------------------------------------

def test_roofline_bound_and_percent():
    mem = roofline.roofline("forward", 0.075, 3 * 64 * 2**20, 2 * 16 * 2**20, H200)
    assert mem.bound == "memory" and mem.pct_of_roof == pytest.approx(100 * 3 * 64 * 2**20 / 4.8e12 / 75e-6, rel=1e-3)
    gemm = roofline.roofline("forward", 2.8, 3 * 4096 * 4096 * 4, 2 * 4096**3, H200)
    assert gemm.bound == "compute" and gemm.pct_of_roof == pytest.approx(100 * 2 * 4096**3 / 66.9e12 / 2.8e-3, rel=1e-3)
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
