#!/usr/bin/env python3
"""Two hosts emulated by two network namespaces joined by a veth pair: rank 0 in A, rank 1 in B,
each started by hand with torchrun's variables and MASTER_ADDR = A's veth address, in the default
environment (no GLOO_SOCKET_IFNAME). The host name resolves to 127.0.0.1 here, as on many real
machines, so a Gloo that listens on (or advertises) the host name's address cannot be reached from
the other host. Cases: DDP trains across the hosts; FSDP HYBRID_SHARD (one shard group per host)
trains; the link goes down mid-run and both ranks end within heartbeat_s, each naming the other;
a stranger who reaches the store of a job with a secret cannot steer it.

Skips, saying why, where namespaces cannot be made (not root, no `ip`, no permission).

    STRATA_BIN=build/bin/strata python3 tests/integration/test_multihost.py
"""
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import time

import strata_test as st

HEARTBEAT_S = 5
SLACK_S = 5            # the ranks end within heartbeat_s + this after the link goes down
RUN_TIMEOUT_S = 180    # a short run across the hosts
SETS = ["train.steps=24", "train.global_batch_size=16", "log.every=4", "train.threads=1",
        "distributed.timeout_s=60"]
# Variables that would steer Gloo or the rendezvous away from what this test sets.
UNSET = ["GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
         "LOCAL_RANK", "LOCAL_WORLD_SIZE", "STRATA_PLUGIN_PATH"]

STRANGER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "store_stranger.py")

_serial = itertools.count()


def _ip(*args, check=True):
    r = subprocess.run(["ip"] + list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    if check and r.returncode != 0:
        st.fail("`ip %s` exited %d: %s" % (" ".join(args), r.returncode, r.stderr.strip()))
    return r


class TwoHosts:
    """Namespaces A and B joined by a veth pair (10.201.N.1/24 in A, .2/24 in B), loopback up in
    both; unique names per run; deleted on exit, with every rank started in them."""

    def __init__(self):
        if os.geteuid() != 0:
            raise st.Skip("network namespaces need root (euid %d)" % os.geteuid())
        if shutil.which("ip") is None:
            raise st.Skip("`ip` (iproute2) is not installed")
        n = next(_serial)
        tag = "st%d%d" % (os.getpid() % 100000, n)  # interface names: at most 15 characters
        self.ns = ["strata-%s-a" % tag, "strata-%s-b" % tag]
        self.veth = [tag + "a", tag + "b"]
        subnet = "10.201.%d" % (random.randint(0, 250))
        self.addr = [subnet + ".1", subnet + ".2"]
        self.ranks = []

    def __enter__(self):
        r = _ip("netns", "add", self.ns[0], check=False)
        if r.returncode != 0:
            raise st.Skip("cannot create a network namespace (`ip netns add`: %s)" % r.stderr.strip())
        try:
            _ip("netns", "add", self.ns[1])
            _ip("link", "add", self.veth[0], "type", "veth", "peer", "name", self.veth[1])
            for ns, veth, addr in zip(self.ns, self.veth, self.addr):
                _ip("link", "set", veth, "netns", ns)
                _ip("-n", ns, "addr", "add", addr + "/24", "dev", veth)
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "link", "set", veth, "up")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for rank in self.ranks:
            rank.kill()
        _ip("link", "del", self.veth[0], check=False)  # still here if moving it failed
        for ns in self.ns:
            _ip("netns", "del", ns, check=False)
        return False

    def start_rank(self, rank, out, *sets, secret=None):
        """`ip netns exec NS env RANK=.. ... strata run GOOD_SYNTHETIC --out OUT --set ...`, with
        STRATA_JOB_SECRET in its environment when `secret` is given."""
        port = getattr(self, "port", None) or random.randint(20000, 39999)
        self.port = port  # nothing else listens inside these namespaces
        variables = ["RANK=%d" % rank, "WORLD_SIZE=2", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1",
                     "MASTER_ADDR=" + self.addr[0], "MASTER_PORT=%d" % port]
        args = (["ip", "netns", "exec", self.ns[rank], "env"] + variables
                + [st.strata_bin(), "run", st.GOOD_SYNTHETIC, "--out", out] + st.set_args(*SETS, *sets))
        env, _ = st._clean_env()
        for key in UNSET + ["STRATA_JOB_SECRET", "STRATA_JOB_SECRET_FILE"]:
            env.pop(key, None)
        if secret is not None:
            env["STRATA_JOB_SECRET"] = secret  # not on the command line, which every user can read
        r = st.Watched(rank, args, env)
        self.ranks.append(r)
        return r


