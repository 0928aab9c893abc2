#!/usr/bin/env python3
"""Failure paths of multi-process DDP runs over Gloo on loopback: a parameter without a gradient
is named, a peer lost inside a collective ends the survivor with an error (no hang, no crash),
SIGTERM to the launcher stops every rank, and a config error is reported once before any rank
starts.

    STRATA_BIN=build/bin/strata STRATA_FIXTURE_PLUGIN_DIR=build/tests/fixtures/plugins \
      python3 tests/integration/test_ddp_failures.py
"""
import os
import re
import signal
import time

import strata_test as st

PARAM_NORM_RTOL = 1e-5
# The fixture model `fixture_unused` (tests/fixtures/plugins/unused_param_model.cpp) holds a
# Linear `spare` in its first unit that forward never calls.
UNUSED_PARAMS = ["layer0.spare.weight", "layer0.spare.bias"]
STEP_LINE = re.compile(r"^\[rank 0/\d+\] step +(\d+)/", re.M)


# ---- helpers -----------------------------------------------------------------------------------

def crash_markers(text):
    return [m for m in st.CRASH_MARKERS if m in text]


def wait_for(condition, timeout, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


# ---- cases -------------------------------------------------------------------------------------

def unused_parameter_is_named():
    """A parameter without a gradient fails the ddp run fast, named; find_unused_parameters lets
    it train to the same parameters as `single`."""
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("unused_param_model")}
    st.fixture_libraries("unused_param_model")
    model = ["model.name=fixture_unused"]

    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", st.temp_dir("unused_err"), "--nproc", 2,
                       *st.set_args(*model, "strategy.name=ddp"), env=env, timeout=60)
    st.check(result.returncode != 0, "a ddp run with an unused parameter exited 0", result)
    st.expect_no_crash(result)
    for name in UNUSED_PARAMS:
        st.expect_stderr(result, name)
    st.expect_stderr(result, "find_unused_parameters")
    print("  unused parameters reported, exit %s after %.1f s" % (result.returncode, result.seconds))

    ddp_out = st.temp_dir("unused_ddp")
    ddp = st.strata("run", st.GOOD_SYNTHETIC, "--out", ddp_out, "--nproc", 2,
                    *st.set_args(*model, "strategy.name=ddp", "strategy.find_unused_parameters=true"), env=env, timeout=120)
    st.expect_exit(ddp, 0)
    st.expect_no_crash(ddp)
    single_out = st.temp_dir("unused_single")
    st.strata_run(st.GOOD_SYNTHETIC, single_out, *model, env=env, timeout=120)
    ddp_norm = st.load_summary(ddp_out)["param_norm"]
    single_norm = st.load_summary(single_out)["param_norm"]
    print("  param_norm: ddp (find_unused_parameters) %.12g, single %.12g" % (ddp_norm, single_norm))
    st.expect_close(ddp_norm, single_norm, "ddp with find_unused_parameters vs single: param_norm",
                    rel=PARAM_NORM_RTOL)


