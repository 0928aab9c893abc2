#!/usr/bin/env python3
"""`strata bench comms` and `strata bench gemm` on the CPU: the nccl-tests table over Gloo with a
real correctness check (#wrong, and a planted corruption that must show), bus bandwidth from the
same factors as Strata's traffic accounting, CSV/JSON outputs, the gemm table and its measured-peak
cache, and usage errors (exit 2). Also the GPU benchmark scripts' CPU smoke mode
(bench/gpu_goals.sh --smoke over bench/gpu_peers.py and bench/trace_overlap.py), so that they
still run when a GPU comes, and bench/builds_ab.py's A/B of two builds (one build against itself
here) with its per-repeat ratios."""

import csv
import json
import os
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]
SMALL = ["--max-bytes", "64K", "--iters", "3", "--warmup", "1"]


def bus_factor(collective, n):
    """nccl-tests' bus bandwidth factors (docs/user-guide.md)."""
    if n == 1:
        return 0.0
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def table(result):
    """{collective: [row dict]} from the printed table; '# name' lines open a collective."""
    rows, current = {}, None
    for line in result.stdout.splitlines():
        if line.startswith("# ") and line[2:].strip() in COLLECTIVES:
            current = line[2:].strip()
            rows[current] = []
            continue
        if line.startswith("#") or not line.strip():
            continue
        parts = line.split()
        st.check(len(parts) == 8 and current is not None, "unexpected table line %r" % line, result)
        rows[current].append({"size": int(parts[0]), "count": int(parts[1]), "type": parts[2], "redop": parts[3],
                              "time_us": float(parts[4]), "algbw": float(parts[5]), "busbw": float(parts[6]),
                              "wrong": int(parts[7])})
    return rows


def load_json(path):
    st.check(os.path.isfile(path), "%s was not written" % path)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_rows(rows, n, result):
    """Every collective present, #wrong 0, sizes as nccl-tests defines them, busbw = algbw x factor."""
    st.check(sorted(rows) == sorted(COLLECTIVES), "expected the five collectives, got %s" % sorted(rows), result)
    for name, items in rows.items():
        st.check(items, "no rows for %s" % name, result)
        for r in items:
            st.check(r["wrong"] == 0, "%s %d B: #wrong %d" % (name, r["size"], r["wrong"]), result)
            st.check(r["size"] == r["count"] * 4, "%s: size %d is not count x 4 (float32)" % (name, r["size"]), result)
            if name in ("all_gather", "reduce_scatter", "all_to_all"):
                st.check(r["count"] % n == 0, "%s: count %d not divisible by %d ranks" % (name, r["count"], n), result)
            # Printed with three decimals: equal within their rounding.
            expected = r["algbw"] * bus_factor(name, n)
            st.check(abs(r["busbw"] - expected) <= 0.0011 + 1e-9,
                     "%s %d B: busbw %.3f != algbw %.3f x %.3f" % (name, r["size"], r["busbw"], r["algbw"],
                                                                 bus_factor(name, n)), result)
    st.expect_stdout(result, "# Avg bus bandwidth")


def check_json(data, n):
    for key in ("world_size", "backend", "device", "date", "rows"):
        st.check(key in data, "the JSON output lacks %r: %s" % (key, sorted(data)))
    st.check(data["world_size"] == n and data["backend"] == "gloo" and data["device"] == "cpu",
             "unexpected metadata %r" % {k: data[k] for k in ("world_size", "backend", "device")})
    st.check({r["collective"] for r in data["rows"]} == set(COLLECTIVES), "the JSON rows lack a collective")
    for r in data["rows"]:
        for key in ("collective", "size_bytes", "count", "type", "redop", "time_us", "algbw_gbps", "busbw_gbps",
                    "wrong"):
            st.check(key in r, "a JSON row lacks %r: %r" % (key, r))
        st.check(r["time_us"] > 0 and r["wrong"] == 0, "bad JSON row %r" % r)
        st.expect_close(r["algbw_gbps"], r["size_bytes"] / (r["time_us"] * 1e-6) / 1e9, "algbw of %r" % r, rel=1e-9)
        st.expect_close(r["busbw_gbps"], r["algbw_gbps"] * bus_factor(r["collective"], n), "busbw of %r" % r,
                        rel=1e-9, abs_tol=1e-15)


# ---- comms ------------------------------------------------------------------------------------

