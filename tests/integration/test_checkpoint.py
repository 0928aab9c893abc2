#!/usr/bin/env python3
"""Checkpoints: exact resume, resharding across world sizes and strategies, faults, restarts, export.

- Exact: every strategy at world sizes 1-3, with accumulation and warmup + cosine, resumed from
  its own checkpoint at step 10 ends at step 20 with the uninterrupted run's model bit for bit and
  the same loss curve.
- Resharding: zero3 at world 2 saved at step 10, resumed as fsdp at 3, single, ddp at 3 and zero1 at
  2: the uninterrupted model within 1e-6 relative, tensor by tensor (optimizer state included:
  AdamW's moments would show otherwise).
- Faults: a rank killed (SIGKILL) in the middle of a save leaves the previous checkpoint, which
  --resume picks; a full disk (a file-size limit) is an error naming the file; a corrupted or
  truncated shard is named on load; keys that differ are exit 2 naming them.
- Asynchronous saves ([checkpoint] async): the same training and checkpoints as synchronous ones,
  exact resume, and a kill -9 while the writer thread writes leaves the previous one resumable.
- --max-restarts 1 with a rank killed mid-run finishes with the undisturbed model, the restart
  counted; TensorBoard shows every step once.
- strata export writes the model as .pt, .safetensors and a directory, loadable by init_from.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_checkpoint.py
"""
import json
import os
import resource
import signal
import subprocess
import time

import strata_test as st

RESHARD_RTOL = 1e-6
BASE = ["train.steps=20", "train.global_batch_size=24", "train.micro_batches=2", "train.lr_schedule=cosine",
        "train.warmup_steps=4", "log.every=1", "train.save_final=true", "checkpoint.every=10",
        "model.hidden=[48]"]
# (label, overrides, world) of the exact-resume matrix
EXACT = [
    ("single", ["strategy.name=single"], 1),
    ("dp", ["strategy.name=dp", "strategy.replicas=2"], 1),
    ("ddp2", ["strategy.name=ddp"], 2),
    ("ddp3_sgd", ["strategy.name=ddp", "optimizer.name=sgd", "optimizer.lr=0.1", "optimizer.momentum=0.9"], 3),
    ("zero1_3", ["strategy.name=zero1"], 3),
    ("zero2_2", ["strategy.name=zero2"], 2),
    ("zero3_1", ["strategy.name=zero3"], 1),
    ("zero3_3", ["strategy.name=zero3"], 3),
    ("fsdp2", ["strategy.name=fsdp"], 2),
    ("fsdp3_hybrid", ["strategy.name=fsdp", "strategy.sharding_strategy=HYBRID_SHARD"], 3),
]


def run(label, sets, world=1, extra=(), expect=0, env=None, out=None):
    out = out or st.temp_dir(label)
    args = ["run", st.GOOD_SYNTHETIC, "--out", out] + list(extra)
    if world > 1:
        args += ["--nproc", world]
    result = st.strata(*args, *st.set_args(*(BASE + list(sets))), env=env, timeout=300)
    if expect is not None:
        st.expect_exit(result, expect)
        st.expect_no_crash(result)
    return out, result


def step_dir(run_dir, step):
    return os.path.join(run_dir, "checkpoints", "step_%08d" % step)


def curve(run_dir):
    return st.load_summary(run_dir)["loss_curve"]


def expect_bitwise(reference, candidate, what):
    diff = st.expect_models_equal(reference, candidate, what, rel=0.0)
    st.check(curve(reference) == curve(candidate), "%s: the loss curves differ:\n%s\n%s"
             % (what, curve(reference), curve(candidate)))
    return diff


def exact_resume_every_strategy():
    for label, sets, world in EXACT:
        full, _ = run("full_" + label, sets, world)
        st.check(os.path.isfile(os.path.join(step_dir(full, 10), "metadata.json")), label + ": no checkpoint at 10")
        resumed, result = run("resumed_" + label, sets, world, ["--resume", step_dir(full, 10)])
        st.expect_in("resumed from", result.stdout, result)
        expect_bitwise(full, resumed, label + " resumed at 10")
        summary = st.load_summary(resumed)
        st.check(summary["checkpoint"]["resumed_step"] == 10 and summary["steps"] == 20,
                 "%s: resumed summary: %s" % (label, summary["checkpoint"]))
        print("  %s (world %d): bit for bit, %d loss points" % (label, world, len(curve(resumed))))


