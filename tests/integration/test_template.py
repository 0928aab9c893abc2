#!/usr/bin/env python3
"""The template strategy plugin (plugins/template: `local_sgd`, built into build/plugins) over Gloo
on loopback: averaging after every plain-SGD step is `single`; with sync_every = 4 the ranks
average every fourth step only, and the replicas are equal at the end.

    STRATA_BIN=build/bin/strata ~/.cache/strata/venv/bin/python tests/integration/test_template.py
"""
import os

import strata_test as st
from test_distributed import COMMON_SETS, expect_equivalent, run_with_output

# With sync_every = 1, averaging parameters after each step equals averaging gradients for SGD,
# plain or with momentum and (coupled) weight decay: the update is linear in the gradients.
PLAIN_SGD = ["optimizer.name=sgd", "optimizer.momentum=0", "optimizer.weight_decay=0"]
MOMENTUM_SGD = ["optimizer.name=sgd", "optimizer.momentum=0.9", "optimizer.weight_decay=0.01"]
STEPS = 24  # COMMON_SETS's train.steps


def run(label, *sets, nproc=1):
    summary, _ = run_with_output(label, *sets, nproc=nproc)
    return summary


def expect_traffic(summary, world, sync_every, what):
    """One all-reduce of every parameter (4 bytes each) per sync_every steps, nothing else."""
    params = summary["memory"]["model_state_bytes"]["params"]
    comm = summary["comm"]
    st.expect_close(comm["calls_per_step"], 1.0 / sync_every, what + " calls per step", rel=1e-9)
    st.expect_close(comm["bus_bytes_per_step"], 2 * (world - 1) / world * params / sync_every,
                    what + " bus bytes per step", rel=1e-9)


def describe_and_validate():
    result = st.strata("describe", "local_sgd")
    st.expect_exit(result, 0)
    st.expect_stdout(result, "sync_every")
    result = st.strata("validate", st.GOOD_SYNTHETIC, *st.set_args("strategy.name=local_sgd", "strategy.sync_every=0"))
    st.expect_clean_failure(result, 2, "sync_every")


def sync_every_step_with_plain_sgd_matches_single():
    single = run("single_sgd", *PLAIN_SGD)
    for world in (2, 3):
        summary = run("local_sgd_w%d" % world, "strategy.name=local_sgd", "strategy.sync_every=1", *PLAIN_SGD,
                      nproc=world)
        what = "local_sgd sync_every=1 world %d" % world
        expect_equivalent(single, summary, what)
        expect_traffic(summary, world, 1, what)
        print("  %s: param_norm %.12g (single %.12g)" % (what, summary["param_norm"], single["param_norm"]))


def sync_every_step_with_momentum_sgd_matches_single():
    """Momentum buffers stay local, but their mean over ranks evolves like single's buffer."""
    single = run("single_momentum", *MOMENTUM_SGD)
    summary = run("local_sgd_momentum", "strategy.name=local_sgd", "strategy.sync_every=1", *MOMENTUM_SGD, nproc=2)
    expect_equivalent(single, summary, "local_sgd sync_every=1 world 2, sgd with momentum and weight decay")


def world_one_is_single():
    """Averaging over one rank is the identity, whatever the optimizer and sync_every."""
    single = run("single_adamw")
    summary = run("local_sgd_w1", "strategy.name=local_sgd", "strategy.sync_every=3")
    expect_equivalent(single, summary, "local_sgd world 1")
    st.check(summary["comm"]["calls_per_step"] == 0, "local_sgd world 1 should not communicate")


def evaluate_final_model(run_dir, label):
    """summary of `single` started from run_dir's final_model.pt, one step at a negligible lr: its
    evaluation is that of rank 0's final replica over the whole eval split."""
    out = st.temp_dir(label)
    st.strata_run(st.GOOD_SYNTHETIC, out, "train.init_from=" + os.path.join(run_dir, "final_model.pt"),
                  "train.steps=1", "optimizer.name=sgd", "optimizer.lr=1e-30", "optimizer.momentum=0",
                  "optimizer.weight_decay=0")
    return st.load_summary(out)


def replicas_end_equal(steps, sync_every=4):
    """local_sgd (AdamW: replicas drift apart between averages) at world 2 with save_final; the
    final evaluation runs on each rank's replica (each rank evaluates its slice of every eval batch).
    Returns (eval loss of the run, eval loss of rank 0's final model alone, the two summaries)."""
    out = st.temp_dir("local_sgd_s%d" % steps)
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", 2,
                       *st.set_args(*(COMMON_SETS + ["strategy.name=local_sgd", "strategy.sync_every=%d" % sync_every,
                                                     "train.steps=%d" % steps, "train.save_final=true"])),
                       timeout=300)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    summary = st.load_summary(out)
    alone = evaluate_final_model(out, "final_s%d" % steps)
    st.expect_close(alone["param_norm"], summary["param_norm"], "param_norm of the saved model", rel=1e-6)
    return summary["eval"]["loss"], alone["eval"]["loss"], summary, result


def sync_every_four_ends_with_equal_replicas():
    """train.steps a multiple of sync_every: the last step averages, so both ranks evaluate the
    model rank 0 saved, and the run's evaluation equals that model's alone."""
    run_loss, alone_loss, summary, _ = replicas_end_equal(STEPS)
    expect_traffic(summary, 2, 4, "local_sgd sync_every=4 world 2")
    st.expect_close(run_loss, alone_loss, "eval loss of the ranks' replicas vs rank 0's final model", rel=1e-5)
    print("  sync_every=4, %d steps: eval loss %.9g, rank 0's final model alone %.9g" % (STEPS, run_loss, alone_loss))


def a_round_cut_by_the_last_step_is_averaged_before_the_final_evaluation():
    """Two steps after the last average: finish_training() averages them after the last step, so
    the final evaluation is of one model, the one rank 0 saves, and the average counts as training
    traffic (one more all-reduce of every parameter over the run's 22 steps: 5 rounds and the cut
    one). Without finish_training the ranks would evaluate two different replicas."""
    steps = STEPS - 2
    run_loss, alone_loss, summary, _ = replicas_end_equal(steps)
    st.expect_close(run_loss, alone_loss, "eval loss of the ranks vs rank 0's final model, 2 steps after an average",
                    rel=1e-5)
    params = summary["memory"]["model_state_bytes"]["params"]
    rounds = steps // 4 + 1
    st.expect_close(summary["comm"]["calls_per_step"], rounds / steps, "calls per step with the cut round", rel=1e-9)
    st.expect_close(summary["comm"]["bus_bytes_per_step"], rounds * params / steps,
                    "bus bytes per step with the cut round (world 2: one all-reduce moves the parameters' bytes)",
                    rel=1e-9)
    print("  sync_every=4, %d steps: eval loss %.9g, averaged final model %.9g" % (steps, run_loss, alone_loss))


if __name__ == "__main__":
    st.main([describe_and_validate, sync_every_step_with_plain_sgd_matches_single,
             sync_every_step_with_momentum_sgd_matches_single, world_one_is_single,
             sync_every_four_ends_with_equal_replicas,
             a_round_cut_by_the_last_step_is_averaged_before_the_final_evaluation])
