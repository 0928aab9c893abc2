#!/usr/bin/env python3
"""Outputs are atomic and honest, and a run directory is claimed by one run.

- A disk that is full from the start, or fills at the checkpoint, the final model or the
  TensorBoard events (a small tmpfs as --out; skipped where none can be mounted): the run fails
  (exit 1) naming the file and "No space left on device", and leaves no empty file and no
  temporary file behind; what it wrote before is complete.
- Two `strata run --out SAME` started together: exactly one runs, the other exits 2 with "already
  holds a run", never both and never a write error; with strata's launcher (--nproc 2) as well,
  whose ranks take the directory their launcher claimed. Runs without --out started together get
  a directory each.
- Links planted in --out at temporary or final names are never written through.
"""

import contextlib
import json
import os
import subprocess
import time

import strata_test as st

FAST = ["train.steps=3", "log.every=1"]


def experiment():
    """quickstart.toml where Fashion-MNIST is installed (what the quick start writes), else the
    synthetic experiment: the outputs are the same files."""
    return st.QUICKSTART if st.fashion_mnist_available()[0] else st.GOOD_SYNTHETIC


@contextlib.contextmanager
def tmpfs(size):
    """A tmpfs of `size` (e.g. "64k") mounted on a fresh directory; Skip where none can be mounted."""
    mount = st.temp_dir("tmpfs")
    try:
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", mount],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    except FileNotFoundError:
        raise st.Skip("no `mount` command to make a small file system")
    if made.returncode != 0:
        raise st.Skip("cannot mount a %s tmpfs (needs root or CAP_SYS_ADMIN): %s" % (size, made.stdout.strip()))
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", mount], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)


def leftovers(root):
    """Empty files and temporary files below `root`."""
    empty, temporary = [], []
    for path, _, names in os.walk(root):
        for name in names:
            file = os.path.join(path, name)
            if name.endswith(".tmp"):
                temporary.append(file)
            elif os.path.getsize(file) == 0:
                empty.append(file)
    return empty, temporary


def expect_full_disk(out, result, *fragments):
    """Exit 1, one error paragraph naming the reason and `fragments`, no empty or temporary files."""
    st.expect_clean_failure(result, 1, "No space left on device", *fragments)
    empty, temporary = leftovers(out)
    st.check(not empty, "empty files were left: %s" % empty, result)
    st.check(not temporary, "temporary files were left: %s" % temporary, result)
    config = os.path.join(out, "config.toml")
    if os.path.exists(config):  # written before the disk filled: complete
        st.expect_exit(st.strata("validate", config), 0)


def full_from_the_start():
    """--out on a 64 KiB tmpfs already full: the run claims nothing it cannot write."""
    with tmpfs("64k") as mount:
        fd = os.open(os.path.join(mount, "filler"), os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096) > 0:
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        out = os.path.join(mount, "run")
        result = st.strata("run", experiment(), "--out", out, *st.set_args(*FAST), timeout=300)
        expect_full_disk(out, result, out)


def fills_at_the_events():
    """A 64 KiB tmpfs as --out fills with TensorBoard events: the run fails with the event file."""
    with tmpfs("64k") as mount:
        out = os.path.join(mount, "run")
        result = st.strata("run", experiment(), "--out", out, *st.set_args("train.steps=400", "log.every=1"),
                           timeout=300)
        expect_full_disk(out, result, os.path.join(out, "events.out.tfevents."))
        st.expect_stderr(result, "TensorBoard event file")
        st.check(os.path.getsize(os.path.join(out, "config.toml")) > 0, "config.toml must be complete", result)


def fills_at_the_checkpoint():
    """A file system that cannot hold even the model's float32 values is refused before training
    (exit 2, nothing created); one that holds those but not the checkpoint (with its optimizer
    state) fills at the save: config.toml and the events fit, the failed summary says why."""
    with tmpfs("512k") as mount:
        out = os.path.join(mount, "run")
        result = st.strata("run", experiment(), "--out", out, *st.set_args(*FAST, "checkpoint.at_end=true"),
                           timeout=300)
        st.expect_clean_failure(result, 2, "checkpoint.at_end", "needs at least", mount)
        st.check(not os.path.exists(out), "the refused run created %s" % out, result)
    with tmpfs("1200k") as mount:
        out = os.path.join(mount, "run")
        result = st.strata("run", experiment(), "--out", out, *st.set_args(*FAST, "checkpoint.at_end=true"),
                           timeout=300)
        expect_full_disk(out, result, os.path.join(out, "checkpoints", "step_00000003"))
        summary = st.load_summary(out)
        st.check(summary.get("status") == "failed" and "No space left on device" in summary.get("error", ""),
                 "summary.json must say the run failed for the disk: %s" % json.dumps(summary)[:600], result)
        step = os.path.join(out, "checkpoints", "step_00000003")
        st.check(not os.path.exists(os.path.join(step, "metadata.json")), "the checkpoint must not be committed")


def fills_at_the_final_model():
    """train.save_final: the model does not fit, and no final_model.pt is left in its place."""
    with tmpfs("512k") as mount:
        out = os.path.join(mount, "run")
        result = st.strata("run", experiment(), "--out", out,
                           *st.set_args(*FAST, "train.save_final=true", "train.save_format=\"pt\""), timeout=300)
        expect_full_disk(out, result, os.path.join(out, "final_model.pt"))
        st.check(not os.path.exists(os.path.join(out, "final_model.pt")), "no final_model.pt may be left", result)


