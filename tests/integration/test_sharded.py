#!/usr/bin/env python3
"""ZeRO-3 and FSDP (strata/engine.hpp, Sharded::kParameters) over Gloo on loopback: the same parameters as
`single` (every sharding strategy, padding, accumulation), parameters, gradients and optimizer
state at 1/N per rank, and the traffic of docs/user-guide.md (about 3 Psi
for zero3 and FULL_SHARD against DDP's 2 Psi).

    STRATA_BIN=build/bin/strata python3 tests/integration/test_sharded.py
"""
import re

import strata_test as st
from test_distributed import CNN_SETS, expect_equivalent
from test_zero import expect_unused_parameter_named, expect_within, run, strategies_match_single

STRATEGIES = ("zero3", "fsdp")


def group_count(result):
    """Flat groups per rank, from the setup line (`N flat groups over U units`)."""
    text = (result.stdout or "") + (result.stderr or "")
    found = re.findall(r"(\d+) flat groups over \d+ units", text)
    st.check(found, "no flat group count in the output", result)
    return int(found[0])


def equivalence(model_sets, label):
    strategies_match_single(STRATEGIES, model_sets, label, check_world_size=False)


def sharded_matches_single_mlp():
    """676 parameters in units of 544 and 132: world 3 pads both."""
    equivalence([], "mlp")


def sharded_matches_single_cnn():
    equivalence(CNN_SETS, "cnn")


def variants_match_single():
    """Every fsdp sharding strategy, zero3 cut into small groups and buckets, without prefetch or
    overlap; HYBRID_SHARD over 2 groups of 2 ranks."""
    single, _ = run("var_single", "train.micro_batches=2")
    cases = [
        (3, ["strategy.name=fsdp", "strategy.sharding_strategy=SHARD_GRAD_OP"]),
        (3, ["strategy.name=fsdp", "strategy.sharding_strategy=NO_SHARD"]),
        (4, ["strategy.name=fsdp", "strategy.sharding_strategy=HYBRID_SHARD", "strategy.shard_group_size=2"]),
        (3, ["strategy.name=fsdp", "strategy.forward_prefetch=false", "strategy.backward_prefetch=false"]),
        (3, ["strategy.name=zero3", "strategy.allgather_bucket_mb=0.0005", "strategy.reduce_bucket_mb=0.002"]),
        (3, ["strategy.name=zero3", "strategy.prefetch=0", "strategy.overlap=false"]),
        (1, ["strategy.name=zero3"]),
        (1, ["strategy.name=fsdp", "strategy.sharding_strategy=NO_SHARD"]),
    ]
    for world, sets in cases:
        label = "var_w%d_" % world + "_".join(s.split("=")[1] for s in sets)
        summary, result = run(label, "train.micro_batches=2", *sets, nproc=world)
        expect_equivalent(single, summary, "%s world %d" % (" ".join(sets), world))
    _, result = run("var_groups", "strategy.name=zero3", "strategy.allgather_bucket_mb=0.0005", nproc=2)
    st.check(group_count(result) > 2, "zero3 with a 512-byte all-gather cap: expected more groups than units",
             result)


def memory_is_sharded():
    """fp32 AdamW: parameters 4P/N, gradients 4P/N, optimizer 8P/N (plus < N padding elements per
    group, and the step counters of AdamW)."""
    single, _ = run("mem_single")
    ref = single["memory"]["model_state_bytes"]
    for world in (2, 3, 4):
        for name in STRATEGIES:
            summary, result = run("mem_%s_w%d" % (name, world), "strategy.name=" + name, nproc=world)
            got = summary["memory"]["model_state_bytes"]
            pad = 4 * world * group_count(result)
            what = "%s world %d" % (name, world)
            expect_within(got["params"], ref["params"] / world, pad, what + " params")
            expect_within(got["grads"], ref["grads"] / world, pad, what + " grads")
            expect_within(got["optimizer"], ref["optimizer"] / world, 2 * pad, what + " optimizer")
            print("  %s: params %d grads %d optimizer %d (single %d %d %d)"
                  % (what, got["params"], got["grads"], got["optimizer"], ref["params"], ref["grads"],
                     ref["optimizer"]))


def traffic_against_ddp():
    """zero3 and FULL_SHARD gather every unit twice but the last (it stays gathered from its forward
    into its backward, which follows at once) and reduce-scatter once: (3 Psi - Psi_last)(n-1)/n
    against DDP's 2 Psi (n-1)/n; SHARD_GRAD_OP gathers once (as zero1/2), NO_SHARD all-reduces (as
    DDP). The MLP's units hold 544 and 132 parameters, padded to a multiple of n."""
    for world in (2, 3):
        ddp, _ = run("bus_ddp_w%d" % world, "strategy.name=ddp", nproc=world)
        units = [-(-p // world) * world for p in (544, 132)]
        full = (3 * sum(units) - units[-1]) / (2 * 676)
        cases = [("zero3", [], full - 0.01, full + 0.01), ("fsdp", [], full - 0.01, full + 0.01),
                 ("fsdp", ["strategy.sharding_strategy=SHARD_GRAD_OP"], 0.95, 1.05),
                 ("fsdp", ["strategy.sharding_strategy=NO_SHARD"], 0.95, 1.05)]
        for name, sets, low, high in cases:
            summary, _ = run("bus_%s_w%d_%d" % (name, world, len(sets)), "strategy.name=" + name, *sets, nproc=world)
            ratio = summary["comm"]["bus_bytes_per_step"] / ddp["comm"]["bus_bytes_per_step"]
            what = "%s%s world %d" % (name, " " + sets[0] if sets else "", world)
            print("  %s: bus bytes per step %.1f, ddp %.1f, ratio %.4f"
                  % (what, summary["comm"]["bus_bytes_per_step"], ddp["comm"]["bus_bytes_per_step"], ratio))
            st.check(low <= ratio <= high, "%s: bus bytes ratio to ddp %.4f, expected %.2f..%.2f"
                     % (what, ratio, low, high))


def bad_hybrid_group_is_named():
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", st.temp_dir("hybrid_bad"), "--nproc", 3,
                       *st.set_args("strategy.name=fsdp", "strategy.sharding_strategy=HYBRID_SHARD",
                                    "strategy.shard_group_size=2", "train.global_batch_size=24"), timeout=60)
    st.check(result.returncode != 0, "HYBRID_SHARD with a group size that does not divide 3 exited 0", result)
    st.expect_no_crash(result)
    st.expect_stderr(result, "shard_group_size")


def unused_parameter_is_named():
    expect_unused_parameter_named(STRATEGIES)


if __name__ == "__main__":
    st.main([sharded_matches_single_mlp, sharded_matches_single_cnn, variants_match_single, memory_is_sharded,
             traffic_against_ddp, bad_hybrid_group_is_named, unused_parameter_is_named])