def comms_two_ranks():
    out = st.temp_dir("comms2")
    json_path, csv_path = os.path.join(out, "comms.json"), os.path.join(out, "comms.csv")
    result = st.strata("bench", "comms", "--nproc", 2, *SMALL, "--json", json_path, "--csv", csv_path, timeout=120)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    st.expect_stdout(result, "size(B)")
    st.expect_stdout(result, "busbw(GB/s)")
    rows = table(result)
    check_rows(rows, 2, result)
    # World 2: all_reduce's factor 2(n-1)/n is 1, all_gather's and reduce_scatter's (n-1)/n is 0.5.
    st.check(rows["all_reduce"][-1]["size"] == 65536, "the largest all_reduce should be 64K", result)
    data = load_json(json_path)
    check_json(data, 2)
    with open(csv_path, newline="", encoding="utf-8") as f:
        lines = list(csv.DictReader(f))
    st.check(len(lines) == len(data["rows"]), "CSV and JSON hold different numbers of rows")
    st.check(set(lines[0]) >= {"collective", "size_bytes", "busbw_gbps", "wrong"}, "CSV header %r" % list(lines[0]))


def comms_three_ranks():
    out = st.temp_dir("comms3")
    json_path = os.path.join(out, "comms.json")
    result = st.strata("bench", "comms", "--nproc", 3, "--max-bytes", "4K", "--iters", 2, "--warmup", 1,
                       "--json", json_path, timeout=120)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    check_rows(table(result), 3, result)
    check_json(load_json(json_path), 3)


def comms_corruption_shows():
    # A planted wrong element on rank 0 must appear in #wrong: the check is real.
    result = st.strata("bench", "comms", "--nproc", 2, "--max-bytes", "64", "--iters", 1, "--warmup", 0,
                       env={"STRATA_BENCH_CORRUPT": "1"}, timeout=120)
    st.expect_exit(result, 1)
    st.expect_no_crash(result)
    rows = table(result)
    st.check(all(r["wrong"] > 0 for items in rows.values() for r in items), "every row should show #wrong > 0", result)
    st.expect_stdout(result, "FAILED")


def comms_dtypes_and_ops():
    for dtype, op in (("bfloat16", "avg"), ("float16", "max"), ("int32", "sum")):
        result = st.strata("bench", "comms", "--nproc", 2, "--max-bytes", "1K", "--min-bytes", "1K", "--iters", 1,
                           "--warmup", 0, "--dtype", dtype, "--op", op, "--collective", "reduce_scatter", timeout=120)
        st.expect_exit(result, 0)
        rows = table(result)
        st.check(rows.get("reduce_scatter") and rows["reduce_scatter"][0]["type"] == dtype
                 and rows["reduce_scatter"][0]["redop"] == op and rows["reduce_scatter"][0]["wrong"] == 0,
                 "%s %s: expected one correct reduce_scatter row" % (dtype, op), result)


def comms_usage_errors():
    result = st.strata("bench", "comms", "--collective", "foo")
    st.expect_clean_failure(result, 2, "--collective", "foo", "all_reduce")
    result = st.strata("bench", "comms", "--max-bytes", "12Q")
    st.expect_clean_failure(result, 2, "--max-bytes", "12Q")
    result = st.strata("bench", "comms", "--dtype", "int32", "--op", "avg")
    st.expect_clean_failure(result, 2, "--op avg", "int32")
    result = st.strata("bench", "comms", "--device", "cpu", "--backend", "nccl")
    st.expect_clean_failure(result, 2, "nccl")
    result = st.strata("bench", "nothing")
    st.expect_clean_failure(result, 2, "nothing", "bench comms")


# ---- gemm -------------------------------------------------------------------------------------

def gemm_records_a_peak():
    cache = st.temp_dir("cache")
    json_path = os.path.join(st.temp_dir("gemm"), "gemm.json")
    env = {"STRATA_CACHE_DIR": cache}
    result = st.strata("bench", "gemm", "-m", "64,128", "-n", 64, "-k", 64, "--steps", 2, "--device", "cpu",
                       "--json", json_path, env=env)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    st.expect_stdout(result, "Rate(TF/s)")
    shapes = [tuple(line.split()[:3]) for line in result.stdout.splitlines() if line and not line.startswith("#")]
    st.check(shapes == [("64", "64", "64"), ("128", "64", "64")], "expected rows 64x64x64 and 128x64x64", result)
    st.expect_stdout(result, "recorded")
    data = load_json(json_path)
    st.check([(r["m"], r["n"], r["k"]) for r in data["rows"]] == [(64, 64, 64), (128, 64, 64)], "JSON rows %r" % data)
    for r in data["rows"]:
        st.expect_close(r["tflops"], 2 * r["m"] * r["n"] * r["k"] / r["time_s"] / 1e12, "rate of %r" % r, rel=1e-9)
    peaks = load_json(os.path.join(cache, "gemm_peaks.json"))
    st.check(data["device"] in peaks, "the cache has no entry for %r: %r" % (data["device"], peaks))
    st.expect_close(peaks[data["device"]]["float32"]["tflops"], data["best_tflops"], "recorded peak", rel=1e-12)
    st.check(data["device"].endswith(" threads"), "a CPU is described with its thread count: %r" % data["device"])


