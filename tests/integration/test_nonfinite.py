#!/usr/bin/env python3
"""A run whose loss becomes non-finite stops with exit code 1 and an error that names the step,
and still leaves a readable run directory: summary.json with status "failed" and the
TensorBoard events written up to the failure."""

import math
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402

# Plain SGD with an absurd learning rate: the first update sends the weights to ~1e29, and the
# loss of step 2 is inf or NaN.
DIVERGE = ("optimizer.name=sgd", "optimizer.lr=1e30")


class Failed:
    out = None
    result = None
    step = None


def diverged_run():
    if Failed.out is None:
        out = os.path.join(st.temp_dir("nonfinite"), "run")
        result = st.strata_run(st.GOOD_SYNTHETIC, out, *DIVERGE, expect=None)
        Failed.out, Failed.result = out, result
    return Failed


def exits_with_training_error():
    run = diverged_run()
    result = run.result
    st.expect_exit(result, 1)
    st.expect_no_crash(result)
    st.expect_error_paragraph(result)
    m = re.search(r"^error: step (\d+): .*(nan|inf)", result.stderr, re.M | re.I)
    st.check(m is not None, "stderr should say `error: step N: ...` and name the non-finite value", result)
    run.step = int(m.group(1))
    st.check(run.step >= 1, "the failing step should be >= 1", result)
    st.check(("at step %d" % run.step) in result.stderr or ("step %d" % run.step) in result.stderr,
             "the message should name the step", result)


def summary_says_failed():
    run = diverged_run()
    s = st.load_summary(run.out)
    st.check(s.get("status") == "failed", "summary status is %r, expected 'failed'" % s.get("status"), run.result)
    st.check(isinstance(s.get("error"), str) and s["error"], "summary has no error message: %r" % s.get("error"))
    for key in ("experiment", "strategy", "model", "dataset", "steps", "global_batch_size"):
        st.check(key in s, "failed summary lacks %r; keys: %s" % (key, sorted(s)))
    if run.step is not None:
        st.check(str(run.step) in s["error"], "summary error %r does not name step %d" % (s["error"], run.step))
        st.check(s["steps"] == run.step - 1, "summary steps is %r; %d steps finished before step %d failed"
                 % (s["steps"], run.step - 1, run.step))
    if isinstance(s.get("final_loss"), float):
        st.check(math.isfinite(s["final_loss"]), "final_loss %r should be the last finite loss" % s["final_loss"])
    st.check(os.path.isfile(os.path.join(run.out, "config.toml")), "the failed run has no config.toml")


def events_are_readable():
    run = diverged_run()
    events = st.read_events(run.out)  # exits non-zero on truncated or corrupt records
    loss = events["scalars"].get("train/loss")
    st.check(loss, "no train/loss scalar in the events of the failed run; tags %s" % sorted(events["scalars"]))
    st.check(loss[0][0] == 1, "the first logged step should be 1, got %r" % loss[0][0])
    st.check(all(math.isfinite(v) for _, v in loss), "train/loss has a non-finite value: %s" % loss)
    if run.step is not None:
        st.check(all(step < run.step for step, _ in loss), "train/loss has steps at or after the failing step %d: %s"
                 % (run.step, loss))
    st.check(events["hparams"].get("strategy") == "single", "hparams of the failed run: %r" % events["hparams"])


if __name__ == "__main__":
    st.main([exits_with_training_error, summary_says_failed, events_are_readable])