def reshard_across_strategies_and_world_sizes():
    full, _ = run("reshard_full", ["strategy.name=zero3"], 2)
    for label, sets, world in [("fsdp3", ["strategy.name=fsdp"], 3), ("single", ["strategy.name=single"], 1),
                               ("ddp3", ["strategy.name=ddp"], 3), ("zero1_2", ["strategy.name=zero1"], 2),
                               ("zero2_3_m3", ["strategy.name=zero2", "train.micro_batches=1"], 3)]:
        out, result = run("reshard_" + label, sets, world, ["--resume", step_dir(full, 10)])
        diff = st.expect_models_equal(full, out, "zero3@2 -> %s" % label, rel=RESHARD_RTOL)
        losses = [l for _, l in curve(out)]
        reference = [l for _, l in curve(full)]
        for a, b in zip(losses, reference):
            st.expect_close(a, b, label + " loss curve", rel=1e-5)
        if world != 2:
            st.expect_in("random generators not restored", result.stdout, result)
        print("  zero3@2 -> %s@%d: max rel diff %.1e" % (label, world, diff))


def killed_in_save_then_resumed(label, sets, rank, undisturbed):
    """`rank` of a world-2 run killed (SIGKILL) while it writes the checkpoint of step 20: the job
    fails naming it, step 10 stays committed and step 20 is not, and --resume of the run directory
    continues from step 10 to the undisturbed model bit for bit."""
    out, result = run("%s_r%d" % (label, rank), sets, 2, expect=None, env={"STRATA_FAULT": "kill-in-save:20:%d" % rank})
    st.check(result.returncode != 0, "a rank killed in a save must fail the job", result)
    st.expect_in("rank %d was killed by signal 9" % rank, result.stderr, result)
    st.check(os.path.isfile(os.path.join(step_dir(out, 10), "metadata.json")), "step 10 must stay complete")
    st.check(not os.path.isfile(os.path.join(step_dir(out, 20), "metadata.json")),
             "the interrupted step 20 must not be committed", result)
    resumed, result = run("%s_resumed_r%d" % (label, rank), sets, 2, ["--resume", out], out=out)
    st.expect_in("step_00000010", result.stdout, result)
    expect_bitwise(undisturbed, resumed, "%s: resumed after rank %d was killed in a save" % (label, rank))


def kill_during_save_keeps_previous():
    sets = ["strategy.name=zero2"]
    undisturbed, _ = run("kill_ref", sets, 2)
    for rank in (1, 0):
        killed_in_save_then_resumed("kill_save", sets, rank, undisturbed)
    # Naming the incomplete checkpoint itself is refused.
    out, result = run("kill_save_direct", sets, 2, expect=None, env={"STRATA_FAULT": "kill-in-save:20:1"})
    _, result = run("kill_save_direct2", sets, 2, ["--resume", step_dir(out, 20)], expect=2)
    st.expect_in("incomplete", result.stderr, result)


def async_saves_resume_exactly_and_survive_a_kill():
    """[checkpoint] async = true: the run trains exactly as without it (the save copies the state
    and goes on), each checkpoint resumes bit for bit, a kill -9 of a rank while the writer thread
    writes step 20 leaves step 10 committed and resumable."""
    sets = ["strategy.name=zero2", "checkpoint.async=true"]
    undisturbed, _ = run("async_ref", ["strategy.name=zero2"], 2)
    # The writer waits 2 s before it writes: training runs on meanwhile (what it writes must be the
    # copy made at the save), and the save of step 20 waits for the one of step 10.
    full, result = run("async_full", sets, 2, env={"STRATA_FAULT": "slow-writer:2"})
    st.expect_in("written in the background", result.stdout, result)
    st.expect_in("checkpoint at step 20 waits for the one of step 10", result.stdout, result)
    expect_bitwise(undisturbed, full, "the async run against the synchronous one")
    summary = st.load_summary(full)["checkpoint"]
    # stall_s: the training thread's time in the saves, here mostly step 20's wait for step 10's.
    st.check(summary["async"] is True and summary["saves"] == 2 and summary["stall_s"] > 1.0,
             "async checkpoint summary: %s" % summary)
    resumed, result = run("async_resumed", sets, 2, ["--resume", step_dir(full, 10)])
    st.expect_in("resumed from", result.stdout, result)
    expect_bitwise(undisturbed, resumed, "resumed from an async checkpoint")
    for rank in (0, 1):
        killed_in_save_then_resumed("async_kill", sets, rank, undisturbed)


