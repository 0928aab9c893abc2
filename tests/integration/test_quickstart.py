#!/usr/bin/env python3
"""End to end: `strata run experiments/quickstart.toml` (MLP on Fashion-MNIST, `single`) trains
to the promised accuracy and writes the output contract of docs/user-guide.md (Outputs): summary.json,
a config.toml that validates again, and TensorBoard events that TensorBoard itself can read."""

import math
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402

try:
    import tomllib  # Python 3.11+
except ImportError:  # pragma: no cover
    tomllib = None

MIN_ACCURACY = 0.85
STEPS, BATCH, LOG_EVERY, EVAL_EVERY = 1200, 128, 100, 400  # as in experiments/quickstart.toml


class Run:
    dir = None
    result = None
    summary = None
    error = None


RUN = Run()


def the_run():
    """The quickstart run, done once and shared by the cases below."""
    if RUN.error is not None:
        if isinstance(RUN.error, st.Skip):
            raise RUN.error
        raise st.TestFailure("the quickstart run failed (see the first failed case)")
    if RUN.dir is None:
        try:
            st.require_fashion_mnist()
            out = os.path.join(st.temp_dir("quickstart"), "run")
            RUN.result = st.strata_run(st.QUICKSTART, out, timeout=540)
            RUN.summary = st.load_summary(out)
            RUN.dir = out
        except (st.Skip, st.TestFailure) as e:
            RUN.error = e
            raise
        print("  quickstart: %.1f s, eval accuracy %s, final loss %s"
              % (RUN.result.seconds, RUN.summary.get("eval", {}).get("accuracy"), RUN.summary.get("final_loss")))
    return RUN


def mlp_parameters(inputs, hidden, classes):
    total, width = 0, inputs
    for h in list(hidden) + [classes]:
        total += width * h + h
        width = h
    return total


def summary_has_every_key():
    s = the_run().summary
    missing = st.missing_keys(s)
    st.check(not missing, "summary.json lacks the keys of docs/user-guide.md (Outputs) %s; it has %s" % (missing, sorted(s)))
    st.check(s.get("status") == "ok", "summary status is %r, expected 'ok'" % s.get("status"))
    for key, expected in (("experiment", "quickstart"), ("strategy", "single"), ("model", "mlp"),
                          ("dataset", "fashion_mnist"), ("world_size", 1), ("steps", STEPS),
                          ("global_batch_size", BATCH)):
        st.check(s[key] == expected, "summary %s is %r, expected %r" % (key, s[key], expected))
    for key in ("backend", "device"):
        st.check(isinstance(s[key], str) and s[key], "summary %s is %r, expected a non-empty string" % (key, s[key]))


def timings_are_consistent():
    s = the_run().summary
    for key in ("train_time_s", "step_time_s", "samples_per_s", "final_loss", "param_norm", "eval.loss"):
        v = st.lookup(s, key)
        st.check(isinstance(v, (int, float)) and math.isfinite(v) and v > 0,
                 "summary %s is %r, expected a finite positive number" % (key, v))
    st.check(s["step_time_s"] <= s["train_time_s"], "median step time %r exceeds the train time %r"
             % (s["step_time_s"], s["train_time_s"]))
    st.expect_close(s["samples_per_s"], s["steps"] * s["global_batch_size"] / s["train_time_s"],
                    "samples_per_s (= steps * global_batch_size / train_time_s)", rel=1e-6)


def comm_is_zero_for_single():
    comm = the_run().summary["comm"]
    for key in ("payload_bytes_per_step", "bus_bytes_per_step", "calls_per_step", "time_s"):
        st.check(comm[key] == 0, "comm.%s is %r; the single strategy communicates nothing" % (key, comm[key]))


def reaches_accuracy():
    s = the_run().summary
    acc = s["eval"]["accuracy"]
    st.check(isinstance(acc, (int, float)) and MIN_ACCURACY <= acc <= 1.0,
             "eval.accuracy is %r, expected >= %s (the quickstart promises about 0.88)" % (acc, MIN_ACCURACY))
    examples = s["eval"].get("examples")
    if examples is not None:  # eval.batches = 0: the whole test split
        st.check(examples == 10000, "eval.examples is %r, expected the 10000 test images" % examples)


def model_state_bytes():
    s = the_run().summary
    params = s.get("parameters")
    expected_params = mlp_parameters(28 * 28, [256, 128], 10)
    st.check(params == expected_params, "summary parameters is %r; an MLP 784-256-128-10 has %d"
             % (params, expected_params))
    msb = s["memory"]["model_state_bytes"]
    st.check(msb["params"] == 4 * expected_params, "model_state_bytes.params is %r, expected 4 * %d = %d (fp32)"
             % (msb["params"], expected_params, 4 * expected_params))
    st.check(msb["grads"] == msb["params"], "model_state_bytes.grads %r != params %r" % (msb["grads"], msb["params"]))
    low = 2 * msb["params"]
    st.check(low <= msb["optimizer"] <= low + 1024,
             "model_state_bytes.optimizer is %r; AdamW keeps two moments: expected 2 * params = %d (+ at most "
             "1 KiB of step counters)" % (msb["optimizer"], low))
    peak = s["memory"]["peak_bytes"]
    st.check(isinstance(peak, int) and peak >= msb["params"] + msb["grads"] + msb["optimizer"],
             "memory.peak_bytes %r is below the model state %d" % (peak, msb["params"] + msb["grads"] + msb["optimizer"]))


