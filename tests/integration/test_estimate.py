#!/usr/bin/env python3
"""`strata estimate`: one profile run on one device, then every strategy's memory per rank and bus
bytes per step at world sizes 1, 2 and 3, predicted, against measured `strata run`s at world size
3 (ddp, zero2, zero3): model state and tensor peak within 10%, bus bytes within 1%. estimate.json
and estimate.csv are written; an unknown strategy and a bad network file are errors (exit 2)."""

import csv
import json
import os

import strata_test as st

SETS = ["train.global_batch_size=48", "train.steps=8"]


def estimate_matches_measured_runs():
    out = st.temp_dir("estimate")
    result = st.strata("estimate", st.GOOD_SYNTHETIC, "--world-sizes", "1,2,3", "--out", out, *st.set_args(*SETS))
    st.expect_exit(result, 0)
    st.expect_stdout(result, "PREDICTED")
    for strategy in ("single", "ddp", "zero1", "zero2", "zero3", "fsdp", "dp"):
        st.expect_stdout(result, "| " + strategy + " |")
    with open(os.path.join(out, "estimate.json")) as f:
        estimate = json.load(f)
    with open(os.path.join(out, "estimate.csv")) as f:
        rows = list(csv.DictReader(f))
    st.check(len(rows) == 7 * 3, f"estimate.csv has 21 rows (7 strategies x 3 world sizes), not {len(rows)}")
    st.check(os.path.isfile(os.path.join(out, "profile", "summary.json")), "the profile run is kept under --out")
    predicted = {(r["strategy"], r["world_size"]): r for r in estimate["rows"]}
    st.check(not predicted[("single", 2)]["applicable"], "single is not applicable at world size 2")
    for strategy in ("ddp", "zero2", "zero3"):
        run_dir = st.temp_dir("measured_" + strategy)
        st.strata_run(st.GOOD_SYNTHETIC, run_dir, *SETS, "strategy.name=" + strategy, "distributed.nproc=3")
        summary = st.load_summary(run_dir)
        memory = summary["memory"]
        measured_state = sum(memory["model_state_bytes"].values())
        p = predicted[(strategy, 3)]
        st.expect_close(p["memory"]["model_state_bytes"], measured_state, f"{strategy}@3 model state bytes", rel=0.10)
        st.expect_close(p["memory"]["peak_bytes"], memory["peak_tensor_bytes"], f"{strategy}@3 peak tensor bytes", rel=0.10)
        st.expect_close(p["bus_bytes_per_step"], summary["comm"]["bus_bytes_per_step"], f"{strategy}@3 bus bytes per step",
                        rel=0.01)
        print(f"  {strategy}@3: state {p['memory']['model_state_bytes']:.0f} predicted / {measured_state} measured; "
              f"peak {p['memory']['peak_bytes']:.0f} / {memory['peak_tensor_bytes']}; "
              f"bus {p['bus_bytes_per_step']:.1f} / {summary['comm']['bus_bytes_per_step']:.1f}")
    # --profile reuses that run: no new profile.
    again = st.temp_dir("estimate_again")
    reuse = st.strata("estimate", st.GOOD_SYNTHETIC, "--world-sizes", "2", "--strategies", "ddp", "--out", again,
                      "--profile", os.path.join(out, "profile"), *st.set_args(*SETS))
    st.expect_exit(reuse, 0)
    st.check(not os.path.exists(os.path.join(again, "profile")), "--profile starts no profile run")


def bad_input_is_exit_2():
    out = st.temp_dir("estimate_bad")
    unknown = st.strata("estimate", st.GOOD_SYNTHETIC, "--strategies", "ddp,zer3", "--out", out)
    st.expect_clean_failure(unknown, 2, "unknown strategy 'zer3'", "zero3")
    network = os.path.join(out, "net.toml")
    with open(network, "w") as f:
        f.write("[cluster]\ngpus_per_node = 8\n")
    bad = st.strata("estimate", st.GOOD_SYNTHETIC, "--network", network, "--out", out)
    st.expect_clean_failure(bad, 2, "intra_node_gbps is missing")
    example = os.path.join(st.REPO, "examples", "clusters", "8xh100_nvlink_ib400.toml")
    profile = st.temp_dir("estimate_profile")
    st.strata_run(st.GOOD_SYNTHETIC, profile, *SETS)
    good = st.strata("estimate", st.GOOD_SYNTHETIC, "--network", example, "--world-sizes", "8,16", "--profile", profile,
                     "--out", out, "--device-memory", "80", *st.set_args(*SETS))
    st.expect_exit(good, 0)
    st.expect_stdout(good, "8x H100")


if __name__ == "__main__":
    st.main([estimate_matches_measured_runs, bad_input_is_exit_2])
