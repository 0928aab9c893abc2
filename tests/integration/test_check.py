#!/usr/bin/env python3
"""`strata check NAME`: every built-in strategy passes the conformance suite, two strategies with
planted bugs fail it (gradients summed over ranks instead of averaged; two shard chunks swapped in
the saved model, which only a tensor-by-tensor comparison sees), and bad command lines are refused
with exit 2.

    STRATA_BIN=build/bin/strata STRATA_FIXTURE_PLUGIN_DIR=build/tests/fixtures/plugins \\
      python3 tests/integration/test_check.py
"""
import os
import re

import strata_test as st

CHECK_TIMEOUT = 240  # one `strata check` of 1,2,3 world sizes takes about 20 s on 2 cores

# World sizes per built-in strategy: 3 adds uneven shards (ddp's buckets, zero3's padding).
BUILTINS = (("single", "1,2"), ("dp", "1,2"), ("ddp", "1,2,3"), ("fsdp", "1,2"), ("zero1", "1,2"),
            ("zero2", "1,2"), ("zero3", "1,2,3"), ("local_sgd", "1,2"), ("zeropp", "1,2"))
# The rows every check prints at each world size its strategy can run at.
PER_WORLD_CHECKS = ("equivalence mlp/adamw", "equivalence cnn/sgd", "equivalence mlp/sgd, 2 micro-batches", "memory",
                    "communication", "state-dict round trip")


def table_rows(result):
    """The check's table as (check, world, result, detail) tuples."""
    rows = []
    for line in result.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) >= 4 and cells[2] in ("PASS", "FAIL", "n/a"):
            rows.append((cells[0], cells[1], cells[2], "|".join(cells[3:])))
    if not rows:
        st.fail("no table in the output of `strata check`", result)
    return rows


def check(name, *args, env=None, expect=0):
    """`strata check NAME ARGS` with TMPDIR set to a fresh directory; returns (result, tmpdir)."""
    tmp = st.temp_dir("tmp_" + name)
    result = st.strata("check", name, *args, env=dict(env or {}, TMPDIR=tmp), timeout=CHECK_TIMEOUT)
    st.expect_exit(result, expect)
    st.expect_no_crash(result)
    return result, tmp


def builtin_passes(name, worlds, *extra):
    result, tmp = check(name, "--world-sizes", worlds, *extra)
    rows = table_rows(result)
    failed = [r for r in rows if r[2] == "FAIL"]
    st.check(not failed, "%s: failed rows %s" % (name, failed), result)
    st.expect_stdout(result, "strata check %s: %d passed, 0 failed" % (name, sum(r[2] == "PASS" for r in rows)))
    for world in worlds.split(","):
        if name == "single" and world != "1":
            st.check(("all checks", world, "n/a") in [r[:3] for r in rows], "single world %s: no n/a row" % world,
                     result)
            continue
        for what in PER_WORLD_CHECKS:
            st.check((what, world, "PASS") in [r[:3] for r in rows],
                     "%s world %s: no PASS row %r" % (name, world, what), result)
    st.check(("bad option strategy.definitely_not_an_option=1", "-", "PASS") in [r[:3] for r in rows],
             "%s: no PASS row for an unknown option" % name, result)
    if name == "local_sgd":
        st.expect_stdout(result, "(loss band: parameters averaged every sync_every steps)")
    elif name == "zeropp":
        st.expect_stdout(result, "(loss band: parameters gathered and gradients reduced as quantized blocks)")
        st.expect_stdout(result, "(exact with quantize_weights = false, quantize_gradients = false)")
    else:
        st.expect_stdout(result, "(exact up to reduction order)")
    if name == "fsdp":  # its option matrix: each sharding strategy held to its own schedule
        for label in ("SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD over 2"):
            for what in ("memory", "communication"):
                st.check(("%s [%s]" % (what, label), "2", "PASS") in [r[:3] for r in rows],
                         "fsdp world 2: no PASS row %s [%s]" % (what, label), result)
        st.check(("all checks [HYBRID_SHARD over 2]", "1", "n/a") in [r[:3] for r in rows],
                 "fsdp world 1: HYBRID_SHARD over 2 ranks is not n/a", result)
    # A passing check leaves nothing behind in $TMPDIR.
    st.check(os.listdir(tmp) == [], "%s: the check left %s in TMPDIR" % (name, os.listdir(tmp)), result)
    print("  %s (world sizes %s): %d rows, none failed, in %.1f s" % (name, worlds, len(rows), result.seconds))
    return result


