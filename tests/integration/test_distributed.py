#!/usr/bin/env python3
"""Multi-process runs over Gloo on loopback: DDP matches `single`, a killed rank takes the job
down fast and is named, torchrun-style launches started by hand, inconsistent variables.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_distributed.py
"""
import os
import signal
import subprocess
import time

import strata_test as st

# Equivalence tolerances of the issue: param_norm relative, final_loss absolute.
PARAM_NORM_RTOL = 1e-5
FINAL_LOSS_ATOL = 1e-4

# A CNN variant of the synthetic experiment: images instead of vectors.
CNN_SETS = ["model.name=cnn", "model.channels=[4,8]", "model.hidden=16", "model.groups=2",
            "dataset.input_shape=[1,12,12]"]
COMMON_SETS = ["train.steps=24", "train.global_batch_size=24", "log.every=4"]


def run_with_output(label, *sets, nproc=1, expect=0):
    """Runs good_synthetic with COMMON_SETS and `sets`; returns (summary or None, result)."""
    out = st.temp_dir(label)
    args = list(sets) + COMMON_SETS
    if nproc > 1:
        result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", nproc, *st.set_args(*args),
                           timeout=300)
    else:
        result = st.strata_run(st.GOOD_SYNTHETIC, out, *args, timeout=300, expect=None)
    st.expect_exit(result, expect)
    st.expect_no_crash(result)
    return (st.load_summary(out) if expect == 0 else None), result


def run(label, *sets, nproc=1, expect=0):
    summary, result = run_with_output(label, *sets, nproc=nproc, expect=expect)
    return summary if expect == 0 else result


def expect_equivalent(reference, candidate, what):
    st.expect_close(candidate["param_norm"], reference["param_norm"], what + " param_norm", rel=PARAM_NORM_RTOL)
    st.expect_close(candidate["final_loss"], reference["final_loss"], what + " final_loss", abs_tol=FINAL_LOSS_ATOL)


def equivalence(model_sets, label):
    for micro in (1, 2):
        single = run("%s_single_m%d" % (label, micro), *model_sets, "train.micro_batches=%d" % micro)
        for world in (2, 3):
            ddp = run("%s_ddp_w%d_m%d" % (label, world, micro), *model_sets, "strategy.name=ddp",
                      "train.micro_batches=%d" % micro, nproc=world)
            what = "%s ddp world %d micro %d" % (label, world, micro)
            expect_equivalent(single, ddp, what)
            st.check(ddp["world_size"] == world, what + ": world_size %s" % ddp["world_size"])
            st.check(ddp["backend"] == "gloo", what + ": backend %s" % ddp["backend"])
            params = ddp["memory"]["model_state_bytes"]["params"]
            # DDP all-reduces every gradient once per step: 2(n-1)/n x 4 bytes x parameters.
            expected_bus = 2 * (world - 1) / world * params
            st.expect_close(ddp["comm"]["bus_bytes_per_step"], expected_bus, what + " bus bytes", rel=1e-9)
            st.check(ddp["comm"]["setup_bytes"] >= params, what + ": parameters broadcast at setup")


def ddp_matches_single_mlp():
    equivalence([], "mlp")


def ddp_matches_single_cnn():
    equivalence(CNN_SETS, "cnn")


def ddp_world_one_matches_single():
    single = run("single1")
    ddp = run("ddp1", "strategy.name=ddp", "strategy.bucket_cap_mb=0.001")
    expect_equivalent(single, ddp, "ddp world 1 (tiny buckets)")


def killed_rank_stops_the_job():
    out = st.temp_dir("kill")
    args = [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", "3",
            "--set", "strategy.name=ddp", "--set", "train.steps=1000000", "--set", "log.every=1",
            "--set", "train.global_batch_size=24"]
    env, _ = st._clean_env()
    launcher = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, cwd=st.scratch_dir(), start_new_session=True)
    try:
        # Wait until every rank runs: the launcher has three children and rank 0 reports steps.
        deadline = time.monotonic() + 120
        children = []
        while time.monotonic() < deadline:
            children = st.child_pids(launcher.pid)
            if len(children) == 3 and os.path.exists(os.path.join(out, "config.toml")):
                break
            time.sleep(0.2)
        st.check(len(children) == 3, "the launcher did not start 3 ranks (children: %s)" % children)
        time.sleep(3)  # well into training
        victim = rank_of(children, 1)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        try:
            stdout, stderr = launcher.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            st.fail("the launcher was still running 30 s after rank 1 was killed")
        took = time.monotonic() - killed_at
        st.check(launcher.returncode != 0, "the launcher exited 0 after a rank was killed")
        st.check("rank 1" in stderr.decode(), "stderr does not name rank 1:\n" + stderr.decode()[-2000:])
        leftovers = [p for p in children if st.alive(p)]
        st.check(not leftovers, "ranks still running after the launcher exited: %s" % leftovers)
        print("  launcher exited %s %.1f s after SIGKILL of rank 1" % (launcher.returncode, took))
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()




def rank_of(pids, rank):
    for pid in pids:
        if st.rank_of_process(pid) == rank:
            return pid
    st.fail("no child named rank %d among %s" % (rank, pids))




def torchrun_style_launch():
    """Two ranks started by hand with torchrun's variables write one summary.json."""
    out_dir = st.temp_dir("torchrun")
    port = st.free_port()
    procs = []
    for rank in range(2):
        env, _ = st._clean_env({"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                                "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        procs.append(subprocess.Popen(
            [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--set", "strategy.name=ddp",
             "--set", "experiment.out_dir=" + out_dir] + st.set_args(*COMMON_SETS),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=st.scratch_dir()))
    outputs = []
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=120))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            st.fail("a hand-launched rank did not finish within 120 s")
    for rank, (p, (stdout, stderr)) in enumerate(zip(procs, outputs)):
        st.check(p.returncode == 0, "rank %d exited %s:\n%s" % (rank, p.returncode, stderr.decode()[-3000:]))
    summaries = []
    for root, _, files in os.walk(out_dir):
        summaries += [os.path.join(root, f) for f in files if f == "summary.json"]
    st.check(len(summaries) == 1, "expected one summary.json under %s, found %s" % (out_dir, summaries))
    summary = st.load_summary(os.path.dirname(summaries[0]))
    st.check(summary["world_size"] == 2, "world_size %s" % summary["world_size"])
    st.check(outputs[1][0].decode().strip() == "", "rank 1 printed routine output:\n" + outputs[1][0].decode())




def inconsistent_variables():
    cases = [
        ({"RANK": "0"}, "WORLD_SIZE"),
        ({"RANK": "3", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}, "RANK"),
        ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK"),
        ({"OMPI_COMM_WORLD_RANK": "0"}, "OMPI_COMM_WORLD_SIZE"),
    ]
    for env, name in cases:
        result = st.strata("run", st.GOOD_SYNTHETIC, "--out", st.temp_dir("bad_env"), env=env, timeout=60)
        st.expect_clean_failure(result, 2, name)


def global_batch_not_divisible():
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--nproc", "3", "--set", "strategy.name=ddp", "--set",
                       "train.global_batch_size=32")
    st.expect_clean_failure(result, 2, "not divisible by world size 3")


if __name__ == "__main__":
    st.main([inconsistent_variables, global_batch_not_divisible, ddp_world_one_matches_single,
             ddp_matches_single_mlp, ddp_matches_single_cnn, torchrun_style_launch, killed_rank_stops_the_job])
