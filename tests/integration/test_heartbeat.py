#!/usr/bin/env python3
"""`strata run --nproc 2` when a rank stops, dies or the launcher is told to stop, mid-run: the job
ends within [distributed] heartbeat_s of a stopped rank, the launcher names the rank that caused
the end (not the first to exit) in a "cause" line and returns its code (128 + signal), and
summary.json says how the run ended (status, error, failed_rank), written by the launcher when
rank 0 could not. And the job listens on loopback only, and a stranger who writes its store's keys
cannot end it.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_heartbeat.py
"""
import json
import os
import pickle
import re
import signal
import socket
import sys
import time

import strata_test as st

HEARTBEAT_S = 5
SLACK_S = 5          # the job ends within heartbeat_s + this after a rank stops
SETS = ["strategy.name=ddp", "train.steps=1000000", "train.global_batch_size=16", "log.every=200",
        "train.threads=1", "distributed.heartbeat_s=%d" % HEARTBEAT_S]
STRANGER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "store_stranger.py")


class Job:
    """`strata run GOOD_SYNTHETIC --nproc 2` with SETS, started in a session of its own, running
    training steps on return; killed with everything it started when the case ends."""

    def __init__(self, label, **extra_env):
        self.out = st.temp_dir(label)
        args = [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--out", self.out, "--nproc", "2"] + st.set_args(*SETS)
        env, _ = st._clean_env()
        env.update(extra_env)
        self.launcher = st.Watched("launcher", args, env)
        self.ranks = {}

    def __enter__(self):
        try:
            self._wait_for_training()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_for_training(self):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.launcher.proc.poll() is None:
            children = st.child_pids(self.launcher.proc.pid)
            self.ranks = {st.rank_of_process(pid): pid for pid in children}
            if len(self.ranks) == 2 and self.launcher.wait_for_line(r"\bstep +\d+/", 0):
                break
            time.sleep(0.2)
        st.check(sorted(self.ranks) == [0, 1] and self.launcher.wait_for_line(r"\bstep +\d+/", 0),
                 "the launcher did not reach training steps with ranks 0 and 1 within 120 s (ranks: %s)"
                 % self.ranks, self.result())
        time.sleep(1)  # well into training

    def __exit__(self, *exc):
        for pid in self.ranks.values():
            try:
                os.kill(pid, signal.SIGKILL)  # a stopped rank too
            except ProcessLookupError:
                pass
        self.launcher.kill()
        return False

    def signal(self, target, sig):
        """Sends `sig` to rank `target` (0, 1) or to the launcher ("launcher"); returns the time."""
        pid = self.launcher.proc.pid if target == "launcher" else self.ranks[target]
        os.kill(pid, sig)
        return time.monotonic()

    def end(self, since, bound, what):
        """Waits for the launcher to exit; fails when it took more than `bound` s after `since`."""
        code = self.launcher.wait(bound + 60)
        if code is None:
            st.fail("the launcher was still running %d s after %s" % (bound + 60, what), self.result())
        took = self.launcher.ended_at - since
        print("  launcher exited %s %.1f s after %s" % (code, took, what))
        st.check(took <= bound, "the launcher ended %.1f s after %s; expected within %d s" % (took, what, bound),
                 self.result())
        st.expect_no_crash(self.result())
        return self.result()

    def result(self):
        return self.launcher.result()

    def summary(self):
        return st.load_summary(self.out)


def cause_line(result, rank):
    """The launcher's line that has "cause" and names `rank`; fails without one."""
    text = result.stdout + result.stderr
    lines = [l for l in text.splitlines() if "cause" in l and re.search(r"\brank %d\b" % rank, l)]
    st.check(lines, "no line with \"cause\" naming rank %d in the launcher's output" % rank, result)
    print("  " + lines[0].strip())
    return lines[0]


def expect_summary(job, status, failed_rank, result):
    summary = job.summary()
    st.check(summary.get("status") == status, "summary.json: status %r, expected %r (error %r)"
             % (summary.get("status"), status, summary.get("error")), result)
    if status != "ok":
        st.check(isinstance(summary.get("error"), str) and summary["error"].strip(),
                 "summary.json has no error paragraph: %r" % summary.get("error"), result)
    st.check(summary.get("failed_rank") == failed_rank, "summary.json: failed_rank %r, expected %r"
             % (summary.get("failed_rank"), failed_rank), result)
    return summary


def sigstop_of_rank_1_ends_the_job():
    with Job("sigstop") as job:
        stopped_at = job.signal(1, signal.SIGSTOP)
        result = job.end(stopped_at, HEARTBEAT_S + SLACK_S, "SIGSTOP of rank 1")
        cause_line(result, 1)
        st.expect_exit(result, 128 + signal.SIGSTOP)
        expect_summary(job, "failed", 1, result)


def sigterm_to_the_launcher_interrupts():
    with Job("sigterm") as job:
        sent_at = job.signal("launcher", signal.SIGTERM)
        result = job.end(sent_at, 30, "SIGTERM to the launcher")
        st.expect_exit(result, 128 + signal.SIGTERM)
        expect_summary(job, "interrupted", None, result)


def _sigkill_is_named(rank, label):
    with Job(label) as job:
        killed_at = job.signal(rank, signal.SIGKILL)
        result = job.end(killed_at, 30, "SIGKILL of rank %d" % rank)
        line = cause_line(result, rank)
        st.check("SIGKILL" in line, "the cause line does not name SIGKILL: %r" % line, result)
        st.expect_exit(result, 128 + signal.SIGKILL)
        expect_summary(job, "failed", rank, result)


def sigkill_of_rank_1_is_named():
    _sigkill_is_named(1, "sigkill1")


def sigkill_of_rank_0_launcher_writes_the_summary():
    _sigkill_is_named(0, "sigkill0")


def listeners(pids):
    """The TCP sockets in LISTEN state that the processes `pids` hold: (address, port) pairs, from
    /proc/net/tcp{,6} and each process's descriptors."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            pass
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] != "0A" or fields[9] not in inodes:
                    continue
                address, port = fields[1].split(":")
                raw = bytes.fromhex(address)
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # little-endian words
                found.append((socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, words),
                              int(port, 16)))
    return found


def one_host_job_listens_on_loopback_only_and_ignores_strangers():
    """A `--nproc 2` job: every listening socket of its processes (rank 0's store, both ranks'
    Gloo) is on loopback; a stranger on this host who writes the store's keys (a forged abort and
    verdicts, another run directory, non-numbers in every key it lists) changes nothing: the job
    trains on, and a SIGTERM afterwards ends it "interrupted" with no verdict of the stranger's.
    Its ranks are started afresh (STRATA_FORK_RANKS=0), so that /proc shows the secret and port the
    launcher gave them (a forked rank sets them in its own memory; the other cases run forked ranks,
    whose sealed aborts and verdicts need that very secret)."""
    with Job("loopback", STRATA_FORK_RANKS="0") as job:
        pids = [job.launcher.proc.pid] + list(job.ranks.values())
        found = listeners(pids)
        st.check(found, "the job's processes hold no listening TCP socket", job.result())
        outside = [(a, p) for a, p in found if not (a.startswith("127.") or a in ("::1", "::ffff:127.0.0.1"))]
        print("  listening: %s" % ", ".join("%s:%d" % lp for lp in sorted(found)))
        st.check(not outside, "the job listens outside loopback: %s" % outside, job.result())
        with open("/proc/%d/environ" % job.ranks[0], "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        secret, port = env.get(b"STRATA_JOB_SECRET", b"").decode(), int(env[b"MASTER_PORT"])
        st.check(re.fullmatch(r"[0-9a-f]{32}", secret), "rank 0 got no 128-bit STRATA_JOB_SECRET from the launcher")
        stranger = st.run_command([sys.executable, STRANGER, "127.0.0.1", str(port)], timeout=60)
        st.check(stranger.returncode == 0, "the stranger could not reach the store", stranger)
        seen = json.loads(stranger.stdout.strip().splitlines()[-1])
        st.check(secret.encode().hex() not in "".join(seen["values"].values()) and secret not in str(seen["keys"]),
                 "the store shows the job's secret to a stranger", stranger)
        steps = len(re.findall(r"\bstep +\d+/", job.launcher.text("stdout") + job.launcher.text("stderr")))
        time.sleep(3)  # three beats: each rank reads the abort key and every counter again
        st.check(job.launcher.proc.poll() is None, "the job ended after a stranger wrote to its store", job.result())
        sent_at = job.signal("launcher", signal.SIGTERM)
        result = job.end(sent_at, 30, "SIGTERM to the launcher")
        st.expect_exit(result, 128 + signal.SIGTERM)
        expect_summary(job, "interrupted", None, result)
        st.check(secret not in result.stdout + result.stderr, "the job printed its secret", result)
        for forged in ("a stranger wrote this verdict", "a-stranger-chose-this"):
            st.expect_not_in(forged, result.stdout + result.stderr, result)
        st.check(steps >= 1, "no step line before the stranger", result)


def hung_collective_ends_with_a_verdict():
    """Rank 1 never issues its 5th collective of the steps (STRATA_FAULT=hang-collective:5:1): both ranks
    are alive, rank 0 waits in that all-reduce, rank 1 where it would have issued it. With timeout_s =
    20 the hang watch (half of it) ends the job within timeout_s + 5 s of its start, before Gloo's own
    timeout would, and summary.json says which collective each rank issued last, per communicator, in
    which phase and at which step, and names rank 1, which stopped first (it issued one fewer)."""
    timeout_s = 20
    out = st.temp_dir("hang")
    env = {"STRATA_FAULT": "hang-collective:5:1"}
    start = time.monotonic()
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", 2,
                       *st.set_args("strategy.name=ddp", "train.steps=200", "train.global_batch_size=16", "log.every=50",
                                    "train.threads=1", "distributed.timeout_s=%d" % timeout_s,
                                    "distributed.heartbeat_s=30"), env=env, timeout=120)
    elapsed = time.monotonic() - start
    st.check(result.returncode not in (0, 2), "a hung job must fail", result)
    st.check(elapsed < timeout_s + SLACK_S, "the hang ended after %.1f s (timeout_s %d)" % (elapsed, timeout_s), result)
    summary = st.load_summary(out)
    st.check(summary["status"] == "failed", "status %r" % summary["status"])
    error = summary.get("error", "")
    for fragment in ("a collective hangs", "rank 0 in train, step 5", "rank 1 in train, step 5", "all_reduce #",
                     "last collectives", "rank 1 stopped first"):
        st.expect_in(fragment, error, result, "summary.json's error")
    st.check(summary.get("failed_rank") == 1, "failed_rank %r: the rank that never issued its collective is 1"
             % summary.get("failed_rank"), result)
    # c10d's flight recorder says which collective did not complete: rank 0's all-reduce, which
    # rank 1 never joined; rank 1 has none pending.
    # (When strata's launcher wrote summary.json, its error ends with where the failed rank was.)
    pending = re.findall(r"rank (\d) in train, step \d+, last collectives: .*?, not completed: (.*?)"
                         r"(?=\. rank \d in | in \w+ at step \d+$|$)", error)
    st.check(len(pending) == 2 and pending[0][0] == "0" and pending[0][1].startswith("all_reduce of 676 Float")
             and "scheduled" in pending[0][1] and pending[1] == ("1", "none"),
             "the verdict does not name rank 0's all-reduce as not completed and none for rank 1: %r" % pending, result)
    # ... and its record of each rank lands beside the verdict, as PyTorch's analyser reads it.
    traces = {}
    for r in (0, 1):
        path = os.path.join(out, "comm_trace", "rank_%d" % r)
        st.check(os.path.isfile(path), "no flight-recorder dump %s" % path, result)
        with open(path, "rb") as f:
            traces[r] = pickle.load(f)["entries"]
    active = [[e["profiling_name"] for e in traces[r] if not e["retired"]] for r in (0, 1)]
    st.check(active == [["gloo:all_reduce"], []] and len(traces[0]) == len(traces[1]) + 1,
             "the dumps do not show rank 0's one all-reduce more, not completed: %r, %d and %d entries"
             % (active, len(traces[0]), len(traces[1])), result)
    print("  ended after %.1f s: %s" % (elapsed, error[:300]))


if __name__ == "__main__":
    only = os.environ.get("STRATA_TEST_ONLY")
    cases = [sigstop_of_rank_1_ends_the_job, sigterm_to_the_launcher_interrupts, sigkill_of_rank_1_is_named,
             sigkill_of_rank_0_launcher_writes_the_summary, hung_collective_ends_with_a_verdict,
             one_host_job_listens_on_loopback_only_and_ignores_strangers]
    st.main([c for c in cases if not only or c.__name__ == only])
