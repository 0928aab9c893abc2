#!/usr/bin/env python3
"""How much of a step's communication ran beside its computation, read from the traces of
`[train] trace_steps` (RUN_DIR/trace/rank_<R>.pt.trace.json).

    python3 bench/trace_overlap.py RUN_DIR/trace/rank_0.pt.trace.json[.gz] [...] [--json FILE]

Per trace and traced step (Strata's `strata step N` scope):
  - on a GPU, every kernel and copy the step launched (joined to its launch inside the step's scope
    by correlation id), split into communication (what a collective launched: the launch lies
    inside a c10d collective's op on the same thread, or the kernel is NCCL's) and computation
    (every other kernel; other copies are left out): the step's GPU span from its first kernel to
    its last, the time some compute kernel ran, the time some communication ran, and the exposed
    communication, the time communication ran while no compute kernel did (what overlap did not
    hide), with the device work of each kind of collective counted. At world size 1 (forced
    collectives) NCCL copies out-of-place collectives and skips in-place ones, so only the former
    show there;
  - everywhere, the collectives the step called as c10d names them (`nccl:all_gather`,
    `gloo:all_reduce`, ...), counted: on the CPU that is all a trace shows of communication, since
    Gloo's transfers run on its own threads;
  - the schedule: where the step called them, per micro-batch in its units' forwards (`strata
    forward <unit>`) and in its backward (the rest of the micro-batch), then in the optimizer and
    elsewhere in the step. A sharded strategy's last unit staying gathered into its backward shows
    as one all-gather fewer in backward than in forward; zero1/zero2's gathers of the next step's
    parameters show in the optimizer.
Exits 2 on a file that is not such a trace.
"""
import argparse
import bisect
import collections
import gzip
import json
import re
import sys

STEP = re.compile(r"^strata step (\d+)$")
COLLECTIVE = re.compile(r"^(nccl|gloo|mpi|ucc):")
NCCL_KIND = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)", re.I)


def union(intervals):
    """Merged, sorted (start, end) intervals."""
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def length(merged):
    return sum(e - s for s, e in merged)


def minus(a, b):
    """Total length of the merged intervals `a` outside the merged intervals `b`."""
    starts = [s for s, _ in b]
    total = 0.0
    for s, e in a:
        covered = 0.0
        i = max(0, bisect.bisect_right(starts, s) - 1)
        while i < len(b) and b[i][0] < e:
            covered += max(0.0, min(e, b[i][1]) - max(s, b[i][0]))
            i += 1
        total += (e - s) - covered
    return total


def load(path):
    try:
        with (gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")) as f:
            data = json.load(f)
        events = data["traceEvents"]
    except (OSError, EOFError, ValueError, KeyError, TypeError) as e:
        sys.stderr.write("trace_overlap: %s is not a trace of `[train] trace_steps` (%s).\n" % (path, e))
        sys.exit(2)
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e and "dur" in e]


