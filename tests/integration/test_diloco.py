#!/usr/bin/env python3
"""The diloco strategy plugin (plugins/diloco, built into build/plugins): H local steps, then an
outer Nesterov SGD step on the pseudo-gradient averaged over the ranks, over Gloo on loopback.

- `strata check diloco` at world size 3 with its option matrix: ddp's model tensor by tensor with
  one inner SGD step per round, outer lr 1 and no momentum (uneven shards, 2 micro-batches); the
  declared loss band otherwise; its outer state (outer_parameters, outer_momentum) and traffic
  as its schedule says.
- The quickstart (1,200 steps of Fashion-MNIST) at world size 2 with H = 8: eval loss within 7% of
  ddp's, with exactly 1/H of ddp's bus bytes per step.
- A checkpoint at a round boundary holds the outer momentum: the resumed run is the uninterrupted
  one, bit for bit (the inner SGD keeps no state, so nothing of a replica is lost).

    STRATA_BIN=build/bin/strata ~/.cache/strata/venv/bin/python tests/integration/test_diloco.py
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402

H = 8
# Quickstart at world 2, H = 8: eval loss 0.3563 against ddp's 0.3372 (5.7% above), measured.
EVAL_LOSS_REL = 0.07


def describe_and_validate():
    result = st.strata("describe", "diloco")
    st.expect_exit(result, 0)
    for option in ("inner_steps", "outer_lr", "outer_momentum"):
        st.expect_stdout(result, option)
    result = st.strata("validate", st.GOOD_SYNTHETIC, *st.set_args("strategy.name=diloco", "strategy.outer_momentum=1"))
    st.expect_clean_failure(result, 2, "outer_momentum")


def check_passes_at_world_3():
    tmp = st.temp_dir("check_tmp")
    result = st.strata("check", "diloco", "--world-sizes", "3", env={"TMPDIR": tmp}, timeout=300)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    out = result.stdout
    for fragment in ("exact with inner_steps = 1, outer_lr = 1, outer_momentum = 0",
                     "exact only with optimizer.name = \"sgd\" (this workload: \"adamw\")",
                     "outer_parameters 2704 B, outer_momentum 2704 B per rank",
                     "outer_momentum 0 B per rank", "vs ddp's", "0 failed"):
        st.expect_in(fragment, out, result)
    exact_rows = [l for l in out.splitlines() if l.startswith("| equivalence") and "exact with inner_steps" in l
                  and "| PASS" in l]
    st.check(len(exact_rows) == 2, "two SGD workloads held to ddp's model tensor by tensor: %s" % exact_rows, result)


def run(label, *sets, extra=(), config=None, world=2):
    out = st.temp_dir(label)
    result = st.strata("run", config or st.QUICKSTART, "--out", out, "--nproc", world, *extra,
                       *st.set_args(*sets), timeout=300)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    return out, st.load_summary(out)


def quickstart_near_ddp_with_1_over_h_traffic():
    st.require_fashion_mnist()
    _, ddp = run("ddp", "strategy.name=ddp")
    _, dl = run("diloco", "strategy.name=diloco", "strategy.inner_steps=%d" % H)
    st.check(dl["replicas_equal"], "diloco's replicas differ at the end: %s" % dl["replica_digests"])
    gap = dl["eval"]["loss"] / ddp["eval"]["loss"] - 1
    st.check(gap <= EVAL_LOSS_REL, "eval loss diloco %.4f vs ddp %.4f: %.1f%% above, more than %.0f%%"
             % (dl["eval"]["loss"], ddp["eval"]["loss"], 100 * gap, 100 * EVAL_LOSS_REL))
    # 1,200 steps, a round every 8: one all-reduce of the float32 parameters per round.
    st.expect_close(dl["comm"]["bus_bytes_per_step"], ddp["comm"]["bus_bytes_per_step"] / H,
                    "diloco bus bytes per step (1/H of ddp's)", rel=1e-9)
    state = dl["memory"]["model_state_bytes"]
    st.check(state["outer_parameters"] == state["params"] and state["outer_momentum"] == state["params"],
             "outer state should be one float32 copy each: %s" % state)
    print("  ddp: eval loss %.4f, %.0f bus bytes/step; diloco H=%d: eval loss %.4f (%+.1f%%), %.0f bus bytes/step"
          % (ddp["eval"]["loss"], ddp["comm"]["bus_bytes_per_step"], H, dl["eval"]["loss"], 100 * gap,
             dl["comm"]["bus_bytes_per_step"]))


def resume_at_a_round_boundary_is_exact():
    sets = ["strategy.name=diloco", "strategy.inner_steps=5", "optimizer.name=sgd", "optimizer.lr=0.1", "optimizer.momentum=0",
            "train.steps=20", "train.global_batch_size=24", "train.micro_batches=2", "checkpoint.every=10",
            "log.every=1", "train.save_final=true"]
    full, _ = run("resume_full", *sets, config=st.GOOD_SYNTHETIC)
    step10 = os.path.join(full, "checkpoints", "step_%08d" % 10)
    names = open(os.path.join(step10, "metadata.json")).read()
    st.check("optim/outer_momentum/" in names, "the checkpoint does not hold the outer momentum")
    resumed, summary = run("resume_resumed", *sets, config=st.GOOD_SYNTHETIC, extra=["--resume", step10])
    st.expect_models_equal(full, resumed, "diloco resumed at 10", rel=0.0)
    st.check(st.load_summary(full)["loss_curve"] == summary["loss_curve"], "the loss curves differ")
    print("  resumed at step 10 (a round boundary, H = 5): bit for bit")


if __name__ == "__main__":
    st.main([describe_and_validate, check_passes_at_world_3, quickstart_near_ddp_with_1_over_h_traffic,
             resume_at_a_round_boundary_is_exact])