def finish_both(ranks, timeout, since="they started"):
    """Waits for both ranks; fails naming the ones still running after `timeout` s."""
    deadline = time.monotonic() + timeout
    for r in ranks:
        r.wait(max(0.1, deadline - time.monotonic()))
    running = [r for r in ranks if r.proc.poll() is None]
    if running:
        st.fail("rank(s) %s still running %d s after %s:\n%s"
                % ([r.label for r in running], timeout, since, "\n".join(r.result().describe() for r in ranks)))


def train_across(label, *sets):
    out = st.temp_dir(label)
    with TwoHosts() as hosts:
        ranks = [hosts.start_rank(0, out, *sets), hosts.start_rank(1, out, *sets)]
        finish_both(ranks, RUN_TIMEOUT_S)
        for r in ranks:
            st.expect_exit(r.result(), 0)
            st.expect_no_crash(r.result())
    summary = st.load_summary(out)
    st.check(summary.get("status") == "ok", "status %r, expected ok" % summary.get("status"), ranks[0].result())
    st.check(summary.get("world_size") == 2, "world_size %r, expected 2" % summary.get("world_size"))
    st.check(summary.get("backend") == "gloo", "backend %r, expected gloo" % summary.get("backend"))
    return summary, ranks


def ddp_trains_across_hosts():
    summary, ranks = train_across("ddp", "strategy.name=ddp")
    st.check(summary.get("strategy") == "ddp", "strategy %r" % summary.get("strategy"))
    # Started without a secret, across hosts: rank 0 says once that strangers could steer the job.
    st.expect_in("STRATA_JOB_SECRET", ranks[0].result().stderr, ranks[0].result(), "rank 0's stderr")
    st.expect_not_in("STRATA_JOB_SECRET", ranks[1].result().stderr, ranks[1].result(), "rank 1's stderr")


def fsdp_hybrid_shard_across_hosts():
    """HYBRID_SHARD with one rank per host: each host is a shard group of one, the two replicas
    all-reduce their gradients across the link."""
    summary, _ = train_across("fsdp_hybrid", "strategy.name=fsdp", "strategy.sharding_strategy=HYBRID_SHARD")
    st.check(summary.get("strategy") == "fsdp", "strategy %r" % summary.get("strategy"))