def gemm_usage_errors():
    result = st.strata("bench", "gemm", "--dtype", "tf32", "--device", "cpu")
    st.expect_clean_failure(result, 2, "tf32")
    result = st.strata("bench", "gemm", "-m", "1,2", "-n", "1,2,3", "-k", "1")
    st.expect_clean_failure(result, 2, "-m, -n and -k")
    result = st.strata("bench", "gemm", "-m", "0")
    st.expect_clean_failure(result, 2, "-m")


# ---- the GPU benchmark scripts, smoke-tested on the CPU ----------------------------------------

def gpu_goals_without_a_gpu_creates_nothing():
    """Without --smoke on a machine without an NVIDIA GPU, gpu_goals.sh refuses before it creates
    its output directory."""
    if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0:
        raise st.Skip("this machine has an NVIDIA GPU")
    out = os.path.join(st.temp_dir("goals_none"), "gpu-goals")
    result = st.run_command(["bash", os.path.join(st.REPO, "bench", "gpu_goals.sh"), "--out", out], timeout=60)
    st.expect_exit(result, 1)
    st.expect_stdout(result, "no NVIDIA GPU on this machine")
    st.check(not os.path.exists(out), "gpu_goals.sh created %s before it found no GPU" % out, result)


def gpu_goals_smoke():
    out = st.temp_dir("goals")
    result = st.run_command(["bash", os.path.join(st.REPO, "bench", "gpu_goals.sh"), "--smoke", "--out", out],
                            env={"STRATA_BIN": st.strata_bin(), "STRATA_GPU_PYTHON": sys.executable}, timeout=600)
    st.expect_exit(result, 0)
    st.expect_stdout(result, "every stage passed")
    llama, vit = load_json(os.path.join(out, "llama.json")), load_json(os.path.join(out, "vit.json"))
    st.check(llama["settings"]["variants"] == {"fused": ["model.fused_ops=true", "llama:model.loss_chunk_tokens=16"],
                                               "fsdp": ["strategy.name=fsdp"], "zero3": ["strategy.name=zero3"]},
             "llama.json settings: %r" % llama["settings"], result)
    (row,) = llama["results"]
    st.check(sorted(row["variants"]) == ["fsdp", "fused", "zero3"], "llama variants %r" % sorted(row["variants"]))
    st.check(row["variants"]["fused"]["overrides"] == ["model.fused_ops=true", "model.loss_chunk_tokens=16"],
             "llama's fused overrides %r" % row["variants"]["fused"]["overrides"])
    for name, v in row["variants"].items():
        st.check(v["step_time_s"] > 0 and v["ratio_strata"] == v["step_time_s"] / row["strata_step_time_s"],
                 "%s: step %r, ratio to plain %r" % (name, v["step_time_s"], v["ratio_strata"]))
    strategies = {side: run[0]["strategy"] for side, run in row["runs"].items()}
    st.check(strategies == {"strata": "single", "strata:fused": "single", "strata:fsdp": "fsdp",
                            "strata:zero3": "zero3"}, "llama sides ran %r (no eager peer)" % strategies)
    st.check(sorted(r["workload"] for r in vit["results"]) == ["vit", "vit_bf16"], "vit rows %r" % vit["results"])
    for r in vit["results"]:
        st.check(r["variants"]["fused"]["overrides"] == ["model.fused_ops=true"] and r["eager_step_time_s"] > 0
                 and r["ratio_eager"] is not None, "vit row %r" % {k: r[k] for k in ("workload", "variants")})
    with open(os.path.join(out, "goals.md"), encoding="utf-8") as f:
        md = f.read()
    for fragment in ("| plain |", "| fsdp (`strategy.name=fsdp`) |", "| fused (`model.fused_ops=true`) |",
                     "| fused (`model.fused_ops=true model.loss_chunk_tokens=16`) |"):
        st.expect_in(fragment, md, result, "goals.md")
    # The trace stage: two traced steps of each sharded strategy, forced collectives over Gloo here.
    with open(os.path.join(out, "overlap.json"), encoding="utf-8") as f:
        overlap = json.load(f)
    traced = [(r["trace"].split(os.sep)[-3], r["step"]) for r in overlap]
    st.check(traced == [(s, n) for s in ("trace-zero2", "trace-zero3", "trace-fsdp") for n in (4, 5)],
             "overlap rows %r" % traced, result)
    for r in overlap:
        st.check(r["collectives"].get("gloo:all_gather", 0) > 0, "no all-gather in %r" % r, result)
        st.check(os.path.isfile(r["trace"] + ".gz"), "the trace %s was not kept gzipped" % r["trace"], result)


