#!/usr/bin/env python3
"""The hpz strategy plugin (plugins/hpz, ZeRO++ hpZ, built into build/plugins) over Gloo on
loopback: equal to `single` tensor by tensor (plain SGD, world sizes 3 and 4, secondary groups of
1, 2 and the whole host, with accumulation); its bus bytes are the two-level formula, below FULL_SHARD's
when the secondary group is smaller than the world; parameters, gradients and optimizer state at
1/N between steps; a secondary group that does not divide the world is named.

    STRATA_BIN=build/bin/strata ~/.cache/strata/venv/bin/python tests/integration/test_hpz.py
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402
from test_distributed import CNN_SETS  # noqa: E402
from test_equivalence import SGD, expect_same, run  # noqa: E402


def options_and_bad_group():
    result = st.strata("describe", "hpz")
    st.expect_exit(result, 0)
    st.expect_stdout(result, "secondary_group_size")
    out = st.temp_dir("bad_group")
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", 3,
                       *st.set_args("strategy.name=hpz", "strategy.secondary_group_size=2",
                                    "train.global_batch_size=24", "train.steps=2"), timeout=120)
    st.check(result.returncode != 0, "hpz with a secondary group of 2 at world 3 exited 0", result)
    st.expect_no_crash(result)
    st.expect_stderr(result, "secondary_group_size")


def equal_to_single():
    """Plain SGD on the MLP (676 parameters: world 3 pads) and the CNN, one and two micro-batches."""
    cases = [(3, 1), (3, 0), (4, 2), (4, 0)]  # (world, secondary_group_size); 0: the ranks of the host
    for label, model_sets in (("mlp", []), ("cnn", CNN_SETS)):
        for micro in (1, 2):
            sets = SGD + model_sets + ["train.micro_batches=%d" % micro]
            single, single_dir = run("%s_single_m%d" % (label, micro), sets)
            for world, group in (cases if label == "mlp" else [(4, 2)]):
                what = "%s hpz world %d secondary %d micro %d" % (label, world, group, micro)
                summary, out = run("%s_hpz_w%d_g%d_m%d" % (label, world, group, micro),
                                   sets + ["strategy.name=hpz", "strategy.secondary_group_size=%d" % group], world)
                diff = expect_same(single, single_dir, summary, out, what, "hpz")
                print("  %s: max rel diff %.1e" % (what, diff))


def two_level_traffic():
    """Per micro-batch: the forward all-gather and the reduce-scatter over all N ranks, the
    backward all-gather inside the secondary group of g of every unit but the last (it stays
    gathered into its backward): 2 (N-1)/N x 4 P + (g-1)/g x 4 (P - P_last) bytes (the MLP's two
    units pad to multiples of N: 544 + 132 elements at N = 4, 546 + 132 at N = 3)."""
    micro = 2
    padded = {4: 544 + 132, 3: 546 + 132}
    base = ["train.micro_batches=%d" % micro]
    fsdp, _ = run("bus_fsdp_w4", base + ["strategy.name=fsdp"], 4)
    for world, group in ((4, 2), (4, 4), (3, 1), (3, 3)):
        summary, _ = run("bus_hpz_w%d_g%d" % (world, group), base + ["strategy.name=hpz",
                                                                   "strategy.secondary_group_size=%d" % group], world)
        units = 2.0 * (world - 1) / world + (group - 1.0) / group * (padded[world] - 132) / padded[world]
        expected = micro * units * 4 * padded[world]
        got = summary["comm"]["bus_bytes_per_step"]
        # The clipping norm's scalar all-reduce, if any, is a few bytes on top.
        st.expect_close(got, expected, "hpz world %d secondary %d bus bytes per step" % (world, group), abs_tol=64)
        print("  hpz world %d secondary %d: %.1f bus bytes per step (formula %.1f: %.3g x 4P per micro-batch)"
              % (world, group, got, expected, units))
        if world == 4 and group == 2:
            ratio = got / fsdp["comm"]["bus_bytes_per_step"]
            # FULL_SHARD: 2 x 3/4 of P and 3/4 of P - P_last; hpz gathers P - P_last in pairs (1/2).
            formula = (1.5 * 676 + 0.5 * 544) / (1.5 * 676 + 0.75 * 544)
            st.check(abs(ratio - formula) < 0.01, "hpz with a secondary group of 2 should move %.4f of FULL_SHARD's "
                                                  "bytes at world 4; ratio %.4f" % (formula, ratio))
            print("  against fsdp FULL_SHARD at world 4: %.4f (formula %.4f)" % (ratio, formula))
        if world == 4 and group == 4:
            st.expect_close(got, fsdp["comm"]["bus_bytes_per_step"], "hpz with the whole host as its group vs "
                            "FULL_SHARD bus bytes", rel=1e-3)
    # Model state between steps: 1/N of everything, as zero3.
    ref = run("mem_single", base)[0]["memory"]["model_state_bytes"]
    got = summary["memory"]["model_state_bytes"]  # world 3, secondary group 3
    for key, copies in (("params", 1), ("grads", 1), ("optimizer", 2)):
        allowed = copies * 4 * 3 * 2 + 16
        st.check(abs(got[key] - ref[key] / 3) <= 0.05 * ref[key] / 3 + allowed,
                 "hpz world 3 %s: %s bytes, expected about %.0f" % (key, got[key], ref[key] / 3))


if __name__ == "__main__":
    st.main([options_and_bad_group, equal_to_single, two_level_traffic])
