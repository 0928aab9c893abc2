#!/usr/bin/env python3
"""Two Strata builds against each other (A/B) on bench/peers.py's workloads: the same experiment
file, run by each build's `strata` in turn (alternating which goes first), repeated; each cell is
the median over repeats of summary.json's median step time. For a change that must not slow the
CPU step down: the peers' comparison (bench/peers.py) moves with the machine's load, this one
compares the two builds under the same load.

    ~/.cache/strata/venv/bin/python bench/builds_ab.py --a OLD/bin/strata --b build/bin/strata \\
        [--strategies fsdp,zero3,ddp] [--workloads mlp,cnn] [--repeats 5] [--world 2]

A build finds its plugins beside its binary (its own build tree). Prints one line per run and a
markdown table: A's step, B's step, B / A, and each side's range.
"""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peers  # noqa: E402  (the workloads and the experiment file they run)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the reference build's strata binary")
    ap.add_argument("--b", required=True, help="the build under test's strata binary")
    ap.add_argument("--strategies", default="fsdp,zero3,ddp")
    ap.add_argument("--workloads", default="mlp,cnn")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()
    cells = {}
    with tempfile.TemporaryDirectory(prefix="strata-ab-") as tmp:
        for r in range(args.repeats):
            for w in args.workloads.split(","):
                for s in args.strategies.split(","):
                    order = ("a", "b") if r % 2 == 0 else ("b", "a")
                    for side in order:
                        run_args = argparse.Namespace(strata=getattr(args, side), world=args.world,
                                                      timeout=args.timeout)
                        out = os.path.join(tmp, "%s_%s_%s_%d" % (side, w, s, r))
                        got = peers.run_strata(run_args, w, s, peers.WORKLOADS[w]["steps"], args.threads, out)
                        cells.setdefault((w, s), {"a": [], "b": []})[side].append(got["step_time_s"] * 1e3)
                        print("repeat %d %-4s %-6s %s: %.2f ms" % (r, w, s, side, got["step_time_s"] * 1e3),
                              flush=True)
    print("\n| workload | strategy | A step | B step | B / A | A range | B range |")
    print("|---|---|---|---|---|---|---|")
    for (w, s), c in cells.items():
        a, b = statistics.median(c["a"]), statistics.median(c["b"])
        print("| %s | %s | %.2f ms | %.2f ms | %.3f | %.2f-%.2f | %.2f-%.2f |"
              % (w, s, a, b, b / a, min(c["a"]), max(c["a"]), min(c["b"]), max(c["b"])))


if __name__ == "__main__":
    main()
