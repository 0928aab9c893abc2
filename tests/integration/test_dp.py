#!/usr/bin/env python3
"""dp: K model replicas in one process (CPU replicas here) reproduce single; model state is that
of device 0; the copies between devices are counted; placement and option errors are clean."""

import strata_test as st
from test_distributed import CNN_SETS, expect_equivalent, run, run_with_output


def dp_matches_single():
    """MLP and CNN, 2 and 3 replicas (3 does not divide the micro-batch of 12), with accumulation."""
    for label, model_sets in (("mlp", []), ("cnn", CNN_SETS)):
        for micro in (1, 2):
            single = run("dp_%s_single_m%d" % (label, micro), *model_sets, "train.micro_batches=%d" % micro)
            for replicas in (2, 3):
                what = "%s dp %d replicas micro %d" % (label, replicas, micro)
                dp = run("dp_%s_r%d_m%d" % (label, replicas, micro), *model_sets, "strategy.name=dp",
                         "strategy.replicas=%d" % replicas, "train.micro_batches=%d" % micro)
                expect_equivalent(single, dp, what)
                st.check(dp["world_size"] == 1 and dp["devices"] == replicas,
                         what + ": world_size %s devices %s" % (dp["world_size"], dp["devices"]))
                # Device 0 holds what single holds; the replicas' copies are not model state of it.
                st.check(dp["memory"]["model_state_bytes"] == single["memory"]["model_state_bytes"],
                         what + ": model state %s, single %s" % (dp["memory"]["model_state_bytes"],
                                                                 single["memory"]["model_state_bytes"]))
                # Per step: parameters to K-1 replicas once, and gradients back from them after every
                # micro-batch (as DataParallel's backward does), one call each.
                params = single["memory"]["model_state_bytes"]["params"]
                st.expect_close(dp["comm"]["bus_bytes_per_step"], (1 + micro) * (replicas - 1) * params,
                                what + " bus bytes", rel=1e-9)
                st.expect_close(dp["comm"]["calls_per_step"], 1 + micro, what + " calls per step")
                st.check(dp["comm"]["setup_bytes"] >= params, what + ": replicas filled at setup")


def dp_bf16_and_one_replica():
    single = run("dp_single_bf16", "precision.param_dtype=bfloat16")
    dp = run("dp_bf16", "strategy.name=dp", "precision.param_dtype=bfloat16", "precision.reduce_dtype=float32")
    st.expect_close(dp["final_loss"], single["final_loss"], "dp bf16 final_loss", abs_tol=5e-3)
    one = run("dp_one", "strategy.name=dp", "strategy.replicas=1")
    reference = run("dp_one_single")
    expect_equivalent(reference, one, "dp with one replica")
    st.check(one["comm"]["bus_bytes_per_step"] == 0, "dp with one replica moved %s bytes per step"
             % one["comm"]["bus_bytes_per_step"])


def placement_errors_are_config_errors():
    """single and dp run in one process: --nproc 2 is refused before any rank starts."""
    for strategy in ("single", "dp"):
        _, result = run_with_output("dp_nproc_" + strategy, "strategy.name=" + strategy, nproc=2, expect=2)
        st.expect_clean_failure(result, 2, "strategy.name", "this job has 2 ranks")
    _, result = run_with_output("dp_bad_device", "strategy.name=dp", 'strategy.devices=["cpu","gpu:7"]', expect=2)
    st.expect_clean_failure(result, 2, "strategy.devices", "gpu:7")
    _, result = run_with_output("dp_bad_replicas", "strategy.name=dp", "strategy.replicas=-1", expect=2)
    st.expect_clean_failure(result, 2, "strategy.replicas")


if __name__ == "__main__":
    st.main([dp_matches_single, dp_bf16_and_one_replica, placement_errors_are_config_errors])
