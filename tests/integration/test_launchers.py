#!/usr/bin/env python3
"""Real launchers start two ranks of `strata run`: torchrun (the venv's, --no-python), OpenMPI's
mpirun with the output in a file (no progress escapes), a conflicting `--nproc`, a Kubeflow
PyTorchJob node (PET_* variables, strata starts the node's ranks), Slurm's batch step and srun's
tasks (emulated: srun needs a running controller). Each case skips, saying why, when its launcher
is not installed.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_launchers.py
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import strata_test as st

# A two-rank DDP run of the small synthetic experiment: a few seconds on two CPU cores.
SETS = ["strategy.name=ddp", "train.steps=40", "log.every=5"]
TIMEOUT = 180

# Variables of any launcher this test itself may run under (CI inside a Slurm job, say): each case
# sets the ones it means.
LAUNCHER_PREFIXES = ("SLURM_", "OMPI_", "PMIX_", "PMI_", "PET_", "TORCHELASTIC_")
LAUNCHER_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                  "MASTER_PORT", "STRATA_PROGRESS", "STRATA_SPAWNED")


def launcher_env(extra=None):
    """An environment without launcher variables, plus `extra`."""
    env = {k: None for k in os.environ if k.startswith(LAUNCHER_PREFIXES) or k in LAUNCHER_NAMES}
    env.update(extra or {})
    return env


def run_args(out, *more):
    return ["run", st.GOOD_SYNTHETIC, "--out", out] + list(more) + st.set_args(*SETS)


# The torchrun commands put `--` before the program: torchrun's parser also reads options after
# it, and takes strata's `--nproc` for an abbreviation of its --nproc-per-node.
def torchrun():
    """The torchrun next to this Python (the venv's), else on PATH; Skip when there is none."""
    path = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if os.access(path, os.X_OK):
        return path
    path = shutil.which("torchrun")
    if path is None:
        raise st.Skip("torchrun is not installed next to %s nor on PATH (it comes with torch: "
                      "scripts/setup.sh installs it in the venv)" % sys.executable)
    return path


def mpirun():
    path = shutil.which("mpirun")
    if path is None:
        raise st.Skip("mpirun is not on PATH (apt-get install openmpi-bin; scripts/setup.sh does as root)")
    return path


def mpirun_args(np):
    """mpirun -np NP, allowed as root (containers) and on fewer cores than ranks."""
    args = [mpirun(), "-np", str(np), "--oversubscribe"]
    if os.geteuid() == 0:
        args.append("--allow-run-as-root")
    return args


def expect_trained(out, result, world):
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    summary = st.load_summary(out)
    st.check(summary.get("status") == "ok", "summary.json status %r, expected 'ok'" % summary.get("status"), result)
    st.check(summary["world_size"] == world, "summary.json world_size %s, expected %d" % (summary["world_size"], world),
             result)
    st.check(summary["steps"] == 40, "summary.json steps %s, expected 40" % summary["steps"], result)
    return summary


def run_to_file(args, env, log_path, timeout=TIMEOUT):
    """Runs args with stdout and stderr into log_path (as `cmd > log 2>&1`); the Result holds the file."""
    full_env, note = st._clean_env(env)
    start = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=full_env,
                                cwd=st.scratch_dir(), start_new_session=True)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with open(log_path, "rb") as log:
        text = log.read().decode("utf-8", errors="replace")
    result = st.Result(args, "killed (timeout)" if timed_out else proc.returncode, text,
                       "(in the same file)", time.monotonic() - start, note)
    if timed_out:
        st.fail("the command did not finish within %s s" % timeout, result)
    return result


# ---- torchrun ---------------------------------------------------------------------------------