def peer_lost_inside_collective():
    """Two hand-launched ranks; rank 1 is SIGKILLed mid-training; rank 0 must fail cleanly."""
    out_dir = st.temp_dir("peer_lost")
    port = st.free_port()
    ranks = []
    try:
        for rank in range(2):
            env = st._clean_env({"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                                 "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
            args = [st.strata_bin(), "run", st.GOOD_SYNTHETIC] + st.set_args(
                "experiment.out_dir=" + out_dir, "distributed.timeout_s=20", "train.steps=1000000",
                "strategy.name=ddp", "log.every=1")
            ranks.append(st.Watched("rank %d" % rank, args, env[0], env[1]))
        rank0, rank1 = ranks

        def training():
            return len(STEP_LINE.findall(rank0.text("stdout"))) >= 5 or rank0.proc.poll() is not None \
                or rank1.proc.poll() is not None

        if not wait_for(training, 120) or rank0.proc.poll() is not None or rank1.proc.poll() is not None:
            for r in ranks:
                print("  --- %s ---\n%s" % (r.label, r.result().describe()))
            st.fail("rank 0 did not reach step 5 within 120 s with both ranks running")

        os.kill(rank1.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        code = rank0.wait(30)
        took = time.monotonic() - killed_at
        rank1.wait(10)
        result = rank0.result()
        if code is None:
            st.fail("rank 0 was still running 30 s after rank 1 was SIGKILLed (a hang)", result)
        st.check(code != 0, "rank 0 exited 0 after its peer was killed", result)
        st.expect_no_crash(result)
        if not re.search(r"^\[rank 0/2\] error: \S", result.stderr, re.M):
            st.fail("expected an error paragraph prefixed `[rank 0/2] error: ` on rank 0's stderr", result)
        if not re.search(r"^  fix: \S", result.stderr, re.M):
            st.fail("expected a `  fix: ...` line on rank 0's stderr", result)
        print("  rank 0 exited %s %.1f s after SIGKILL of rank 1 (%d step lines)"
              % (code, took, len(STEP_LINE.findall(result.stdout))))
        print("  rank 0 stderr: " + result.stderr.strip().replace("\n", "\n    "))
    finally:
        for r in ranks:
            r.kill()


def sigterm_to_launcher_stops_all_ranks():
    """SIGTERM to `strata run --nproc 3` ends it non-zero within 15 s and leaves no rank."""
    out = st.temp_dir("sigterm")
    args = [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", "3"] + st.set_args(
        "strategy.name=ddp", "train.steps=1000000", "log.every=1", "train.global_batch_size=24")
    launcher = st.Watched("launcher", args, *st._clean_env())
    children = []
    try:
        def running():
            children[:] = st.child_pids(launcher.proc.pid)
            return (len(children) == 3 and STEP_LINE.search(launcher.text("stdout")) is not None) \
                or launcher.proc.poll() is not None

        if not wait_for(running, 120, interval=0.2) or launcher.proc.poll() is not None:
            st.fail("the launcher did not start 3 training ranks within 120 s (children: %s)" % children,
                    launcher.result())
        time.sleep(1)  # well into training
        children[:] = st.child_pids(launcher.proc.pid)
        st.check(len(children) == 3, "expected 3 ranks under the launcher, found %s" % children, launcher.result())
        os.kill(launcher.proc.pid, signal.SIGTERM)
        sent_at = time.monotonic()
        code = launcher.wait(15)
        took = time.monotonic() - sent_at
        result = launcher.result()
        if code is None:
            st.fail("the launcher was still running 15 s after SIGTERM", result)
        st.check(code != 0, "the launcher exited 0 after SIGTERM", result)
        # Ranks that outlive the launcher get reparented; give them no grace beyond a moment.
        wait_for(lambda: not any(st.alive(p) for p in children), 2)
        leftovers = [p for p in children if st.alive(p)]
        if leftovers:
            for p in leftovers:
                os.kill(p, signal.SIGKILL)
            st.fail("ranks still running after the launcher exited: %s" % leftovers, result)
        markers = crash_markers(result.stderr) + crash_markers(result.stdout)
        st.check(not markers, "crash markers %s in the launcher's output after SIGTERM" % markers, result)
        print("  launcher exited %s %.1f s after SIGTERM; ranks %s gone" % (code, took, children))
        print("  launcher stderr tail: " + "\n    ".join(result.stderr.strip().splitlines()[-6:]))
    finally:
        launcher.kill()
        for p in children:
            if st.alive(p):
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def rank_config_error_named():
    """A config error is found by the launcher before any rank starts, and reported once."""
    out = st.temp_dir("config_err")
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", 2, "--set", "train.stpes=5", timeout=60)
    st.expect_clean_failure(result, 2, "Did you mean")
    count = result.stderr.count("Did you mean")
    st.check(count == 1, "expected `Did you mean` exactly once on stderr, found %d" % count, result)
    st.expect_not_in("[rank ", result.stderr, result, "stderr (no rank may start)")
    st.check(not os.listdir(out), "the failed launch wrote into %s: %s" % (out, os.listdir(out)), result)


if __name__ == "__main__":
    st.main([rank_config_error_named, unused_parameter_is_named, peer_lost_inside_collective,
             sigterm_to_launcher_stops_all_ranks])