def every_builtin_strategy_passes():
    """Each built-in strategy's suite; zero3's with --out (constrained_options_are_probed reads what
    it keeps) and fsdp's table (its choices probed) are kept for the cases that read them."""
    for name, worlds in BUILTINS:
        if name == "zero3":
            out = os.path.join(st.temp_dir("out"), "zero3")
            KEPT["zero3"] = (builtin_passes(name, worlds, "--out", out), out)
        else:
            KEPT[name] = (builtin_passes(name, worlds), None)


KEPT = {}  # strategy -> (the result of its check in every_builtin_strategy_passes, its --out or None)


def options_given_with_set_are_checked():
    """--set runs the strategy with an option and holds it to that option's schedule: hpz at world 4
    with sub-groups of 2 moves its backward gathers over 2 ranks, the rest over 4, and the table
    shows both levels. A key that is not the strategy's is refused before any run."""
    result, _ = check("hpz", "--world-sizes", "4", "--set", "strategy.secondary_group_size=2")
    rows = table_rows(result)
    st.check(not [r for r in rows if r[2] == "FAIL"], "hpz with sub-groups of 2: a row failed", result)
    comm = [r for r in rows if r[0] == "communication [secondary_group_size=2]"]
    st.check(len(comm) == 1 and comm[0][2] == "PASS", "no passing communication row for the option", result)
    st.check(re.search(r"over 4 ranks \+ \d+ over 2 ranks", comm[0][3]) is not None,
             "the communication row does not show the two levels: %s" % comm[0][3], result)
    bad = st.strata("check", "hpz", "--world-sizes", "1", "--set", "strategy.no_such_option=1")
    st.expect_clean_failure(bad, 2, "no_such_option", "is not an option of strategy 'hpz'")
    wrong = st.strata("check", "hpz", "--world-sizes", "1", "--set", "strategy.secondary_group_size=-1")
    st.expect_clean_failure(wrong, 2, "strategy.secondary_group_size", ">= 0")


def constrained_options_are_probed():
    """Each bound and choice list of the schema is tried with a value it rejects (zero3: reduce
    bucket >= 0, all-gather bucket > 0, prefetch >= 0; fsdp: a sharding strategy not in its list), and --out keeps the
    experiments, the runs and the table. Read from the checks every_builtin_strategy_passes ran
    (zero3 there with --out), which runs first."""
    if "zero3" not in KEPT or "fsdp" not in KEPT:
        every_builtin_strategy_passes()
    result, out = KEPT["zero3"]
    rows = [r[:3] for r in table_rows(result)]
    for row in (("bad option strategy.reduce_bucket_mb=-1.0", "-", "PASS"),
                ("bad option strategy.allgather_bucket_mb=0.0", "-", "PASS"),
                ("bad option strategy.prefetch=-1", "-", "PASS")):
        st.check(row in rows, "zero3: no row %r" % (row,), result)
    for name in ("mlp_adamw.toml", "cnn_sgd.toml", "mlp_sgd_accum.toml", "check.md", "runs"):
        st.check(os.path.exists(os.path.join(out, name)), "--out %s holds no %s" % (out, name), result)
    st.expect_stdout(result, "outputs: " + out)
    # The experiment files are ordinary experiments.
    again = st.strata("validate", os.path.join(out, "cnn_sgd.toml"))
    st.expect_exit(again, 0)
    # A directory that is not empty is refused, before any run.
    second = st.strata("check", "zero3", "--world-sizes", "1", "--out", out)
    st.expect_clean_failure(second, 2, "is not an empty directory")
    fsdp = KEPT["fsdp"][0]
    st.check(('bad option strategy.sharding_strategy="definitely_not_a_choice"', "-", "PASS")
             in [r[:3] for r in table_rows(fsdp)], "fsdp: no row for a sharding_strategy outside its choices", fsdp)