def loss_curve():
    s = the_run().summary
    curve = s.get("loss_curve")
    st.check(isinstance(curve, list) and curve, "summary loss_curve is %r, expected [[step, loss], ...]" % (curve,))
    steps = [p[0] for p in curve]
    expected = sorted({1, STEPS} | set(range(LOG_EVERY, STEPS + 1, LOG_EVERY)))
    st.check(steps == expected, "loss_curve steps are %s, expected step 1, every %d and the last: %s"
             % (steps, LOG_EVERY, expected))
    st.check(all(math.isfinite(p[1]) for p in curve), "loss_curve has a non-finite loss: %s" % curve)
    st.check(curve[-1][1] == s["final_loss"], "last loss_curve loss %r != final_loss %r" % (curve[-1][1], s["final_loss"]))
    st.check(curve[-1][1] < curve[0][1] / 3, "the loss did not fall: %s" % curve)


def run_dir_contents():
    run = the_run()
    names = sorted(os.listdir(run.dir))
    for name in ("summary.json", "config.toml"):
        st.check(name in names, "run directory %s lacks %s; it has %s" % (run.dir, name, names))
    events = [n for n in names if "tfevents" in n]
    st.check(len(events) == 1, "run directory should hold one TensorBoard event file, has %s" % names)
    st.check(not [n for n in names if n.endswith(".tmp")], "left-over temporary files in %s: %s" % (run.dir, names))


def config_toml_revalidates():
    run = the_run()
    config = os.path.join(run.dir, "config.toml")
    result = st.strata("validate", config)
    st.expect_exit(result, 0)
    st.expect_stdout(result, "ok")
    if tomllib is None:
        return
    with open(config, "rb") as f:
        resolved = tomllib.load(f)
    expected = {("experiment", "name"): "quickstart", ("model", "name"): "mlp", ("model", "hidden"): [256, 128],
                ("dataset", "name"): "fashion_mnist", ("strategy", "name"): "single",
                ("optimizer", "name"): "adamw", ("optimizer", "lr"): 2e-3, ("train", "steps"): STEPS,
                ("train", "global_batch_size"): BATCH, ("train", "lr_schedule"): "cosine",
                ("train", "warmup_steps"): 50, ("eval", "every"): EVAL_EVERY, ("log", "every"): LOG_EVERY,
                ("train", "micro_batches"): 1}  # a default, filled in
    for (section, key), value in expected.items():
        got = resolved.get(section, {}).get(key)
        st.check(got == value, "config.toml [%s] %s is %r, expected %r" % (section, key, got, value))


def tensorboard_events():
    run = the_run()
    s = run.summary
    events = st.read_events(run.dir)
    scalars = events["scalars"]
    for tag in ("train/loss", "train/lr", "eval/loss", "eval/accuracy", "perf/step_time_s", "perf/step_samples_per_s",
                "summary/samples_per_s"):
        st.check(scalars.get(tag), "TensorBoard has no scalar %r; tags: %s" % (tag, sorted(scalars)))
    for prefix in ("memory/", "comm/"):
        st.check(any(t.startswith(prefix) for t in scalars), "TensorBoard has no %s* scalar; tags: %s"
                 % (prefix, sorted(scalars)))
    loss = scalars["train/loss"]
    last_step, last_loss = loss[-1]
    st.check(last_step == STEPS, "last train/loss step is %r, expected %d" % (last_step, STEPS))
    # Scalars are stored as float32: compare with float32 precision.
    st.expect_close(last_loss, s["final_loss"], "train/loss at step %d vs summary final_loss" % STEPS, rel=1e-6)
    curve = dict((p[0], p[1]) for p in s["loss_curve"])
    for step, value in loss:
        if step in curve:
            st.expect_close(value, curve[step], "train/loss at step %d vs loss_curve" % step, rel=1e-6)
    acc = scalars["eval/accuracy"]
    st.check([p[0] for p in acc] == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY)),
             "eval/accuracy steps are %s, expected every %d steps and the last" % ([p[0] for p in acc], EVAL_EVERY))
    st.expect_close(acc[-1][1], s["eval"]["accuracy"], "eval/accuracy at the last step vs summary", rel=1e-6)

    texts = [t for strings in events["text"].values() for t in strings]
    st.check(any(re.search(r'name = "quickstart"', t) and "[model]" in t and "[train]" in t for t in texts),
             "no TensorBoard text summary holds the resolved config; text tags: %s" % sorted(events["text"]))
    hp = events["hparams"]
    st.check(hp.get("strategy") == "single" and hp.get("model") == "mlp",
             "hparams are %r, expected strategy='single', model='mlp'" % (hp,))
    st.check(hp.get("world_size") == 1, "hparams world_size is %r, expected 1" % hp.get("world_size"))
    st.check("eval/accuracy" in events["hparams_metrics"], "hparams metrics %r lack eval/accuracy"
             % events["hparams_metrics"])


if __name__ == "__main__":
    st.main([summary_has_every_key, timings_are_consistent, comm_is_zero_for_single, reaches_accuracy,
             model_state_bytes, loss_curve, run_dir_contents, config_toml_revalidates, tensorboard_events])