def torchrun_trains():
    """torchrun --standalone --nproc-per-node 2: the ranks join torchrun's agent store as clients
    (no TCPStore bind failure logged) and train at world size 2."""
    out = st.temp_dir("torchrun")
    args = [torchrun(), "--standalone", "--nproc-per-node", "2", "--no-python", "--", st.strata_bin()] + run_args(out)
    result = st.run_command(args, env=launcher_env(), timeout=TIMEOUT)
    expect_trained(out, result, 2)
    for stream, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        st.check(not re.search(r"failed to bind", text, re.I),
                 "%s logs a TCPStore bind failure (rank 0 should join the agent's store as a client)" % stream, result)


def torchrun_nproc_conflict():
    """`strata run --nproc 3` under torchrun's 2 ranks: exit 2 naming both."""
    result = st.run_command([torchrun(), "--standalone", "--nproc-per-node", "2", "--no-python", "--", st.strata_bin()]
                            + run_args(st.temp_dir("conflict"), "--nproc", "3"), env=launcher_env(), timeout=TIMEOUT)
    st.check(result.returncode != 0, "torchrun exited 0 although every rank was given a conflicting --nproc", result)
    output = result.stdout + result.stderr
    # torchrun itself reports a failed child with a Python traceback; the ranks must not crash.
    for marker in st.CRASH_MARKERS:
        st.check(marker.startswith("Traceback") or marker not in output, "a rank crashed (%r)" % marker, result)
    st.check(re.search(r"exitcode\s*:\s*2\b", output) is not None,
             "torchrun's failure report does not show the ranks' exit code 2", result)
    st.check(re.search(r"--nproc[ =]3\b", output) is not None, "the error does not name --nproc 3", result)
    st.check(re.search(r"WORLD_SIZE=2\b", output) is not None, "the error does not name (LOCAL_)WORLD_SIZE=2", result)
    # The same, by hand with torchrun's variables: strata's own exit code and error paragraph.
    port = str(st.free_port())
    env = launcher_env({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "TORCHELASTIC_RUN_ID": "none"})
    result = st.strata(*run_args(st.temp_dir("conflict_env"), "--nproc", "3"), env=env, timeout=60)
    st.expect_clean_failure(result, 2, "--nproc 3", "WORLD_SIZE=2")


def standalone_ignores_launcher():
    """--standalone --nproc 2 inside a launcher's environment starts its own two ranks."""
    out = st.temp_dir("standalone")
    env = launcher_env({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                        "MASTER_ADDR": "192.0.2.1", "MASTER_PORT": "1"})
    result = st.strata(*run_args(out, "--standalone", "--nproc", "2"), env=env, timeout=TIMEOUT)
    expect_trained(out, result, 2)


# ---- OpenMPI ----------------------------------------------------------------------------------