def analyze(path):
    events = load(path)
    steps = sorted((int(STEP.match(e["name"]).group(1)), e["ts"], e["ts"] + e["dur"])
                   for e in events if STEP.match(e.get("name", "")))
    if not steps:
        sys.stderr.write("trace_overlap: %s holds no `strata step N` scope: not a trace of [train] trace_steps.\n"
                         % path)
        sys.exit(2)

    def step_of(ts):
        for n, s, e in steps:
            if s <= ts <= e:
                return n
        return None

    # The collectives called (c10d's ops on the host), and per host thread, to tell which launches
    # a collective made.
    called = [e for e in events if COLLECTIVE.match(e.get("name", "")) and e.get("cat") != "kernel"]
    collective_ops = collections.defaultdict(list)
    for e in called:
        collective_ops[e.get("tid")].append((e["ts"], e["ts"] + e["dur"], e["name"]))

    def collective_of(launch):
        for s, e, name in collective_ops.get(launch.get("tid"), ()):
            if s <= launch["ts"] <= e:
                return name
        return None

    # Launches inside a step's scope (on any host thread: autograd's too), by correlation id: the
    # step and the collective that made them, if any.
    launched = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            n = step_of(e["ts"])
            if n is not None:
                launched[e["args"]["correlation"]] = (n, collective_of(e))
    # Each step's device work, with the collective that launched it (None: computation or a copy).
    device_of = collections.defaultdict(list)
    for ev in events:
        if ev.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            source = launched.get(ev.get("args", {}).get("correlation"))
            if source is not None:
                device_of[source[0]].append((ev, source[1]))
    scopes = [(ev["name"], ev["ts"], ev["ts"] + ev["dur"]) for ev in events
              if ev.get("name", "").startswith("strata ") and ev.get("cat") != "kernel"]

    def where(ts, s, e):
        """The schedule's place of a collective called at `ts` in the step [s, e]."""
        within = [(name, a, b) for name, a, b in scopes if a <= ts <= b and s <= a and b <= e]
        micro = [name for name, _, _ in within if name.startswith("strata micro-batch ")]
        if micro:
            part = "forward" if any(name.startswith("strata forward ") for name, _, _ in within) else "backward"
            return "micro-batch %s %s" % (micro[0].rsplit(" ", 1)[1], part)
        if any(name == "strata optimizer" for name, _, _ in within):
            return "optimizer"
        return "step"

    rows = []
    for n, s, e in steps:
        in_step = [ev for ev in called if s <= ev["ts"] <= e]
        collectives = collections.Counter(ev["name"] for ev in in_step)
        schedule = collections.defaultdict(collections.Counter)
        for ev in in_step:
            schedule[where(ev["ts"], s, e)][ev["name"]] += 1
        device = device_of[n]
        row = {"trace": path, "step": n, "collectives": dict(sorted(collectives.items())), "gpu": bool(device),
               "schedule": {place: dict(sorted(c.items())) for place, c in schedule.items()}}
        if device:
            comm, compute, kinds = [], [], collections.Counter()
            for ev, collective in device:
                m = NCCL_KIND.search(ev["name"])
                if collective or m:
                    comm.append(ev)
                    kinds[collective or "nccl " + m.group(1)] += 1
                elif ev.get("cat") == "kernel":
                    compute.append(ev)
            comm_u = union((ev["ts"], ev["ts"] + ev["dur"]) for ev in comm)
            compute_u = union((ev["ts"], ev["ts"] + ev["dur"]) for ev in compute)
            start = min(ev["ts"] for ev, _ in device)
            end = max(ev["ts"] + ev["dur"] for ev, _ in device)
            row.update(span_us=end - start, compute_us=length(compute_u), comm_us=length(comm_u),
                       exposed_comm_us=minus(comm_u, compute_u), comm_device_work=dict(sorted(kinds.items())))
        rows.append(row)
    return rows


def table(rows):
    out = ["| trace | step | GPU span | compute | communication | exposed communication | hidden | communication on "
           "the GPU | collectives called |", "|---|--:|--:|--:|--:|--:|--:|---|---|"]
    for r in rows:
        called = ", ".join("%s x%d" % kv for kv in r["collectives"].items()) or "none"
        if r["gpu"]:
            hidden = "%.0f%%" % (100 * (1 - r["exposed_comm_us"] / r["comm_us"])) if r["comm_us"] else "-"
            kernels = ", ".join("%s x%d" % kv for kv in r["comm_device_work"].items()) or "none"
            out.append("| %s | %d | %.3f ms | %.3f ms | %.3f ms | %.3f ms | %s | %s | %s |" % (
                r["trace"], r["step"], r["span_us"] / 1e3, r["compute_us"] / 1e3, r["comm_us"] / 1e3,
                r["exposed_comm_us"] / 1e3, hidden, kernels, called))
        else:
            out.append("| %s | %d | - | - | - | - | - | no GPU kernels | %s |" % (r["trace"], r["step"], called))
    return "\n".join(out)


def schedule_table(rows):
    out = ["| trace | step | where | collectives called |", "|---|--:|---|---|"]
    for r in rows:
        def order(place):  # micro-batches in order, forward before backward, then the optimizer, then the rest
            words = place.split()
            if words[0] == "micro-batch":
                return (0, int(words[1]), words[2] == "backward")
            return (1 if place == "optimizer" else 2, 0, False)
        for place in sorted(r["schedule"], key=order):
            out.append("| %s | %d | %s | %s |" % (r["trace"], r["step"], place, ", ".join(
                "%s x%d" % kv for kv in r["schedule"][place].items())))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    rows = [r for path in args.traces for r in analyze(path)]
    print(table(rows))
    print()
    print(schedule_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