def stranger_cannot_steer_the_job():
    """Both ranks get one STRATA_JOB_SECRET, as a user hands it to every host. Rank 0's store
    listens on A's veth address only, where the ranks connect, not on every interface. While the
    ranks train, a stranger in B (tests/integration/store_stranger.py) reaches the store, reads
    every key and value, writes a verdict of its own into the monitor's abort key and the failure
    records, another run directory, and a non-number into every key it listed: it finds no trace of
    the secret, and the job trains on and ends ok, its summary without a word of the stranger's."""
    secret = os.urandom(16).hex()
    out = st.temp_dir("stranger")
    sets = ["strategy.name=ddp", "train.steps=6000", "log.every=1000", "distributed.heartbeat_s=5"]
    with TwoHosts() as hosts:
        hosts.port = random.randint(20000, 39999)
        # Started first, so that it strikes as soon as told (loading torch takes seconds).
        stranger = subprocess.Popen(["ip", "netns", "exec", hosts.ns[1], sys.executable, STRANGER, hosts.addr[0],
                                     str(hosts.port), "--on-line"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=st._clean_env()[0])
        ranks = [hosts.start_rank(0, out, *sets, secret=secret), hosts.start_rank(1, out, *sets, secret=secret)]
        if not ranks[0].wait_for_line(r"\bstep +\d+/", 120):
            stranger.kill()
            st.fail("rank 0 printed no step line within 120 s:\n%s" % "\n".join(r.result().describe() for r in ranks))
        listening = _ip("netns", "exec", hosts.ns[0], "ss", "-ltnH").stdout
        mine = [line.split()[3] for line in listening.splitlines() if line.split()[3].endswith(":%d" % hosts.port)]
        print("  the store listens on %s" % mine)
        st.check(mine == ["%s:%d" % (hosts.addr[0], hosts.port)], "rank 0's store listens on %s, expected %s:%d only"
                 % (mine, hosts.addr[0], hosts.port))
        try:
            said, complaint = stranger.communicate("go\n", timeout=60)
        except subprocess.TimeoutExpired:
            stranger.kill()
            said, complaint = stranger.communicate()
        struck_at = time.monotonic()
        st.check(stranger.returncode == 0, "the stranger could not reach the store: %s" % complaint[-3000:])
        seen = json.loads(said.strip().splitlines()[-1])
        print("  the stranger read %d keys and wrote %d" % (len(seen["keys"]), len(seen["written"])))
        st.check(secret.encode().hex() not in "".join(seen["values"].values()) and secret not in str(seen["keys"]),
                 "the store shows the job's secret to a stranger")
        finish_both(ranks, RUN_TIMEOUT_S)
        # Each rank read the store's keys again (a beat a second) after the stranger wrote them.
        trained_on = min(r.ended_at for r in ranks) - struck_at
        print("  the job trained on %.1f s after the stranger wrote" % trained_on)
        st.check(trained_on >= 2, "the job ended %.1f s after the stranger wrote: give it more steps" % trained_on)
        for r in ranks:
            st.expect_exit(r.result(), 0)
            st.expect_no_crash(r.result())
            for forged in ("a stranger wrote this verdict", "a-stranger-chose-this"):
                st.expect_not_in(forged, r.result().stdout + r.result().stderr, r.result())
            st.check(secret not in r.result().stdout + r.result().stderr, "rank %d printed the secret" % r.label)
    summary = st.load_summary(out)
    st.check(summary.get("status") == "ok", "status %r, expected ok (error %r)"
             % (summary.get("status"), summary.get("error")), ranks[0].result())
    st.check(summary.get("failed_rank") is None, "failed_rank %r" % summary.get("failed_rank"))
    st.check(not os.path.exists("/tmp/a-stranger-chose-this"), "a rank wrote where the stranger said")


def read_json(path):
    import json
    st.check(os.path.isfile(path), "%s does not exist" % path)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def link_down_ends_both_ranks():
    out = st.temp_dir("link_down")
    with TwoHosts() as hosts:
        sets = ["strategy.name=ddp", "train.steps=1000000", "log.every=200", "distributed.heartbeat_s=%d" % HEARTBEAT_S]
        ranks = [hosts.start_rank(0, out, *sets), hosts.start_rank(1, out, *sets)]
        if not ranks[0].wait_for_line(r"\bstep +\d+/", 120):
            for r in ranks:
                r.kill()
            st.fail("rank 0 printed no step line within 120 s:\n%s"
                    % "\n".join(r.result().describe() for r in ranks))
        time.sleep(1)
        _ip("-n", hosts.ns[0], "link", "set", hosts.veth[0], "down")
        down_at = time.monotonic()
        bound = HEARTBEAT_S + SLACK_S
        finish_both(ranks, bound + 60, "the link went down")  # a late end fails below with the times
        results = [r.result() for r in ranks]
        for r, result in zip(ranks, results):
            took = r.ended_at - down_at
            print("  rank %d exited %s %.1f s after the link went down" % (r.label, r.proc.returncode, took))
            st.check(r.proc.returncode not in (0, None), "rank %d exited 0 after the link went down" % r.label, result)
            st.expect_no_crash(result)
            st.check(took <= bound, "rank %d ended %.1f s after the link went down; expected within heartbeat_s + %d "
                     "= %d s" % (r.label, took, SLACK_S, bound), result)
    summary = st.load_summary(out)
    st.check(summary.get("status") == "failed", "rank 0's summary.json: status %r, expected failed"
             % summary.get("status"), results[0])
    names_1 = summary.get("failed_rank") == 1 or "rank 1" in str(summary.get("error", ""))
    st.check(names_1, "rank 0's summary.json names neither failed_rank 1 nor rank 1 in its error: failed_rank %r, "
             "error %r" % (summary.get("failed_rank"), summary.get("error")), results[0])
    other = read_json(os.path.join(out, "summary_rank1.json"))
    st.check(other.get("status") == "failed", "summary_rank1.json: status %r, expected failed" % other.get("status"),
             results[1])
    error = str(other.get("error", ""))
    st.check(other.get("failed_rank") == 0 or "rank 0" in error or "store" in error,
             "summary_rank1.json names neither rank 0 nor its store: failed_rank %r, error %r"
             % (other.get("failed_rank"), error), results[1])


if __name__ == "__main__":
    only = os.environ.get("STRATA_TEST_ONLY")
    cases = [ddp_trains_across_hosts, fsdp_hybrid_shard_across_hosts, link_down_ends_both_ranks,
             stranger_cannot_steer_the_job]
    st.main([c for c in cases if not only or c.__name__ == only])
