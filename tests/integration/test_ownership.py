#!/usr/bin/env python3
"""Nothing lost: a run owns its checkpoint root and its directory, and a resume writes only where it
is pointed. Each case is a hostile user's move; the victim's files are compared byte for byte
(names, sizes, mtimes, contents) before and after.

  - two runs given one absolute [checkpoint] dir: the second is refused before training, the first's
    checkpoints stay, and its `--resume auto` continues from its own;
  - a step directory another run wrote survives the owner's clean-up (keep = 1);
  - `--resume DIR` while DIR's run trains is refused (its lock); after a kill -9 the lock does not
    block the resume;
  - a resume of a `cp -a` copy, or of one of its checkpoints, writes into the copy only; `--out`
    elsewhere makes a new run and leaves the original as it was;
  - damage to a checkpoint (a flipped bit in metadata.json's keys or step, a flipped byte in a shard)
    is named (exit 1) by `run --resume` and `export`, with nothing written; a resume with no steps
    left exits 0 and adds no segment; a shard group that does not divide the world is refused
    before the run directory is opened.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_ownership.py
"""
import json
import os
import shutil
import signal
import subprocess
import time

import strata_test as st
from test_resume import expect_unchanged, snapshot

FAST = ["train.steps=10", "log.every=5", "checkpoint.every=5", "checkpoint.keep=0"]


def run(out, *sets, expect=0, nproc=None, resume=None, config=st.GOOD_SYNTHETIC):
    args = ["run", config]
    if out is not None:
        args += ["--out", out]
    if resume is not None:
        args += ["--resume", resume]
    if nproc is not None:
        args += ["--nproc", nproc]
    result = st.strata(*args, *st.set_args(*sets), timeout=240)
    if expect is not None:
        st.expect_exit(result, expect)
        st.expect_no_crash(result)
    return result


def steps_of(root):
    return sorted(n for n in os.listdir(root) if n.startswith("step_"))


def shared_checkpoint_root_is_refused():
    base = st.temp_dir("shared")
    root = os.path.join(base, "ckpts")
    first, second = os.path.join(base, "first"), os.path.join(base, "second")
    run(first, *FAST, "checkpoint.dir=" + root)
    st.check(steps_of(root) == ["step_00000005", "step_00000010"], "first run's root holds %r" % steps_of(root))
    before = snapshot(root)
    result = run(second, *FAST, "checkpoint.dir=" + root, expect=2)
    st.expect_stderr(result, "belongs to the run in " + first)
    st.expect_stderr(result, "checkpoint.dir")
    expect_unchanged(before, snapshot(root), "a second run on the same checkpoint root")
    st.check(not os.path.exists(second), "the refused run created %s" % second, result)
    # A step directory another run wrote (planted) is never removed by the owner's clean-up.
    planted = os.path.join(root, "step_00000001")
    shutil.copytree(os.path.join(root, "step_00000005"), planted)
    with open(os.path.join(planted, ".strata-owner"), "w") as f:
        f.write("run someone-else\n")
    # The owner continues from its own latest checkpoint and keeps one.
    result = run(first, "train.steps=15", "log.every=5", "checkpoint.every=5", "checkpoint.keep=1",
                 "checkpoint.dir=" + root, resume="auto")
    st.expect_in("step 10", result.stdout + result.stderr, result, "the resume's log")
    st.check(steps_of(root) == ["step_00000001", "step_00000015"], "after keep = 1: %r" % steps_of(root), result)