def fingerprint(path):
    """(size, mtime in ns, bytes) of the file `path`, not following a link."""
    st_ = os.lstat(path)
    with open(path, "rb") as f:
        return st_.st_size, st_.st_mtime_ns, f.read()


def planted_links_are_not_followed():
    """Links planted in --out at the names of temporary files (the old fixed `config.toml.tmp`
    among them) and at a final name: the run succeeds, replaces the link at the final name with
    its file, and the links' target is untouched byte for byte, mtime included."""
    d = st.temp_dir("links")
    victim = os.path.join(d, "victim.txt")
    with open(victim, "wb") as f:
        f.write(b"an unrelated file\n")
    before = fingerprint(victim)
    out = os.path.join(d, "run")
    os.makedirs(out)
    planted = ["config.toml.tmp", ".config.toml.tmp", "summary.json.tmp", "config.toml"]
    for name in planted:
        os.symlink(victim, os.path.join(out, name))
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out,
                       *st.set_args(*FAST, "checkpoint.at_end=true", "train.save_final=true"), timeout=300)
    st.expect_exit(result, 0)
    st.check(fingerprint(victim) == before, "the run wrote through a planted link into %s" % victim, result)
    config = os.path.join(out, "config.toml")
    st.check(not os.path.islink(config) and os.path.getsize(config) > 0,
             "config.toml must be the run's own file, not the planted link", result)
    st.check(st.load_summary(out).get("status") == "ok", "the run must finish", result)
    for name in planted[:3]:
        st.check(os.path.islink(os.path.join(out, name)), "the planted link %s must be left alone" % name, result)
    empty, temporary = leftovers(out)
    st.check(not [t for t in temporary if not os.path.islink(t)], "temporary files were left: %s" % temporary, result)


def start_together(commands):
    """Starts every command at once (argv lists); returns their st.Result in order."""
    env, note = st._clean_env()
    procs, started = [], time.monotonic()
    for args in commands:
        procs.append(subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env=env, cwd=st.scratch_dir()))
    results = []
    for args, proc in zip(commands, procs):
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            st.fail("`%s` did not finish within 300 s" % " ".join(args))
        results.append(st.Result(args, proc.returncode, st._text(out), st._text(err), time.monotonic() - started, note))
    return results


def expect_one_runs(out, results):
    """Exactly one result trained into `out`; every other one is exit 2 "already holds a run"."""
    winners = [r for r in results if r.returncode == 0]
    losers = [r for r in results if r.returncode != 0]
    st.check(len(winners) == 1, "exactly one run must start in %s; %d finished" % (out, len(winners)),
             (winners or results)[-1])
    for r in losers:
        st.expect_clean_failure(r, 2, "run directory %s already holds a run" % out)
        st.expect_not_in("cannot write", r.stderr, r, "stderr")
    for r in results:
        st.expect_not_in("No such file", r.stderr, r, "stderr")
    st.check(st.load_summary(out).get("status") == "ok", "the run that started must finish", winners[0])


def same_out_races(pairs=10):
    """Two runs with the same --out started together, `pairs` times: one runs, one is exit 2."""
    base = st.temp_dir("race")
    for i in range(pairs):
        out = os.path.join(base, "run%d" % i)
        if i % 2:
            os.makedirs(out)  # an explicit --out may exist, empty
        command = [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--out", out] + st.set_args(*FAST)
        expect_one_runs(out, start_together([command, command]))
    print("  %d pairs: one ran, one was refused, every time" % pairs)


def same_out_races_with_the_launcher(pairs=3):
    """--nproc 2 against a plain run on one --out: the launcher's ranks are not refused the
    directory it claimed for them; whichever claims first runs."""
    base = st.temp_dir("race_launcher")
    for i in range(pairs):
        out = os.path.join(base, "run%d" % i)
        plain = [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--out", out] + st.set_args(*FAST, "strategy.name=ddp")
        expect_one_runs(out, start_together([plain + ["--nproc", "2"], plain]))
    out = os.path.join(base, "alone")
    ddp = st.set_args(*FAST, "strategy.name=ddp")
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", "2", *ddp, timeout=300)
    st.expect_exit(result, 0)
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, *ddp, timeout=300)
    st.expect_clean_failure(result, 2, "run directory %s already holds a run" % out)


def automatic_directories_are_distinct(runs=4):
    """Runs without --out started together: each gets its own <out_dir>/<name>/<time>[-N]."""
    out_dir = st.temp_dir("auto")
    command = [st.strata_bin(), "run", st.GOOD_SYNTHETIC] + st.set_args(*FAST, "experiment.out_dir=\"%s\"" % out_dir)
    results = start_together([command] * runs)
    for r in results:
        st.expect_exit(r, 0)
    made = sorted(os.listdir(os.path.join(out_dir, "good_synthetic")))
    st.check(len(made) == runs, "%d runs made the directories %s" % (runs, made), results[0])
    for name in made:
        summary = st.load_summary(os.path.join(out_dir, "good_synthetic", name))
        st.check(summary.get("status") == "ok", "%s: status %s" % (name, summary.get("status")))


if __name__ == "__main__":
    st.main([full_from_the_start, fills_at_the_events, fills_at_the_checkpoint, fills_at_the_final_model,
             planted_links_are_not_followed, same_out_races, same_out_races_with_the_launcher, automatic_directories_are_distinct])
