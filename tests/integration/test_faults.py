#!/usr/bin/env python3
"""Every crash leaves a verdict, at world size 1 and 2: the fixture strategy `fixture_fault`
(tests/fixtures/plugins/fault.cpp) throws in its setup, segfaults, exits with status 0 or hangs in
its step, on one rank; the run exits non-zero with one paragraph on stderr naming the rank that
failed (not the one that noticed), how (the signal, the early exit, the hang) and where (phase,
step), and summary.json says the same (status, failed_rank, failed_phase, failed_step, signal,
the plugin library of a crash).

    STRATA_BIN=build/bin/strata STRATA_FIXTURE_PLUGIN_DIR=build/tests/fixtures/plugins \
      python3 tests/integration/test_faults.py
"""
import contextlib
import os
import pickle
import re
import signal
import time

import strata_test as st

AT_STEP = 3
HANG_S = 3  # [distributed] hang_timeout_s of the hang cases
LIBRARY = "libstrata_strategy_fixture_fault.so"
SETS = ["strategy.name=fixture_fault", "strategy.at_step=%d" % AT_STEP, "train.steps=20", "log.every=5",
        "train.threads=1", "distributed.timeout_s=10", "distributed.hang_timeout_s=%d" % HANG_S,
        "distributed.heartbeat_s=5"]


def run(fault, world, rank):
    """`strata run` of the fault on `rank` of `world` ranks; (run directory, result)."""
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("fault")}
    st.fixture_libraries("fault")
    out = st.temp_dir("%s-w%d" % (fault, world))
    args = ["run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", world]
    args += st.set_args(*SETS, "strategy.fault=%s" % fault, "strategy.on_rank=%d" % rank)
    result = st.strata(*args, env=env, timeout=60)
    print("  %s at world %d on rank %d: exit %s after %.1f s" % (fault, world, rank, result.returncode, result.seconds))
    return out, result


def expect_no_crash_output(result):
    """The launcher ended by itself and no crash marker reached the output (a rank's crash is the
    launcher's exit code 128 + signal, by design)."""
    st.check(isinstance(result.returncode, int) and result.returncode >= 0,
             "the launcher itself was killed by a signal", result)
    for marker in st.CRASH_MARKERS:
        st.expect_not_in(marker, result.stdout + result.stderr, result, "the output")


def expect_paragraph(result, rank, *fragments):
    """One paragraph on stderr: a line naming `rank` with every fragment, then a `  fix:` line."""
    lines = result.stderr.splitlines()
    for i, line in enumerate(lines):
        if re.search(r"\brank %d\b" % rank, line) and all(f in line for f in fragments):
            st.check(i + 1 < len(lines) and re.match(r"^  fix: \S", lines[i + 1]),
                     "the line naming rank %d is not followed by a `  fix:` line: %r" % (rank, line), result)
            print("  " + line.strip()[:240])
            return line
    st.fail("no stderr line names rank %d with %s" % (rank, fragments), result)


def expect_summary(out, result, rank, phase, step, **more):
    summary = st.load_summary(out)
    want = dict(status="failed", failed_rank=rank, failed_phase=phase, failed_step=step, **more)
    got = {k: summary.get(k) for k in want}
    st.check(got == want, "summary.json: %s, expected %s (error %r)" % (got, want, summary.get("error")), result)
    st.check(isinstance(summary.get("error"), str) and summary["error"].strip(),
             "summary.json has no error paragraph: %r" % summary.get("error"), result)
    return summary


def case(fault, world, rank):
    def check():
        out, result = run(fault, world, rank)
        expect_no_crash_output(result)
        where = "in train at step %d" % AT_STEP
        if fault == "throw-setup":
            st.expect_exit(result, 1)
            st.expect_stderr(result, "setup failed on purpose")
            if world == 1:
                st.expect_error_paragraph(result)
            else:
                expect_paragraph(result, rank, "cause:", "failed:", "in setup")
            expect_summary(out, result, rank, "setup", 0)
        elif fault == "segfault-step":
            st.expect_exit(result, 128 + signal.SIGSEGV)
            expect_paragraph(result, rank, "cause:", "killed by SIGSEGV", where, LIBRARY)
            expect_summary(out, result, rank, "train", AT_STEP, signal="SIGSEGV", failed_plugin=LIBRARY)
        elif fault == "exit0-step":
            st.expect_exit(result, 1)
            expect_paragraph(result, rank, "cause:", "exited with status 0 before its run ended", where)
            expect_summary(out, result, rank, "train", AT_STEP)
        elif fault == "hang-step":
            st.expect_exit(result, 1)
            # The hang watch ends it within hang_timeout_s and a beat, long before the 60 s limit.
            st.check(result.seconds < 30, "the hang took %.1f s to end" % result.seconds, result)
            if world == 1:
                expect_paragraph(result, rank, "stopped advancing", where)
            else:
                expect_paragraph(result, rank, "cause:", "found this rank stuck", where)
            expect_summary(out, result, rank, "train", AT_STEP)
    check.__name__ = "%s_at_world_%d_on_rank_%d" % (fault.replace("-", "_"), world, rank)
    return check


