#!/usr/bin/env python3
"""Real Slurm: a one-node cluster (slurmctld + slurmd from a temporary directory, no munge) runs
`srun -n 2 strata run` as two ranks, and sbatch's batch step is not a rank: a plain run there trains
alone, `--nproc 2` there is exit 2 pointing to srun. test_launchers.py emulates the same with
Slurm's variables; this one checks them against what Slurm really sets (tests/fixtures/slurm holds
captured environments). Skips, saying why, without Slurm's programs (scripts/setup.sh installs
slurm-wlm) or without root; where both are there, daemons that do not bring the node up within
DAEMON_START_S fail every case, with the errors of their logs.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_slurm.py
"""
import os
import random
import shlex
import shutil
import socket
import subprocess
import tempfile
import time

import strata_test as st

DAEMON_START_S = 30    # the daemons answer and the node is idle within this, or every case fails
JOB_TIMEOUT_S = 240    # one srun or sbatch --wait
PROGRAMS = ["slurmctld", "slurmd", "srun", "sbatch", "sinfo", "scancel"]
SETS = ["strategy.name=ddp", "train.steps=12", "train.global_batch_size=16", "log.every=4", "train.threads=1"]

SLURM_CONF = """\
ClusterName=strata{tag}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
FirstJobId={first_job}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


def free_tcp_port():
    return st.free_port()


class Cluster:
    """The daemons of one node, started once for all cases; `skip` says why they cannot be started
    here, `error` why they did not come up."""

    def __init__(self):
        self.dir = None
        self.procs = []
        self.skip = None
        self.error = None
        self.env = None

    def start(self):
        if self.env is not None or self.skip is not None or self.error is not None:
            return
        missing = [p for p in PROGRAMS if shutil.which(p) is None]
        if missing:
            self.skip = "Slurm's %s not found on PATH (apt-get install slurm-wlm)" % ", ".join(missing)
        elif os.geteuid() != 0:
            self.skip = "slurmd must run as root to start tasks (euid %d)" % os.geteuid()
        if self.skip:
            return
        # Not below st.temp_root(): st.main removes that before the daemons are stopped.
        self.dir = tempfile.mkdtemp(prefix="strata-slurm-")
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(self.dir, sub))
        host = socket.gethostname().split(".")[0]
        conf = os.path.join(self.dir, "slurm.conf")
        with open(conf, "w") as f:
            # A random first job id: srun's ranks derive MASTER_PORT from it (20000 + id % 20000),
            # so two clusters of parallel test runs do not pick the same port.
            f.write(SLURM_CONF.format(tag=os.getpid(), host=host, dir=self.dir, ctld_port=free_tcp_port(),
                                      slurmd_port=free_tcp_port(), first_job=random.randint(1000, 19000)))
        env, _ = st._clean_env({"SLURM_CONF": conf})
        for key in [k for k in env if k.startswith(("SLURM_", "PMI_", "OMPI_")) and k != "SLURM_CONF"]:
            del env[key]  # this script may itself run inside a Slurm job
        # `timeout` bounds the daemons' lives should this script be killed before it stops them.
        for args in (["slurmctld", "-D", "-i", "-f", conf], ["slurmd", "-D", "-f", conf, "-N", host]):
            log = open(os.path.join(self.dir, args[0] + ".out"), "w")
            self.procs.append(subprocess.Popen(["timeout", "1800"] + args, stdin=subprocess.DEVNULL, stdout=log,
                                               stderr=subprocess.STDOUT, env=env, cwd=self.dir))
        deadline = time.monotonic() + DAEMON_START_S
        state = ""
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in self.procs):
                break
            r = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=10)
            state = (r.stdout + r.stderr).strip()
            if r.returncode == 0 and state == "idle":
                self.env = env
                return
            time.sleep(0.5)
        ended = ["%s exited %d" % (name, p.returncode)
                 for name, p in zip(("slurmctld", "slurmd"), self.procs) if p.poll() is not None]
        self.error = ("slurmctld + slurmd did not bring node %s to idle%s (sinfo: %r); %s"
                      % (host, ": " + ", ".join(ended) if ended else " within %d s" % DAEMON_START_S, state,
                         self.log_tail()))
        self.stop()

    def log_tail(self, lines=6):
        out = []
        for name in ("slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out"):
            path = os.path.join(self.dir, name)
            if os.path.isfile(path):
                with open(path, errors="replace") as f:
                    tail = [l.rstrip() for l in f.readlines() if "error" in l.lower()][-lines:]
                if tail:
                    out.append("%s: %s" % (name, " | ".join(tail)))
        return "; ".join(out) or "no error lines in the daemons' logs"

    def stop(self):
        if self.env is not None:
            try:  # steps left by a case that timed out
                subprocess.run(["scancel", "--user=root"], env=self.env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []

    def remove(self, keep):
        if self.dir and keep:
            print("kept: %s" % self.dir)
        elif self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, args, timeout=JOB_TIMEOUT_S):
        """Runs a Slurm client command (srun, sbatch ...) in the cluster's environment."""
        self.start()
        if self.skip:
            raise st.Skip(self.skip)
        if self.error:
            st.fail(self.error)
        start = time.monotonic()
        try:
            proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=self.env, cwd=st.scratch_dir(), timeout=timeout, text=True, errors="replace")
        except subprocess.TimeoutExpired as e:
            st.fail("%s did not finish within %d s; %s" % (" ".join(args), timeout, self.log_tail()))
        return st.Result(args, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start,
                         "SLURM_CONF=" + self.env["SLURM_CONF"])


