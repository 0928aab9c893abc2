#!/usr/bin/env python3
"""Two Strata builds against each other (A/B) on bench/peers.py's workloads: the same experiment
file, run by each build's `strata` in turn (alternating which goes first), repeated; each cell is
the median over repeats of summary.json's median step time. For a change that must not slow the
CPU step down: the peers' comparison (bench/peers.py) moves with the machine's load, this one
compares the two builds under the same load.

    ~/.cache/strata/venv/bin/python bench/builds_ab.py --a OLD/bin/strata --b build/bin/strata \\
        [--strategies fsdp,zero3,ddp] [--workloads mlp,cnn] [--repeats 5] [--world 2] [--steps N] \\
        [--json FILE]

A build finds its plugins beside its binary (its own build tree). Prints one line per run and a
markdown table: A's step, B's step, B / A of those medians, the median of the repeats' own B / A
(each repeat runs A and B back to back, so a load that drifts over minutes cancels out in it), in
how many repeats B was the slower, and each side's range. --json writes every run's step time and
the table's figures.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (the workloads and the experiment file they run)


def usage_error(message):
    print("builds_ab: " + message, file=sys.stderr)
    sys.exit(2)


def summarize(runs):
    """The table's figures of one cell from its runs: {"a": [ms per repeat], "b": [...]}."""
    a, b = statistics.median(runs["a"]), statistics.median(runs["b"])
    pairs = [y / x for x, y in zip(runs["a"], runs["b"])]
    return {"a_ms": a, "b_ms": b, "b_over_a": b / a, "pairwise_b_over_a": statistics.median(pairs),
            "b_slower": sum(r > 1 for r in pairs), "repeats": len(pairs),
            "a_range_ms": [min(runs["a"]), max(runs["a"])], "b_range_ms": [min(runs["b"]), max(runs["b"])]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the reference build's strata binary")
    ap.add_argument("--b", required=True, help="the build under test's strata binary")
    ap.add_argument("--strategies", default="fsdp,zero3,ddp")
    ap.add_argument("--workloads", default="mlp,cnn")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    ap.add_argument("--steps", type=int, help="steps of every run (default: each workload's own)")
    ap.add_argument("--json", help="write the runs and the table's figures to this file")
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    for side in ("a", "b"):
        path = getattr(args, side)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            usage_error("--%s %s is not an executable file: give a build's bin/strata." % (side, path))
    workloads, strategies = args.workloads.split(","), args.strategies.split(",")
    for w in workloads:
        if w not in peers.WORKLOADS:
            usage_error("unknown workload '%s' in --workloads (known: %s)." % (w, ", ".join(peers.WORKLOADS)))
    if args.repeats < 1 or args.world < 1 or (args.steps is not None and args.steps < 1):
        usage_error("--repeats, --world and --steps take positive integers.")
    cells = {}
    with tempfile.TemporaryDirectory(prefix="strata-ab-") as tmp:
        for r in range(args.repeats):
            for w in workloads:
                steps = args.steps or peers.WORKLOADS[w]["steps"]
                for s in strategies:
                    order = ("a", "b") if r % 2 == 0 else ("b", "a")
                    for side in order:
                        run_args = argparse.Namespace(strata=getattr(args, side), world=args.world,
                                                      timeout=args.timeout)
                        out = os.path.join(tmp, "%s_%s_%s_%d" % (side, w, s, r))
                        try:
                            got = peers.run_strata(run_args, w, s, steps, args.threads, out)
                        except peers.RunFailed as e:
                            print("builds_ab: build %s: %s" % (side.upper(), e), file=sys.stderr)
                            return 1
                        cells.setdefault((w, s), {"a": [], "b": []})[side].append(got["step_time_s"] * 1e3)
                        print("repeat %d %-4s %-6s %s: %.2f ms" % (r, w, s, side, got["step_time_s"] * 1e3),
                              flush=True)
    table = [dict(workload=w, strategy=s, **summarize(c)) for (w, s), c in cells.items()]
    print("\n| workload | strategy | repeats | A step | B step | B / A | B / A per repeat (median) | B slower |"
          " A range | B range |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for t in table:
        print("| %s | %s | %d | %.2f ms | %.2f ms | %.3f | %.3f | %d of %d | %.2f-%.2f | %.2f-%.2f |"
              % (t["workload"], t["strategy"], t["repeats"], t["a_ms"], t["b_ms"], t["b_over_a"],
                 t["pairwise_b_over_a"], t["b_slower"], t["repeats"], *t["a_range_ms"], *t["b_range_ms"]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"a": args.a, "b": args.b, "world": args.world, "threads": args.threads,
                       "runs_ms": [{"workload": w, "strategy": s, **c} for (w, s), c in cells.items()],
                       "table": table}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