def gpu_peers_variant_errors():
    peers = [sys.executable, os.path.join(st.REPO, "bench", "gpu_peers.py"), "--strata", st.strata_bin(), "--device",
             "cpu", "--quick", "--workloads", "mlp", "--micro-batches", "32", "--steps", "2", "--repeats", "1",
             "--no-compile", "--no-eager"]
    for bad, says in ((["--variant", "lonely"], "NAME KEY=VALUE"), (["--variant", "plain a=1"], "other than"),
                      (["--variant", "a x=1", "--variant", "a y=2"], "given twice"),
                      (["--variant", "a novalue"], "no KEY=VALUE")):
        result = st.run_command(peers + bad)
        st.expect_exit(result, 2)
        st.expect_stderr(result, says)
    # A variant Strata refuses fails its cell with Strata's own error.
    result = st.run_command(peers + ["--variant", "oops model.no_such_key=1"], timeout=300)
    st.expect_exit(result, 1)
    st.expect_stderr(result, "no_such_key")
    st.expect_stderr(result, "1 cell(s) failed")


def builds_ab_same_build():
    ab = [sys.executable, os.path.join(st.REPO, "bench", "builds_ab.py"),
          "--a", st.strata_bin(), "--b", st.strata_bin()]
    out = os.path.join(st.temp_dir("ab"), "ab.json")
    result = st.run_command(ab + ["--workloads", "mlp", "--strategies", "ddp", "--repeats", "3", "--steps", "20",
                                  "--json", out], timeout=300)
    st.expect_exit(result, 0)
    st.expect_stdout(result, "| B / A per repeat (median) | B slower |")
    data = load_json(out)
    (runs,), (row,) = data["runs_ms"], data["table"]
    st.check(len(runs["a"]) == len(runs["b"]) == 3 and min(runs["a"] + runs["b"]) > 0, "runs %r" % runs, result)
    # Repeat r ran A and B back to back: its ratio is b[r] / a[r], whichever ran first.
    per_repeat = sorted(b / a for a, b in zip(runs["a"], runs["b"]))
    expected = {"a_ms": sorted(runs["a"])[1], "b_ms": sorted(runs["b"])[1], "pairwise_b_over_a": per_repeat[1],
                "b_slower": sum(r > 1 for r in per_repeat), "repeats": 3}
    for key, value in expected.items():
        st.check(abs(row[key] - value) <= 1e-9 * max(1.0, abs(value)), "%s: %r, expected %r" % (key, row[key], value))
    st.check(abs(row["b_over_a"] - row["b_ms"] / row["a_ms"]) < 1e-12, "B / A %r" % row)
    st.expect_stdout(result, "| mlp | ddp | 3 | %.2f ms | %.2f ms | %.3f | %.3f | %d of 3 |" % (
        row["a_ms"], row["b_ms"], row["b_over_a"], row["pairwise_b_over_a"], row["b_slower"]))
    # Usage errors exit 2 before any run; a build that fails a run ends the comparison with its error.
    for bad, says in ((["--b", os.path.join(st.temp_dir("ab-missing"), "strata")], "not an executable file"),
                      (["--workloads", "nope"], "unknown workload 'nope'"), (["--repeats", "0"], "positive")):
        result = st.run_command(ab + bad)
        st.expect_exit(result, 2)
        st.expect_stderr(result, says)
    result = st.run_command(ab + ["--workloads", "mlp", "--strategies", "single", "--steps", "2", "--repeats", "1"])
    st.expect_exit(result, 1)
    st.expect_stderr(result, "runs in one process on one device")


if __name__ == "__main__":
    st.main([comms_two_ranks, comms_three_ranks, comms_corruption_shows, comms_dtypes_and_ops, comms_usage_errors,
             gemm_records_a_peak, gemm_usage_errors, gpu_goals_without_a_gpu_creates_nothing, gpu_goals_smoke, gpu_peers_variant_errors,
             builds_ab_same_build])
