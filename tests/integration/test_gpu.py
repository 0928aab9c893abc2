#!/usr/bin/env python3
"""On a GPU (label `gpu`): every strategy trains on CUDA at world size 1 over a real NCCL process
group and ends with `single`'s model tensor by tensor; two ranks sharing the GPU over Gloo do the
same with ddp, zero2, zero3 and fsdp; summary.json says how memory and step time were measured; a
traced zero3 step holds its kernels and its all-gathers' device work, which bench/trace_overlap.py
measures; two ranks bound to one GPU under NCCL are refused, naming both and the binding.
Without a CUDA device (none in `nvidia-smi -L`, no /dev/nvidiaN, or CUDA_VISIBLE_DEVICES hiding them
all) it prints why and exits 77 (CTest: skipped); where a device is visible, a strata that cannot use
it fails the test.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_gpu.py
"""
import glob
import os
import subprocess

import strata_test as st
import test_faults

RTOL = 1e-5
COMMON = ["train.device=cuda", "train.save_final=true", "train.steps=24", "train.global_batch_size=24",
          "log.every=4", "optimizer.name=sgd", "optimizer.momentum=0", "optimizer.lr=0.1", "train.micro_batches=2"]


def visible_gpu():
    """(True, what shows a CUDA device) or (False, why no device is visible). Asked of the driver,
    not of strata: a strata that cannot use a device this machine has must fail, not skip."""
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        return False, "CUDA_VISIBLE_DEVICES=%r hides every device" % hidden
    try:
        r = subprocess.run(["nvidia-smi", "-L"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        gpus = [line for line in r.stdout.splitlines() if line.startswith("GPU ")]
        if r.returncode == 0 and gpus:
            return True, "nvidia-smi -L: " + "; ".join(gpus)
    except (OSError, subprocess.TimeoutExpired):
        pass
    nodes = sorted(glob.glob("/dev/nvidia[0-9]*"))
    if nodes:
        return True, "device nodes " + " ".join(nodes)
    return False, "nvidia-smi -L lists no GPU and there is no /dev/nvidiaN"


def strata_uses_the_gpu():
    """strata loads LibTorch's CUDA library (libstrata_cuda, with NCCL) at start where a GPU shows,
    and can then use the device; with STRATA_CUDA=0 it does not load it and says why."""
    _, seen = visible_gpu()
    version = st.strata("--version")
    st.expect_exit(version, 0)
    st.check("not loaded" not in version.stdout and "NCCL: none" not in version.stdout,
             "a CUDA device is visible (%s) but strata did not load LibTorch's CUDA library" % seen, version)
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", "train.device=cuda", timeout=120)
    st.check(result.returncode == 0, "a CUDA device is visible (%s) but strata cannot use it" % seen, result)
    off = st.strata("validate", st.GOOD_SYNTHETIC, "--set", "train.device=cuda", env={"STRATA_CUDA": "0"}, timeout=120)
    st.expect_clean_failure(off, 2, "sees no CUDA device", "STRATA_CUDA=0 keeps it out")


def run(label, *sets, nproc=1):
    out = st.temp_dir(label)
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", nproc, *st.set_args(*(COMMON + list(sets))),
                       timeout=300)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    return st.load_summary(out), out


def breakdown_on_cuda():
    """time_breakdown_s on CUDA comes from events (the host clock would call NCCL's stream-ordered waits
    compute): measured without sync_timing, every phase non-negative, compute positive, and the phases of
    the device within the step time the step's own events measured."""
    summary, _ = run("breakdown", "strategy.name=ddp", "distributed.backend=nccl", "distributed.force_collectives=true")
    b = summary["time_breakdown_s"]
    st.check(summary["time_breakdown_timing"] == "cuda events" and isinstance(b, dict),
             "on CUDA: time_breakdown_timing %r, time_breakdown_s %r" % (summary["time_breakdown_timing"], b))
    st.check(all(b[k] >= 0 for k in ("data", "compute", "comm_wait", "optimizer")) and b["compute"] > 0,
             "time_breakdown_s on CUDA: %r" % b)
    total = sum(b[k] for k in ("data", "compute", "comm_wait", "optimizer"))
    mean_step = summary["train_time_s"] / summary["steps"]
    st.check(total <= 1.05 * mean_step, "the phases sum to %.5f s per step, the steps took %.5f s" % (total, mean_step))
    print("  breakdown on CUDA (ddp over NCCL, forced collectives): %s ms per step; mean step %.3f ms"
          % ({k: round(1e3 * v, 3) for k, v in b.items()}, 1e3 * mean_step))


def trace_on_cuda():
    """[train] trace_steps on CUDA: the trace holds the traced steps' kernels, NCCL's among them, and
    bench/trace_overlap.py splits them into compute, communication and its exposed part."""
    summary, out = run("trace", "strategy.name=zero3", "distributed.backend=nccl", "distributed.force_collectives=true",
                       "train.trace_steps=[5,6]")
    trace = os.path.join(out, "trace", "rank_0.pt.trace.json")
    st.check(summary.get("trace", {}).get("file") == "rank_0.pt.trace.json",
             "summary.json trace %r" % summary.get("trace"))
    rows, result = st.trace_overlap(trace)
    st.check([(r["step"], r["gpu"]) for r in rows] == [(5, True), (6, True)], "overlap rows %r" % rows, result)
    for r in rows:
        # At world size 1 NCCL copies out-of-place collectives (zero3's all-gathers from the float32
        # shard) and skips in-place ones (its reduce-scatters).
        st.check(any("gather" in k for k in r["comm_device_work"]),
                 "step %d: the all-gathers left no work on the GPU: %r" % (r["step"], r["comm_device_work"]))
        st.check(r["compute_us"] > 0 and r["comm_us"] > 0 and 0 <= r["exposed_comm_us"] <= r["comm_us"],
                 "step %d: %r" % (r["step"], r))
    print(result.stdout)


def strategies_match_single_on_cuda():
    single, single_dir = run("single")
    st.check(single["device"].startswith("cuda"), "single ran on %s" % single["device"])
    st.check(single["memory"]["peak_source"] == "cuda_reserved", "peak source %r" % single["memory"]["peak_source"])
    st.check(single["memory"]["tensor_source"] == "cuda_allocated", "tensor source %r" % single["memory"]["tensor_source"])
    st.check(single["step_timing"] == "cuda events", "step timing %r" % single["step_timing"])
    cases = [(name, ["distributed.backend=nccl"], 1) for name in ("ddp", "zero1", "zero2", "zero3", "fsdp")]
    cases += [("dp", ["strategy.replicas=1"], 1)]
    # The optimizer on the host: the copies both ways and the host's step, group by group.
    cases += [("zero3", ["distributed.backend=nccl", 'strategy.offload="optimizer"'], 1)]
    cases += [(name, ["distributed.backend=gloo", "train.device=cuda:0"], 2) for name in ("ddp", "zero2", "zero3", "fsdp")]
    breakdown_on_cuda()
    for name, sets, world in cases:
        summary, out = run("%s_w%d" % (name, world), "strategy.name=" + name, *sets, nproc=world)
        what = "%s world %d (%s)" % (name, world, summary["backend"])
        st.expect_models_equal(single_dir, out, what, rel=RTOL)
        print("  %s: step %.2f ms (single %.2f), peak allocated %d B" % (
            what, 1e3 * summary["step_time_s"], 1e3 * single["step_time_s"], summary["memory"]["peak_tensor_bytes"]))


def two_ranks_on_one_gpu_are_refused():
    """Two ranks of a host each left GPU 0 by their launcher (CUDA_VISIBLE_DEVICES=0 for both, as a
    wrong per-rank binding does) under NCCL: the second to claim the GPU exits naming both ranks and
    the binding, before NCCL's own "Duplicate GPU" (which names neither)."""
    port = str(st.free_port())
    procs = []
    for rank in (0, 1):
        env = {"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "TORCHELASTIC_RUN_ID": "gpu-test",
               "CUDA_VISIBLE_DEVICES": "0"}
        args = [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--out", st.temp_dir("shared_gpu_%d" % rank)] + st.set_args(
            *(COMMON + ["strategy.name=ddp", "distributed.backend=nccl", "distributed.timeout_s=30"]))
        procs.append(subprocess.Popen(args, env=dict(os.environ, **env), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for p in procs:
            try:
                outputs.append(p.communicate(timeout=120)[0])
            except subprocess.TimeoutExpired:
                p.kill()
                outputs.append(p.communicate()[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    refused = [o for o in outputs if "bound to the same GPU" in o]
    st.check(len(refused) >= 1, "no rank named the shared GPU:\n" + "\n----\n".join(o[-2000:] for o in outputs))
    st.check("CUDA_VISIBLE_DEVICES=0" in refused[0] and "rank 0" in refused[0] and "rank 1" in refused[0],
             "the refusal does not name both ranks and the binding:\n" + refused[0][-2000:])


def hung_collective_on_nccl_leaves_the_flight_record():
    """test_faults.py's hung collective of a one-rank job, over NCCL on the GPU: the flight record
    comes from libtorch_cuda's recorder (libstrata_cuda registers its dump), every collective in it
    NCCL's and completed on the device."""
    test_faults.hung_collective_of_one_rank_leaves_the_flight_record("nccl", "train.device=cuda")


if __name__ == "__main__":
    found, words = visible_gpu()
    if not found:
        st.skip_all("no CUDA device: " + words)
    st.main([strata_uses_the_gpu, strategies_match_single_on_cuda, trace_on_cuda, two_ranks_on_one_gpu_are_refused,
             hung_collective_on_nccl_leaves_the_flight_record])