def planted_bug_fails():
    """fixture_sum_grads all-reduces gradients with a sum: exact at world size 1, wrong at 2. AdamW
    is nearly blind to the gradient scale (only epsilon sees it); the SGD workloads catch it."""
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("planted_bug")}
    result, tmp = check("fixture_sum_grads", "--world-sizes", "1,2", env=env, expect=1)
    rows = table_rows(result)
    failed = {(r[0], r[1]) for r in rows if r[2] == "FAIL"}
    sgd = {("equivalence cnn/sgd", "2"), ("equivalence mlp/sgd, 2 micro-batches", "2")}
    st.check(sgd <= failed <= sgd | {("equivalence mlp/adamw", "2")},
             "expected the SGD equivalence rows at world 2 (and at most AdamW's) to fail, got %s" % failed, result)
    st.check(all("declared exact up to reduction order" in r[3] and "final model rel" in r[3]
                 for r in rows if r[2] == "FAIL"), "the failed rows do not say what was expected", result)
    st.expect_stdout(result, "strata check fixture_sum_grads: %d passed, %d failed" % (len(rows) - len(failed),
                                                                                        len(failed)))
    kept = re.search(r"^outputs: (\S+)", result.stdout, re.M)
    st.check(kept is not None and kept.group(1).startswith(tmp) and os.path.isdir(kept.group(1)),
             "a failed check keeps its directory under TMPDIR and prints it", result)


def swapped_chunks_fail_only_the_tensor_comparison():
    """fixture_swapped_chunks trains exactly like zero1 but saves a model with two shard chunks
    swapped: loss, parameter norm, memory, traffic and a reload by single all pass; the
    tensor-by-tensor comparison with single's model fails at world 2, and only there."""
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("swapped_chunks")}
    result, _ = check("fixture_swapped_chunks", "--world-sizes", "1,2", env=env, expect=1)
    rows = table_rows(result)
    failed = {(r[0], r[1]) for r in rows if r[2] == "FAIL"}
    expected = {("equivalence mlp/adamw", "2"), ("equivalence cnn/sgd", "2"),
                ("equivalence mlp/sgd, 2 micro-batches", "2")}
    st.check(failed == expected, "expected exactly the equivalence rows at world 2 to fail, got %s" % failed, result)
    for r in rows:
        if r[2] == "FAIL":
            st.check("final_loss abs" in r[3] and "<= 1e-04" in r[3], "%s: the loss should agree: %s" % (r[0], r[3]),
                     result)
    st.check(("state-dict round trip", "2", "PASS") in [r[:3] for r in rows],
             "the reload by single (a norm) should not see the swap", result)


def bad_command_lines():
    unknown = st.strata("check", "nosuchstrategy")
    st.expect_clean_failure(unknown, 2, "unknown strategy 'nosuchstrategy'", "available:", "ddp", "zero3")
    typo = st.strata("check", "ddpp")
    st.expect_clean_failure(typo, 2, "Did you mean 'ddp'?")
    for worlds in ("0", "a,b", "1,,2", "-1", ""):
        result = st.strata("check", "ddp", "--world-sizes", worlds)
        st.expect_clean_failure(result, 2, "--world-sizes takes a comma-separated list of positive integers")
    missing = st.strata("check")
    st.expect_clean_failure(missing, 2, "needs a strategy name")
    # Several names: every one is checked before any run.
    several = st.strata("check", "single,nosuchstrategy")
    st.expect_clean_failure(several, 2, "unknown strategy 'nosuchstrategy'")
    st.expect_not_in("strata check single:", several.stdout, several, "stdout")
    empty = st.strata("check", "ddp,")
    st.expect_clean_failure(empty, 2, "empty strategy name")


def several_strategies_in_one_call():
    """`strata check A,B`: each suite in turn (in --out DIR/NAME), a last line naming what failed,
    exit 1 if any did: single passes (n/a above world size 1), the planted-bug fixture fails."""
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("planted_bug")}
    out = os.path.join(st.temp_dir("several"), "out")
    result, _ = check("single,fixture_sum_grads", "--world-sizes", "2", "--out", out, env=env, expect=1)
    st.expect_stdout(result, "strata check single: ")
    st.expect_stdout(result, "strata check fixture_sum_grads: ")
    st.expect_stdout(result, "strata check single,fixture_sum_grads: 1 of 2 strategies passed (failed: "
                             "fixture_sum_grads)")
    for name in ("single", "fixture_sum_grads"):
        st.check(os.path.isfile(os.path.join(out, name, "check.md")), "no %s/check.md under --out" % name, result)


if __name__ == "__main__":
    st.main([bad_command_lines, several_strategies_in_one_call, planted_bug_fails, swapped_chunks_fail_only_the_tensor_comparison,
             every_builtin_strategy_passes, constrained_options_are_probed, options_given_with_set_are_checked])