@contextlib.contextmanager
def memory_cgroup(limit):
    """A fresh memory cgroup of `limit` bytes (v1, or v2 where that is the hierarchy), without swap;
    yields the command prefix that runs a program in it. Skip where none can be made (not root)."""
    v1 = "/sys/fs/cgroup/memory"
    root = v1 if os.path.isfile(os.path.join(v1, "memory.limit_in_bytes")) else "/sys/fs/cgroup"
    limit_file = "memory.limit_in_bytes" if root == v1 else "memory.max"
    group = os.path.join(root, "strata-test-oom-%d" % os.getpid())
    try:
        os.mkdir(group)
        with open(os.path.join(group, limit_file), "w") as f:
            f.write(str(limit))
    except OSError as e:
        if os.path.isdir(group):
            os.rmdir(group)
        raise st.Skip("cannot make a memory cgroup (%s): needs root and a writable cgroup hierarchy" % e)
    for name, value in (("memory.memsw.limit_in_bytes", limit), ("memory.swap.max", 0)):
        with contextlib.suppress(OSError):
            with open(os.path.join(group, name), "w") as f:
                f.write(str(value))
    try:
        yield group, ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', group]
    finally:
        deadline = time.monotonic() + 20
        while True:
            try:
                os.rmdir(group)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def oom_kill_is_named_with_the_limit():
    """In a cgroup of 1 GiB: validate of a model larger than that names the cgroup's limit (exit 2),
    and a rank that allocates past it is killed by the OOM killer, which the verdict names with the
    limit (exit 137, summary.json failed with SIGKILL)."""
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("fault")}
    with memory_cgroup(1 << 30) as (group, prefix):
        limit_file = "memory.limit_in_bytes" if group.startswith("/sys/fs/cgroup/memory/") else "memory.max"
        result = st.run_command(prefix + [st.strata_bin(), "validate", st.GOOD_SYNTHETIC, "--set",
                                          "model.hidden=[20000, 20000]"], env=env, timeout=60)
        st.expect_clean_failure(result, 2, "cgroup", os.path.join(group, limit_file))
        out = st.temp_dir("oom")
        result = st.run_command(prefix + [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--out", out] + st.set_args(
            *SETS, "strategy.fault=oom-step", "strategy.on_rank=0"), env=env, timeout=120)
        print("  oom-step in a 1 GiB cgroup: exit %s after %.1f s" % (result.returncode, result.seconds))
        expect_no_crash_output(result)
        st.expect_exit(result, 128 + signal.SIGKILL)
        expect_paragraph(result, 0, "cause:", "killed by the kernel's OOM killer", "memory limit",
                         os.path.join(group, limit_file))
        expect_summary(out, result, 0, "train", AT_STEP, signal="SIGKILL")


def hung_collective_of_one_rank_leaves_the_flight_record(backend="gloo", *device_sets):
    """A job of one rank over forced collectives that never issues its 5th collective of the steps
    (STRATA_FAULT=hang-collective:5:0): its own hang watch ends it, and c10d's flight record of
    the rank lands in comm_trace/rank_0, the collectives it issued there, each completed. Gloo here;
    test_gpu.py runs it over NCCL, whose recorder libstrata_cuda reads from libtorch_cuda."""
    out = st.temp_dir("hang-collective-w1-" + backend)
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, *st.set_args(
        "strategy.name=ddp", "distributed.backend=" + backend, "distributed.force_collectives=true", "train.steps=20",
        "train.threads=1", "distributed.timeout_s=30", "distributed.hang_timeout_s=%d" % HANG_S, *device_sets),
        env={"STRATA_FAULT": "hang-collective:5:0"}, timeout=120)
    expect_no_crash_output(result)
    st.expect_exit(result, 1)
    expect_paragraph(result, 0, "stopped advancing", "in train at step")
    path = os.path.join(out, "comm_trace", "rank_0")
    st.check(os.path.isfile(path), "no flight record at %s" % path, result)
    with open(path, "rb") as f:
        entries = pickle.load(f)["entries"]
    names = sorted({e["profiling_name"] for e in entries})
    st.check(len(entries) >= 4 and all(n.startswith(backend + ":") for n in names)
             and all(e["retired"] for e in entries),
             "the flight record holds %d entries (%s), retired %s: expected at least the 4 collectives of the steps "
             "before the hang, all %s's and completed" % (len(entries), names, [e["retired"] for e in entries], backend),
             result)
    print("  %s: %d collectives in the flight record (%s)" % (backend, len(entries), ", ".join(names)))


def no_fault_trains():
    """fault = "none": the fixture trains like ddp, at world 2, and nothing names a cause."""
    out, result = run("none", 2, 0)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    st.expect_not_in("cause:", result.stderr, result, "stderr")
    summary = st.load_summary(out)
    st.check(summary.get("status") == "ok" and summary.get("steps") == 20, "summary.json: status %r, steps %r"
             % (summary.get("status"), summary.get("steps")), result)


if __name__ == "__main__":
    only = os.environ.get("STRATA_TEST_ONLY")
    cases = [no_fault_trains, oom_kill_is_named_with_the_limit, hung_collective_of_one_rank_leaves_the_flight_record]
    for fault in ("throw-setup", "segfault-step", "exit0-step", "hang-step"):
        cases += [case(fault, 1, 0), case(fault, 2, 1)]
    st.main([c for c in cases if not only or only in c.__name__])
