#!/usr/bin/env python3
"""The zeropp strategy plugin (plugins/zeropp, ZeRO++ over zero3, built into build/plugins) over
Gloo on loopback:

- qgZ alone (gradients exchanged as int8 blocks by all-to-all, in one level at world 3 with uneven
  shards, in two at world 4 with sub-groups of 2) ends within int8's error of zero3's model, tensor by
  tensor (plain SGD, two micro-batches): a row sent to the wrong rank or summed in the wrong order
  is off by the size of the update itself;
- with its three parts off it is zero3 to rounding;
- at world 4 with sub-groups of 2 and all three parts on, its bus bytes per step are at most 0.35x
  zero3's, and each part's bytes are its schedule's (`strata check` holds every row of the option
  matrix; here the three figures are read from the runs).

    STRATA_BIN=build/bin/strata ~/.cache/strata/venv/bin/python tests/integration/test_zeropp.py
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402
from test_equivalence import SGD, run  # noqa: E402

# int8 blocks of 256 with one scale each: an element is off by at most half a step, 1/254 of its
# block's largest magnitude, each step. Measured on these runs: 5e-3 to 8e-3 relative; a row sent to
# the wrong rank: 0.7.
QGZ_RTOL = 2e-2
OFF = ["strategy.quantize_weights=false", "strategy.quantize_gradients=false"]


def qgz_is_zero3_within_int8():
    sets = SGD + ["train.micro_batches=2"]
    zero3s = {}
    for world, group in ((3, 1), (4, 2)):
        _, zero3 = zero3s[world] = run("zero3_w%d" % world, sets + ["strategy.name=zero3"], world)
        what = "zeropp qgZ world %d sub-groups of %d" % (world, group)
        _, out = run("qgz_w%d_g%d" % (world, group),
                     sets + ["strategy.name=zeropp", "strategy.quantize_weights=false",
                             "strategy.secondary_group_size=%d" % group], world)
        diff, name = st.model_difference(zero3, out)
        st.check(diff <= QGZ_RTOL, "%s: final model differs from zero3's by %.3g (relative) in %s; int8 allows %g"
                 % (what, diff, name, QGZ_RTOL))
        st.check(diff > 0, "%s: final model equal to zero3's: were the gradients quantized at all?" % what)
        print("  %s: max rel diff %.1e against zero3" % (what, diff))
    # Every part off: zero3's values (hpZ moves the same values), to rounding.
    _, off = run("off_w4", sets + ["strategy.name=zeropp", "strategy.secondary_group_size=2"] + OFF, 4)
    st.expect_models_equal(zero3s[4][1], off, "zeropp with its parts off against zero3 at world 4")


def bus_bytes_at_world_4():
    """On the quick start's MLP (235,146 parameters; on the check's 676 a block's scale is a large
    share of a row), 20 steps."""
    st.require_fashion_mnist()
    base = ["train.steps=20", "eval.every=0", "log.every=10"]

    def run(label, sets, world):
        out = st.temp_dir(label)
        result = st.strata("run", st.QUICKSTART, "--out", out, "--nproc", world, *st.set_args(*sets), timeout=300)
        st.expect_exit(result, 0)
        return st.load_summary(out), out

    zero3 = run("bus_zero3", base + ["strategy.name=zero3"], 4)[0]["comm"]["bus_bytes_per_step"]
    figures = {}
    for label, sets in (("all three", []),
                        ("qwZ", ["strategy.quantize_gradients=false", "strategy.secondary_group_size=1"]),
                        ("qgZ", ["strategy.quantize_weights=false", "strategy.secondary_group_size=1"]),
                        ("hpZ", ["strategy.quantize_weights=false", "strategy.quantize_gradients=false"])):
        summary = run("bus_" + label.replace(" ", "_"), base + ["strategy.name=zeropp", "strategy.secondary_group_size=2"]
                      + sets, 4)[0]
        figures[label] = summary["comm"]["bus_bytes_per_step"] / zero3
        print("  zeropp %s at world 4: %.0f bus bytes per step, %.3fx zero3's" % (label, figures[label] * zero3,
                                                                                figures[label]))
    st.check(figures["all three"] <= 0.35, "zeropp with qwZ, hpZ and qgZ should move at most 0.35x zero3's bytes at "
             "world 4 with sub-groups of 2; it moved %.3fx" % figures["all three"])
    for part in ("qwZ", "qgZ", "hpZ"):
        st.check(figures["all three"] < figures[part] < 1.0, "%s alone should move less than zero3 and more than all "
                 "three parts: %.3fx" % (part, figures[part]))


def check_holds_the_two_level_exchange():
    """`strata check` at world 4 with sub-groups of 2: the schedule's all-to-all inside the pairs
    and across them is what the runs measure."""
    tmp = st.temp_dir("check_tmp")
    result = st.strata("check", "zeropp", "--world-sizes", "4", "--no-matrix", "--set", "strategy.secondary_group_size=2",
                       env={"TMPDIR": tmp}, timeout=300)
    st.expect_exit(result, 0)
    st.expect_stdout(result, "0 failed")
    st.expect_stdout(result, "over 2 ranks")


if __name__ == "__main__":
    st.main([qgz_is_zero3_within_int8, bus_bytes_at_world_4, check_holds_the_two_level_exchange])