def full_disk_is_named():
    out, _ = run("disk", ["strategy.name=single", "train.steps=10", "model.hidden=[512]"])
    limit = 64 * 1024  # the checkpoint's rank file is ~ 3 x 4 x 9 k parameters: over the limit

    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env, _ = st._clean_env()
    args = [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--out", out, "--resume", out] + st.set_args(
        *(BASE + ["strategy.name=single", "model.hidden=[512]", "log.every=10"]))
    proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, preexec_fn=limited, timeout=300, cwd=st.scratch_dir())
    st.check(proc.returncode == 1, "a failed save must fail the run, got exit %s:\n%s" % (proc.returncode, proc.stderr))
    st.expect_in("rank_00000.bin", proc.stderr)
    st.expect_in("File too large", proc.stderr)
    st.check("Traceback" not in proc.stderr and "terminate called" not in proc.stderr, proc.stderr)
    st.check(os.path.isfile(os.path.join(step_dir(out, 10), "metadata.json")), "step 10 must stay intact")
    st.check(not os.path.isfile(os.path.join(step_dir(out, 20), "metadata.json")), "step 20 must not be committed")
    _, result = run("disk_again", ["strategy.name=single", "model.hidden=[512]"], 1, ["--resume", out], out=out)
    st.expect_in("resumed from", result.stdout, result)
    st.check(not os.path.isdir(step_dir(out, 20)) or os.path.isfile(os.path.join(step_dir(out, 20), "metadata.json")),
             "the incomplete step 20 must be replaced")


def damaged_shards_are_named():
    full, _ = run("damage", ["strategy.name=zero3"], 2)
    shard = os.path.join(step_dir(full, 10), "rank_00001.bin")
    with open(shard, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 0x40]))
    _, result = run("damage_corrupt", ["strategy.name=fsdp"], 3, ["--resume", step_dir(full, 10)], expect=None)
    st.check(result.returncode != 0, "a corrupted shard must not load", result)
    st.expect_in("rank_00001.bin is corrupted", result.stderr, result)
    shard = os.path.join(step_dir(full, 20), "rank_00000.bin")
    os.truncate(shard, os.path.getsize(shard) - 8)
    _, result = run("damage_truncated", ["strategy.name=single"], 1, ["--resume", step_dir(full, 20)], expect=None)
    st.check(result.returncode != 0, "a truncated shard must not load", result)
    st.expect_in("truncated", result.stderr, result)
    st.expect_error_paragraph(result)


def differing_keys_are_exit_2():
    full, _ = run("keys", ["strategy.name=ddp"], 2)
    _, result = run("keys_lr", ["strategy.name=ddp", "optimizer.lr=0.5", "train.seed=3"], 2,
                    ["--resume", full], expect=2)
    st.expect_in("optimizer.lr = 0.5 (checkpoint: 0.01)", result.stderr, result)
    st.expect_in("train.seed", result.stderr, result)
    _, result = run("keys_steps", ["strategy.name=ddp", "train.steps=5"], 2, ["--resume", full], expect=2)
    st.expect_in("train.steps", result.stderr, result)
    # steps may grow: 20 -> 30 from the last checkpoint (the schedule follows the new total)
    out, result = run("keys_grow", ["strategy.name=ddp", "train.steps=30"], 2, ["--resume", full])
    st.check(st.load_summary(out)["steps"] == 30, "the run must reach 30 steps", result)
    result = st.strata("run", st.GOOD_SYNTHETIC, "--resume", "auto")  # auto needs the run directory
    st.expect_exit(result, 2)
    st.expect_in("--out", result.stderr, result)
    # --resume auto in a fresh directory starts at step 0
    out, result = run("auto_fresh", ["strategy.name=single"], 1, ["--resume", "auto"])
    st.expect_in("starting at step 0", result.stdout, result)


def keep_removes_older():
    out, _ = run("keep", ["strategy.name=single", "checkpoint.every=5", "checkpoint.keep=2"])
    names = sorted(n for n in os.listdir(os.path.join(out, "checkpoints")) if n.startswith("step_"))
    st.check(names == ["step_00000015", "step_00000020"], "keep = 2 must leave the last two, found %s" % names)