def mpirun_output_in_a_file():
    """mpirun -np 2 > file: world 2, and plain log lines. mpirun gives its ranks a pty even when
    its own output goes to a file, so a terminal test alone would draw the progress bar there."""
    out = st.temp_dir("mpirun")
    log = os.path.join(st.temp_dir("mpirun_log"), "mpirun.log")
    port = str(st.free_port())
    args = mpirun_args(2) + ["-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "TERM", st.strata_bin()] + run_args(out)
    # TERM as a person's shell has it, which is what made the bar appear.
    result = run_to_file(args, launcher_env({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "TERM": "xterm"}), log)
    expect_trained(out, result, 2)
    st.expect_in("done: 40 steps", result.stdout, result, "the log")
    st.check("\r" not in result.stdout, "the log holds carriage returns (a progress bar drawn into a file)", result)
    st.check("\x1b[K" not in result.stdout and "\x1b" not in result.stdout,
             "the log holds terminal escapes (ESC[K of the progress bar)", result)


# ---- Kubeflow PyTorchJob ----------------------------------------------------------------------

def kubeflow_node():
    """A PyTorchJob pod of one node with nprocPerNode 2: the training operator sets RANK to the
    node rank and WORLD_SIZE to nodes x nproc; plain `strata run` starts the node's two ranks."""
    out = st.temp_dir("kubeflow")
    env = launcher_env({"PET_NNODES": "1", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "0", "RANK": "0",
                        "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(st.free_port())})
    result = st.strata(*run_args(out), env=env, timeout=TIMEOUT)
    expect_trained(out, result, 2)


def kubeflow_two_pods():
    """Two pods (Master and Worker) of one rank each on this host: global ranks from PET_NODE_RANK."""
    out = st.temp_dir("kubeflow2")
    port = str(st.free_port())
    procs = []
    for node in range(2):
        env, _ = st._clean_env(launcher_env({
            "PET_NNODES": "2", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": str(node), "RANK": str(node),
            "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}))
        procs.append(subprocess.Popen([st.strata_bin()] + run_args(out), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=st.scratch_dir()))
    results = wait_all(procs, "pod")
    for node, result in enumerate(results):
        st.expect_exit(result, 0)
        st.expect_no_crash(result)
    summary = st.load_summary(out)
    st.check(summary.get("status") == "ok" and summary["world_size"] == 2,
             "summary.json status %r world_size %s, expected ok and 2" % (summary.get("status"), summary["world_size"]),
             results[0])


# ---- Slurm (emulated) ---------------------------------------------------------------------------

SLURM_JOB = {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2", "SLURM_NODEID": "0",
             "SLURM_JOB_NODELIST": "localhost", "SLURM_NNODES": "1"}


def slurm_batch_step():
    """The batch script of an sbatch job (no SLURM_STEP_ID) is not rank 0 of SLURM_NTASKS ranks:
    a plain run trains alone, and --nproc 2 there is exit 2 pointing to srun."""
    env = launcher_env(dict(SLURM_JOB, SLURM_PROCID="0", SLURM_LOCALID="0"))
    result = st.strata(*run_args(st.temp_dir("batch_nproc"), "--nproc", "2"), env=env, timeout=60)
    st.expect_clean_failure(result, 2, "--nproc 2", "srun")
    out = st.temp_dir("batch")
    result = st.strata(*run_args(out), env=env, timeout=TIMEOUT)
    expect_trained(out, result, 1)


def srun_tasks():
    """Two tasks of an srun step, started by hand with Slurm's variables (srun needs a controller):
    master from the step's node list, world 2."""
    out = st.temp_dir("srun")
    port = str(st.free_port())
    procs = []
    for task in range(2):
        env, _ = st._clean_env(launcher_env(dict(SLURM_JOB, SLURM_STEP_ID="0", SLURM_PROCID=str(task),
                                                 SLURM_LOCALID=str(task), SLURM_STEP_NODELIST="localhost",
                                                 MASTER_PORT=port)))
        procs.append(subprocess.Popen([st.strata_bin()] + run_args(out), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=st.scratch_dir()))
    results = wait_all(procs, "task")
    for result in results:
        st.expect_exit(result, 0)
        st.expect_no_crash(result)
    summary = st.load_summary(out)
    st.check(summary.get("status") == "ok" and summary["world_size"] == 2,
             "summary.json status %r world_size %s, expected ok and 2" % (summary.get("status"), summary["world_size"]),
             results[0])


def wait_all(procs, what):
    """Waits for every process (TIMEOUT in all); kills the rest and fails on a timeout."""
    results, deadline = [], time.monotonic() + TIMEOUT
    for i, p in enumerate(procs):
        start = time.monotonic()
        try:
            stdout, stderr = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            st.fail("%s %d did not finish within %d s" % (what, i, TIMEOUT))
        results.append(st.Result(p.args, p.returncode, stdout.decode(errors="replace"),
                                 stderr.decode(errors="replace"), time.monotonic() - start))
    return results


if __name__ == "__main__":
    st.main([torchrun_trains, torchrun_nproc_conflict, standalone_ignores_launcher, mpirun_output_in_a_file,
             kubeflow_node, kubeflow_two_pods, slurm_batch_step, srun_tasks])