CLUSTER = Cluster()


def strata_cmd(out, *more):
    return [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--out", out] + st.set_args(*SETS) + list(more)


def summaries_under(out):
    found = []
    for root, _, files in os.walk(out):
        found += [root for f in files if f == "summary.json"]
    return found


def expect_trained(out, result, world):
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    runs = summaries_under(out)
    st.check(len(runs) == 1, "expected one summary.json under %s, found %s" % (out, runs), result)
    summary = st.load_summary(runs[0])
    st.check(summary.get("world_size") == world, "world_size %s, expected %d" % (summary.get("world_size"), world),
             result)
    st.check(summary.get("status", "ok") == "ok", "status %s" % summary.get("status"), result)


def batch(out_file, command):
    """`sbatch -n 2 --wait` of a one-line command; the job's output lands in out_file."""
    return CLUSTER.run(["sbatch", "-n", "2", "--wait", "-o", out_file, "--wrap", command])


def read(path):
    if not os.path.isfile(path):
        return ""
    with open(path, errors="replace") as f:
        return f.read()


def srun_two_tasks_train_at_world_two():
    out = st.temp_dir("srun")
    result = CLUSTER.run(["srun", "-n", "2"] + strata_cmd(out))
    expect_trained(out, result, 2)


def batch_step_nproc_is_a_conflict():
    out = st.temp_dir("batch_nproc")
    log = os.path.join(out, "job.out")
    result = batch(log, shlex.join(strata_cmd(out, "--nproc", "2")))
    result.stderr += "\n--- job output (%s) ---\n%s" % (log, read(log))
    st.expect_exit(result, 2)
    st.expect_no_crash(result)
    for fragment in ("SLURM_NTASKS", "--nproc", "srun"):
        st.expect_in(fragment, read(log), result, "the job's output")
    st.check(not summaries_under(out), "a run started despite the conflict: %s" % summaries_under(out), result)


def batch_step_plain_run_trains_alone():
    out = st.temp_dir("batch_plain")
    log = os.path.join(out, "job.out")
    result = batch(log, shlex.join(strata_cmd(out)))
    result.stderr += "\n--- job output (%s) ---\n%s" % (log, read(log))
    expect_trained(out, result, 1)


if __name__ == "__main__":
    code = 1
    try:
        st.main([srun_two_tasks_train_at_world_two, batch_step_nproc_is_a_conflict, batch_step_plain_run_trains_alone])
    except SystemExit as e:
        code = e.code
        raise
    finally:
        CLUSTER.stop()
        CLUSTER.remove(keep=code not in (0, st.SKIP_EXIT_CODE) or os.environ.get("STRATA_TEST_KEEP") == "1")
