#!/usr/bin/env python3
"""TensorBoard as TensorBoard itself reads it (read_events.py: its event reader and the hparams
plugin's backend context): single runs write only their hparams session, so the HPARAMS tab infers
which hyperparameters differ; a run's summary figures are scalars summary/<name> under results.csv's
names, equal to summary.json's, and they are the tab's metrics; no two definitions share a name."""

import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402

STEPS = 8
# results.csv's figure columns and their summary.json paths (model_state_bytes: the sum of the parts).
FIGURES = {
    "train_time_s": "train_time_s", "step_time_s": "step_time_s", "samples_per_s": "samples_per_s",
    "peak_bytes": "memory.peak_bytes", "peak_tensor_bytes": "memory.peak_tensor_bytes",
    "bus_bytes_per_step": "comm.bus_bytes_per_step", "final_loss": "final_loss", "eval_accuracy": "eval.accuracy",
    "params_bytes": "memory.model_state_bytes.params", "grads_bytes": "memory.model_state_bytes.grads",
    "optimizer_bytes": "memory.model_state_bytes.optimizer", "payload_bytes_per_step": "comm.payload_bytes_per_step",
    "calls_per_step": "comm.calls_per_step", "comm_time_s": "comm.time_s", "eval_loss": "eval.loss",
    "param_norm": "param_norm",
}

_logdir = None


def two_runs():
    """Two runs of the synthetic experiment in one log directory, differing in optimizer.lr only."""
    global _logdir
    if _logdir is None:
        logdir = st.temp_dir("logdir")
        for name, lr in (("a", "0.01"), ("b", "0.02")):
            st.strata_run(st.GOOD_SYNTHETIC, os.path.join(logdir, name), "train.steps=%d" % STEPS, "log.every=4",
                          "optimizer.lr=" + lr)
        _logdir = logdir
    return _logdir


def single_runs_let_tensorboard_infer_what_differs():
    logdir = two_runs()
    for name in ("a", "b"):
        events = st.read_events(os.path.join(logdir, name))
        st.check(events["hparams_written"] == [], "run %s wrote an _hparams_/experiment (%s): it would hide what "
                 "differs between runs" % (name, events["hparams_written"]))
        st.check(events["hparams"].get("strategy") == "single" and events["hparams"].get("world_size") == 1,
                 "run %s session hparams %s" % (name, events["hparams"]))
    experiment = st.read_events(logdir)["hparams_experiment"]
    differs = dict((n, d) for n, d in experiment["hparams"])
    for name in ("strategy", "world_size", "devices", "model", "lr"):
        st.check(name in differs, "the HPARAMS tab lacks %s: %s" % (name, experiment["hparams"]))
    st.check(differs["lr"] and not differs["strategy"] and not differs["world_size"],
             "TensorBoard should find that lr differs and strategy, world_size do not: %s" % experiment["hparams"])
    st.check(experiment["hparams"][0][0] == "lr", "the differing hparam comes first: %s" % experiment["hparams"])
    for name in FIGURES:
        st.check("summary/" + name in experiment["metrics"], "metric summary/%s missing: %s"
                 % (name, experiment["metrics"]))


def summary_scalars_equal_summary_json():
    logdir = two_runs()
    for name in ("a", "b"):
        run_dir = os.path.join(logdir, name)
        summary = st.load_summary(run_dir)
        scalars = st.read_events(run_dir)["scalars"]
        for figure, path in list(FIGURES.items()) + [("model_state_bytes", None)]:
            tag = "summary/" + figure
            if path is None:
                want = sum(st.lookup(summary, "memory.model_state_bytes." + p) for p in ("params", "grads", "optimizer"))
            else:
                want = st.lookup(summary, path)
            if want is None:
                st.check(tag not in scalars, "%s: %s written for a null figure" % (name, tag))
                continue
            points = scalars.get(tag)
            st.check(points and len(points) == 1, "%s: %s should be written once, got %s" % (name, tag, points))
            st.check(points[0][0] == STEPS, "%s: %s at step %s, expected %d" % (name, tag, points[0][0], STEPS))
            # Scalars are float32.
            st.expect_close(points[0][1], want, "%s: %s vs summary.json %s" % (name, tag, path), rel=1e-6, abs_tol=1e-30)


def one_definition_per_name():
    """The run's mean throughput is summary/samples_per_s; the instantaneous one has its own name."""
    scalars = st.read_events(os.path.join(two_runs(), "a"))["scalars"]
    throughputs = sorted(t for t in scalars if t.endswith("samples_per_s"))
    st.check(throughputs == ["perf/step_samples_per_s", "summary/samples_per_s"],
             "throughput tags %s: one name per definition expected" % throughputs)
    # The per-step series keep their per-step names; summary/ holds the run's figures only.
    extra = sorted(t for t in scalars if t.startswith("summary/") and t[len("summary/"):] not in FIGURES
                   and t != "summary/model_state_bytes")
    st.check(not extra, "summary/ tags that are no results.csv figure: %s" % extra)


if __name__ == "__main__":
    st.main([single_runs_let_tensorboard_infer_what_differs, summary_scalars_equal_summary_json,
             one_definition_per_name])
