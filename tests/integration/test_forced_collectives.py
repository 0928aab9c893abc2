#!/usr/bin/env python3
"""Forced collectives (`[distributed] force_collectives = true`, the GPU check's way of running a
strategy's whole NCCL path on one GPU), here over Gloo on loopback: a one-rank job issues exactly
the collectives a two-rank job issues (calls per step, payload), its model still equals `single`'s
tensor by tensor (plain SGD, accumulation, the mlp and the cnn), and without the option the same
one-rank job issues fewer (ddp, which all-reduces on one rank anyway, as many).

    STRATA_BIN=build/bin/strata python3 tests/integration/test_forced_collectives.py
"""
import strata_test as st
from test_distributed import CNN_SETS

COMMON = ["train.steps=12", "train.global_batch_size=24", "train.micro_batches=2", "log.every=4",
          "train.warmup_steps=0", "optimizer.name=sgd", "optimizer.momentum=0", "optimizer.lr=0.1",
          "optimizer.weight_decay=0", "train.save_final=true", "eval.batches=2"]
CASES = [
    ("ddp", []),
    ("zero1", []),
    ("zero2", ["strategy.reduce_bucket_mb=0.001"]),  # several reduce-scatters per micro-batch
    ("zero3", []),
    ("zero3", ["strategy.allgather_bucket_mb=0.0005", "strategy.prefetch=0"]),
    ("fsdp", []),
    ("fsdp", ["strategy.sharding_strategy=SHARD_GRAD_OP"]),
]


def run(label, sets, nproc=1):
    out = st.temp_dir(label)
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", out, "--nproc", nproc,
                       *st.set_args(*(COMMON + ["train.device=cpu"] + sets)), timeout=300)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    return st.load_summary(out), out, result


def forced_runs_issue_the_collectives_of_two_ranks(model_sets, label, cases=CASES):
    _, single_dir, _ = run(label + "_single", model_sets)
    for name, extra in cases:
        sets = model_sets + ["strategy.name=" + name] + extra
        what = "%s %s %s" % (label, name, " ".join(extra))
        forced, forced_dir, result = run(label + "_forced_" + name, sets + ["distributed.force_collectives=true"])
        st.expect_in("forced collectives", result.stdout + result.stderr, result)
        plain, _, _ = run(label + "_plain_" + name, sets + ["distributed.backend=gloo"])
        pair, _, _ = run(label + "_w2_" + name, sets, nproc=2)
        st.check(forced["world_size"] == 1 and forced["backend"] == "gloo",
                 "%s: forced run at world %s over %s" % (what, forced["world_size"], forced["backend"]))
        calls, pair_calls = forced["comm"]["calls_per_step"], pair["comm"]["calls_per_step"]
        st.check(calls == pair_calls, "%s: %.2f collective calls per step forced at world 1, %.2f at world 2"
                 % (what, calls, pair_calls))
        st.expect_close(forced["comm"]["payload_bytes_per_step"], pair["comm"]["payload_bytes_per_step"],
                        what + " payload bytes per step (world 1 forced vs world 2; padding differs)", rel=0.02)
        # ddp all-reduces its buckets even on one rank; every other strategy skips something there.
        fewer = plain["comm"]["calls_per_step"] <= calls if name == "ddp" else plain["comm"]["calls_per_step"] < calls
        st.check(fewer, "%s: the unforced one-rank run issues %.2f calls per step, the forced one %.2f"
                 % (what, plain["comm"]["calls_per_step"], calls))
        st.expect_models_equal(single_dir, forced_dir, what + " forced", rel=1e-6)
        print("  %s: %.2f calls/step forced (world 2: %.2f, unforced: %.2f), payload %.0f B/step"
              % (what, calls, pair_calls, plain["comm"]["calls_per_step"], forced["comm"]["payload_bytes_per_step"]))


def forced_mlp():
    forced_runs_issue_the_collectives_of_two_ranks([], "mlp")


def forced_cnn():
    """The sharded strategies on a model with buffers (GroupNorm) and more units."""
    forced_runs_issue_the_collectives_of_two_ranks(CNN_SETS, "cnn", [c for c in CASES if c[0] in ("zero2", "fsdp")]
                                                   + [("zero3", [])])


def forced_option_needs_no_backend_name():
    """force_collectives alone starts the process group (backend auto: Gloo on the CPU)."""
    summary, _, result = run("auto_backend", ["strategy.name=zero3", "distributed.force_collectives=true"])
    st.check(summary["backend"] == "gloo", "backend %r" % summary["backend"], result)
    st.check(summary["comm"]["calls_per_step"] > 0, "no collective per step", result)


if __name__ == "__main__":
    st.main([forced_mlp, forced_cnn, forced_option_needs_no_backend_name])