def live_directory_is_locked_until_its_run_dies():
    base = st.temp_dir("live")
    out = os.path.join(base, "run")
    env, _ = st._clean_env()
    args = [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--out", out,
            *st.set_args("train.steps=1000000", "log.every=1000", "checkpoint.every=2", "checkpoint.keep=1")]
    proc = subprocess.Popen([str(a) for a in args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (os.path.isdir(os.path.join(out, "checkpoints")) and steps_of(os.path.join(out, "checkpoints"))
                   and any(os.path.isfile(os.path.join(out, "checkpoints", s, "metadata.json"))
                           for s in steps_of(os.path.join(out, "checkpoints")))):
            st.check(proc.poll() is None, "the training run ended (%s) before its first checkpoint" % proc.returncode)
            st.check(time.monotonic() < deadline, "no checkpoint within 120 s")
            time.sleep(0.2)
        writers = [proc.pid] + st.child_pids(proc.pid)  # the run, or its supervised rank, holds the lock
        for resume in (out, "auto"):
            result = run(out, "train.steps=1000001", resume=resume, expect=2)
            st.expect_stderr(result, "is in use")
            st.check(any("pid %d " % pid in result.stderr for pid in writers),
                     "the refusal names none of the live run's processes %r" % writers, result)
        result = run(out, expect=2)  # a fresh run into it: already holds a run
        st.expect_stderr(result, "already holds a run")
        st.check(proc.poll() is None, "the live run died while others were refused (%s)" % proc.returncode)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    # The dead run's lock does not block its resume.
    result = run(out, "train.steps=4", "log.every=1", "checkpoint.every=2", resume=out, expect=None)
    if result.returncode == 0:
        st.check(st.load_summary(out)["steps"] >= 4, "resumed summary", result)
    else:  # it had trained past 4 steps: steps below the checkpoint's are refused, not locked
        st.expect_exit(result, 2)
        st.expect_stderr(result, "train.steps")
        st.expect_not_in("is in use", result.stderr, result, "stderr")


def resume_writes_only_where_it_is_pointed():
    base = st.temp_dir("copy")
    original, copy, elsewhere = (os.path.join(base, n) for n in ("original", "copy", "elsewhere"))
    run(original, *FAST)
    subprocess.run(["cp", "-a", original, copy], check=True)
    before = snapshot(original)
    run(None, "train.steps=15", "log.every=5", "checkpoint.every=5", "checkpoint.keep=1", resume=copy)
    st.check(st.load_summary(copy)["steps"] == 15, "the copy resumed to %r" % st.load_summary(copy)["steps"])
    run(None, "train.steps=20", "log.every=5", "checkpoint.every=5", "checkpoint.keep=1",
        resume=os.path.join(copy, "checkpoints", "step_00000015"))
    st.check(st.load_summary(copy)["steps"] == 20, "the copy's checkpoint resumed into %r" % copy)
    run(elsewhere, "train.steps=15", "log.every=5", resume=original)
    st.check(st.load_summary(elsewhere)["steps"] == 15, "--out elsewhere: a new run from the checkpoint")
    st.check(os.path.isfile(os.path.join(elsewhere, ".strata-run")), "--out elsewhere is not a run directory")
    expect_unchanged(before, snapshot(original), "resumes of a copy and --out elsewhere")
    # A root outside the run by a relative path ("../"): a copy shares it with its original, so the
    # copy's resume is refused and the original's checkpoints stay.
    outside = os.path.join(base, "outside")
    run(outside, *FAST, "checkpoint.dir=../outside_ckpts")
    subprocess.run(["cp", "-a", outside, outside + "_copy"], check=True)
    root = os.path.join(base, "outside_ckpts")
    before = snapshot(root)
    result = run(None, "train.steps=15", "log.every=5", "checkpoint.every=5", "checkpoint.keep=1",
                 "checkpoint.dir=../outside_ckpts", resume=outside + "_copy", expect=2)
    st.expect_stderr(result, "of which this run is a copy")
    expect_unchanged(before, snapshot(root), "the resume of a copy sharing its original's root")


def flip(path, offset, bit=0x01):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ bit]))


def damaged_or_empty_resume_changes_nothing():
    base = st.temp_dir("damage")
    out = os.path.join(base, "run")
    run(out, *FAST)
    step = os.path.join(out, "checkpoints", "step_00000010")
    meta = os.path.join(step, "metadata.json")
    with open(meta, "rb") as f:
        text = f.read()
    cases = [("a key name", text.index(b'"tensors"') + 2), ("the step", text.index(b'"step":10') + 8)]
    for what, offset in cases:
        flip(meta, offset)
        before = snapshot(out)
        for args in (["run", st.GOOD_SYNTHETIC, "--resume", out, "--set", "train.steps=20"],
                     ["export", step, "--to", os.path.join(base, "exported.safetensors")]):
            result = st.strata(*args, timeout=120)
            st.expect_exit(result, 1)
            st.expect_no_crash(result)
            st.expect_stderr(result, meta)
        expect_unchanged(before, snapshot(out), "a resume of a checkpoint with a damaged " + what)
        st.check(not os.path.exists(os.path.join(base, "exported.safetensors")), "export of damage wrote a file")
        flip(meta, offset)  # mended
    shard = os.path.join(step, "rank_00000.bin")
    flip(shard, os.path.getsize(shard) // 2)
    before = snapshot(out)
    result = run(None, "train.steps=20", resume=out, expect=1)
    st.expect_stderr(result, shard)
    expect_unchanged(before, snapshot(out), "a resume of a checkpoint with a damaged shard")
    flip(shard, os.path.getsize(shard) // 2)
    before = snapshot(out)
    # No steps left: said, exit 0, nothing written (no 0-step segment).
    result = run(None, "train.steps=10", resume=out)
    st.expect_stderr(result, "nothing to train")
    expect_unchanged(before, snapshot(out), "a resume with no steps left")
    # A shard group that does not divide the world: refused before the directory is touched.
    result = run(None, "train.steps=20", "strategy.name=fsdp", "strategy.sharding_strategy=HYBRID_SHARD",
                 "strategy.shard_group_size=3", resume=out, nproc=2, expect=2)
    st.expect_stderr(result, "does not divide")
    expect_unchanged(before, snapshot(out), "a resume refused for its shard groups")
    with open(meta) as f:
        st.check(json.load(f)["step"] == 10, "metadata.json no longer reads step 10")


if __name__ == "__main__":
    st.main([shared_checkpoint_root_is_refused, live_directory_is_locked_until_its_run_dies,
             resume_writes_only_where_it_is_pointed, damaged_or_empty_resume_changes_nothing])