def slow_save_outlasts_the_collective_timeout():
    """Rank 0's commit slowed to 4 s (STRATA_FAULT=slow-commit) with a 2 s collective timeout: the
    ranks waiting for it wait through the job's store (save_timeout_s), not in a collective that
    times out, and the job ends well, with its checkpoints and final model."""
    env = dict(os.environ, STRATA_FAULT="slow-commit:4")
    out, result = run("slow_save", ["strategy.name=ddp", "distributed.timeout_s=2", "checkpoint.every=10",
                                    "distributed.heartbeat_s=30"], world=2, env=env, expect=None)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    names = sorted(n for n in os.listdir(os.path.join(out, "checkpoints")) if n.startswith("step_"))
    st.check(names == ["step_00000010", "step_00000020"], "checkpoints %s" % names, result)
    st.check(os.path.exists(os.path.join(out, "final_model.pt")), "no final model", result)
    # A deadline shorter than the slow commit ends the job, naming the barrier.
    out, result = run("slow_save_deadline", ["strategy.name=ddp", "distributed.timeout_s=2", "checkpoint.every=10",
                                             "distributed.save_timeout_s=1"], world=2, env=env, expect=None)
    st.check(result.returncode not in (0, 2), "a commit slower than save_timeout_s must fail the job", result)
    st.expect_in("checkpoint/10/committed", result.stdout + result.stderr, result)


def wait_for(path, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        st.check(proc.poll() is None, "the run ended before %s appeared" % path)
        st.check(time.monotonic() < deadline, "%s did not appear" % path)
        time.sleep(0.01)


def max_restarts_recovers():
    sets = ["strategy.name=fsdp", "train.steps=300", "checkpoint.every=10", "log.every=5"]
    undisturbed, _ = run("restart_ref", sets, 2)
    out = st.temp_dir("restart")
    env, _ = st._clean_env()
    args = [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", "2", "--max-restarts", "1"] + \
        st.set_args(*(BASE + sets))
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=st.scratch_dir())
    try:
        wait_for(os.path.join(step_dir(out, 20), "metadata.json"), proc)
        ranks = st.child_pids(proc.pid)
        st.check(len(ranks) == 2, "expected two ranks, found %s" % ranks)
        os.kill(ranks[-1], signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    st.check(proc.returncode == 0, "the restarted job must finish, exit %s:\n%s" % (proc.returncode, stderr))
    st.check("restarting all 2 ranks from the latest checkpoint (restart 1 of 1)" in stderr, stderr)
    summary = st.load_summary(out)
    st.check(summary["restarts"] == 1, "summary.json must count the restart: %s" % summary.get("restarts"))
    expect_bitwise(undisturbed, out, "restarted after a kill")
    events = st.read_events(out)["scalars"]["train/loss"]
    steps = [s for s, _ in events]
    st.check(steps == sorted(set(steps)) and steps[-1] == 300,
             "TensorBoard must show each step once, in order: %s" % steps[:40])
    ref = {s: v for s, v in st.read_events(undisturbed)["scalars"]["train/loss"]}
    st.check(all(ref[s] == v for s, v in events), "TensorBoard's losses differ from the undisturbed run")


def export_round_trip():
    full, _ = run("export", ["strategy.name=zero3"], 3)
    checkpoint = step_dir(full, 20)
    out = st.temp_dir("exported")
    for name in ("model.pt", "model.safetensors", "model_dir"):
        result = st.strata("export", checkpoint, "--to", os.path.join(out, name))
        st.expect_exit(result, 0)
        st.expect_in("exported step 20", result.stdout, result)
    import torch
    final = torch.load(os.path.join(full, "final_model.pt"), weights_only=False)
    exported = torch.load(os.path.join(out, "model.pt"), weights_only=False)
    st.check(sorted(final) == sorted(exported), "export names %s, final model %s" % (sorted(exported), sorted(final)))
    for k in final:
        st.check(torch.equal(final[k], exported[k]), "exported %s differs from the final model" % k)
    try:
        from safetensors.torch import load_file
        tensors = load_file(os.path.join(out, "model.safetensors"))
        st.check(all(torch.equal(tensors[k], final[k]) for k in final), "the safetensors export differs")
    except ImportError:
        pass
    for name in ("model.pt", "model.safetensors", "model_dir"):
        init, result = run("init_" + name, ["strategy.name=single", "train.steps=0", "checkpoint.every=0",
                                            "train.init_from=" + os.path.join(out, name)])
        st.expect_close(st.load_summary(init)["eval"]["loss"], st.load_summary(full)["eval"]["loss"],
                        "eval loss of the exported model (" + name + ")", rel=1e-6)


if __name__ == "__main__":
    st.main([exact_resume_every_strategy, reshard_across_strategies_and_world_sizes, kill_during_save_keeps_previous,
             async_saves_resume_exactly_and_survive_a_kill,
             full_disk_is_named, damaged_shards_are_named, differing_keys_are_exit_2, keep_removes_older,
             slow_save_outlasts_the_collective_timeout,
             max_restarts_recovers, export_round_trip])
