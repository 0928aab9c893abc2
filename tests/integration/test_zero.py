#!/usr/bin/env python3
"""ZeRO-1 and ZeRO-2 (strategies/zero) over Gloo on loopback: the same parameters as `single`,
the memory per rank docs/user-guide.md gives (optimizer state / N, for zero2 gradients / N too) and
the traffic of DDP (reduce-scatter + all-gather = all-reduce).

    STRATA_BIN=build/bin/strata python3 tests/integration/test_zero.py
"""
import re

import strata_test as st
from test_distributed import CNN_SETS, COMMON_SETS, expect_equivalent, run_with_output

STAGES = ("zero1", "zero2")
# Small buckets: several buckets per model, each padded to a multiple of the world size.
TINY_BUCKETS = "strategy.reduce_bucket_mb=0.001"


def run(label, *sets, nproc=1):
    """Returns (summary, result) of a run that must succeed."""
    return run_with_output(label, *sets, nproc=nproc)


def bucket_count(result, stage):
    """Buckets per rank, from the strategy's setup line (`zeroK: B flat groups, ...`: the engine's
    layout, its flat groups being the gradient buckets)."""
    text = (result.stdout or "") + (result.stderr or "")
    found = re.findall(r"%s: (\d+) flat groups" % stage, text)
    st.check(found, "%s: no bucket count in the output" % stage, result)
    return int(found[0])


def strategies_match_single(strategies, model_sets, label, check_world_size=True):
    """Each strategy at world 2 and 3, with and without accumulation, matches single."""
    for micro in (1, 2):
        single, _ = run("%s_single_m%d" % (label, micro), *model_sets, "train.micro_batches=%d" % micro)
        for name in strategies:
            for world in (2, 3):
                summary, _ = run("%s_%s_w%d_m%d" % (label, name, world, micro), *model_sets,
                                 "strategy.name=" + name, "train.micro_batches=%d" % micro, nproc=world)
                what = "%s %s world %d micro %d" % (label, name, world, micro)
                expect_equivalent(single, summary, what)
                if check_world_size:
                    st.check(summary["world_size"] == world, what + ": world_size %s" % summary["world_size"])
                print("  %s: param_norm %.12g (single %.12g), final_loss %.9g (single %.9g)"
                      % (what, summary["param_norm"], single["param_norm"], summary["final_loss"],
                         single["final_loss"]))


def equivalence(model_sets, label):
    strategies_match_single(STAGES, model_sets, label)


def zero_matches_single_mlp():
    """The mlp has 676 parameters: not a multiple of 3, so world 3 exercises the padding."""
    equivalence([], "mlp")


def zero_matches_single_cnn():
    equivalence(CNN_SETS, "cnn")


def zero_matches_single_tiny_buckets():
    """Many padded buckets, launched in order from the hooks; world 1 is the identity."""
    single, _ = run("tiny_single", "train.micro_batches=2")
    for stage in STAGES:
        for world in (1, 3):
            summary, result = run("tiny_%s_w%d" % (stage, world), "strategy.name=" + stage, TINY_BUCKETS,
                                  "train.micro_batches=2", nproc=world)
            st.check(bucket_count(result, stage) > 1, "%s: expected several buckets" % stage, result)
            expect_equivalent(single, summary, "%s world %d tiny buckets" % (stage, world))
        # Reduce-scatter after backward instead of from the hooks; several buckets per all-gather.
        summary, _ = run("tiny_%s_noov" % stage, "strategy.name=" + stage, TINY_BUCKETS, "train.micro_batches=2",
                         "strategy.overlap=false", "strategy.allgather_bucket_mb=0.003", nproc=3)
        expect_equivalent(single, summary, "%s world 3 tiny buckets, no overlap, coalesced all-gathers" % stage)


def expect_within(actual, expected, allowance, what):
    low, high = expected * 0.95 - allowance, expected * 1.05 + allowance
    st.check(low <= actual <= high, "%s: %s bytes, expected %.1f (allowed %.1f..%.1f)"
             % (what, actual, expected, low, high))


def memory_is_sharded():
    """fp32 AdamW: zero1 holds params 4P, grads 4P, optimizer 8P/N; zero2 params 4P, grads 4P/N,
    optimizer 8P/N; plus at most N-1 padding elements per bucket."""
    single, _ = run("mem_single")
    for bucket_sets in ([], [TINY_BUCKETS]):
        ref = single["memory"]["model_state_bytes"]
        for world in (2, 3, 4):
            for stage in STAGES:
                summary, result = run("mem_%s_w%d" % (stage, world), "strategy.name=" + stage, *bucket_sets,
                                      nproc=world)
                got = summary["memory"]["model_state_bytes"]
                pad = 4 * world * bucket_count(result, stage)  # padding bytes per fp32 copy
                what = "%s world %d%s" % (stage, world, " tiny buckets" if bucket_sets else "")
                expect_within(got["params"], ref["params"], pad, what + " params")
                grads = ref["grads"] / world if stage == "zero2" else ref["grads"]
                expect_within(got["grads"], grads, pad, what + " grads")
                expect_within(got["optimizer"], ref["optimizer"] / world, 2 * pad, what + " optimizer")
                print("  %s: params %d grads %d optimizer %d (single %d %d %d)"
                      % (what, got["params"], got["grads"], got["optimizer"], ref["params"], ref["grads"],
                         ref["optimizer"]))


def traffic_matches_ddp():
    """Reduce-scatter of gradients + all-gather of parameters = one all-reduce: 2(n-1)/n x 4P."""
    for world in (2, 3):
        ddp, _ = run("bus_ddp_w%d" % world, "strategy.name=ddp", nproc=world)
        for stage in STAGES:
            summary, _ = run("bus_%s_w%d" % (stage, world), "strategy.name=" + stage, nproc=world)
            ratio = summary["comm"]["bus_bytes_per_step"] / ddp["comm"]["bus_bytes_per_step"]
            print("  %s world %d: bus bytes per step %.1f, ddp %.1f, ratio %.4f"
                  % (stage, world, summary["comm"]["bus_bytes_per_step"], ddp["comm"]["bus_bytes_per_step"], ratio))
            st.check(0.95 <= ratio <= 1.05, "%s world %d: bus bytes ratio to ddp %.4f" % (stage, world, ratio))


def expect_unused_parameter_named(strategies):
    """A parameter without a gradient fails a run of each strategy fast and named, never a hang."""
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("unused_param_model")}
    st.fixture_libraries("unused_param_model")
    for name in strategies:
        result = st.strata("run", st.GOOD_SYNTHETIC, "--out", st.temp_dir("unused_" + name), "--nproc", 2,
                           *st.set_args("model.name=fixture_unused", "strategy.name=" + name), env=env,
                           timeout=60)
        st.check(result.returncode != 0, "a %s run with an unused parameter exited 0" % name, result)
        st.expect_no_crash(result)
        st.expect_stderr(result, "received no gradient")


def unused_parameter_is_named():
    expect_unused_parameter_named(STAGES)


if __name__ == "__main__":
    st.main([zero_matches_single_mlp, zero_matches_single_cnn, zero_matches_single_tiny_buckets,
             memory_is_sharded, traffic_matches_ddp, unused_parameter_is_named])
