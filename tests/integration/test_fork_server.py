#!/usr/bin/env python3
"""The test suite's fork server (core/app/fork_server.hpp) runs a command as the process it stands for.

- Through strata_fork_client, commands give the same exit code, stdout and stderr as started afresh,
  in the client's working directory, with the client's environment (a variable the server never had).
- A variable read at load (LD_PRELOAD here) starts the command afresh: the dynamic loader's own
  complaint comes twice, from the client's start and from strata's.
- The server started from a thread that ends serves on (its lifetime is its starter's pipe).
- A command killed by a signal kills its client with it; a client killed (a test's timeout) takes
  its command down.

    STRATA_BIN=build/bin/strata STRATA_FORK_CLIENT=build/tests/integration/strata_fork_client \\
      python3 tests/integration/test_fork_server.py
"""
import os
import re
import signal
import subprocess
import threading
import time

import strata_test as st


def server():
    socket = st._fork_socket()
    if socket is None:
        raise st.Skip("no fork server here (STRATA_FORK_CLIENT unset, STRATA_TEST_FORK=0, or it cannot fork: "
                      "LibTorch's CUDA library loaded)")
    return socket, st._fork_server["proc"].pid


def through_client(args, env=None, cwd=None):
    socket, _ = server()
    command = [st.strata_bin()] + [str(a) for a in args]
    return st.run_command([st._fork_server["client"], socket] + command, env=env, cwd=cwd)


def afresh(args, env=None, cwd=None):
    return st.run_command([st.strata_bin()] + [str(a) for a in args], env=env, cwd=cwd)


def served_after_its_starting_thread_ended():
    """The first command of the script, from a thread that then ends, starts the server; it serves on."""
    results = []
    starter = threading.Thread(target=lambda: results.append(st.strata("--version")))
    starter.start()
    starter.join()
    server()
    time.sleep(0.5)  # a server tied to the thread (PR_SET_PDEATHSIG) would be gone by now
    for result in results + [st.strata("--version")]:
        st.expect_exit(result, 0)
    st.check(st._fork_server["proc"].poll() is None, "the fork server ended with the thread that started it")


def same_as_afresh():
    work = st.temp_dir("cwd")
    with open(os.path.join(work, "exp.toml"), "w") as f:
        f.write(open(st.GOOD_SYNTHETIC).read())
    cases = [
        (["--version"], None),
        (["validate", "exp.toml"], None),                       # relative to the client's directory
        (["validate", "missing.toml"], None),                   # exit 2, naming it
        (["validate", "exp.toml", "--set", "train.stepz=3"], None),
        (["plugins"], {"STRATA_PLUGIN_PATH": "/nonexistent-strata-plugins"}),  # warned: the client's variable
        (["no-such-command"], None),
    ]
    def seen(result):  # the host's available memory moves between two commands
        return (result.returncode, re.sub(r"[0-9.]+ GiB of this host's available", "N GiB of this host's available",
                                          result.stdout), result.stderr)

    for args, env in cases:
        forked, fresh = through_client(args, env, work), afresh(args, env, work)
        st.check(seen(forked) == seen(fresh),
                 "strata %s through the fork server differs from a fresh start:\n%s\n%s"
                 % (" ".join(args), forked.describe(), fresh.describe()))
        print("  strata %s: exit %s, %d + %d bytes of output, as afresh" % (" ".join(args), forked.returncode,
                                                                           len(forked.stdout), len(forked.stderr)))
    st.expect_in("nonexistent-strata-plugins", through_client(["plugins"], cases[4][1], work).stderr)


def load_time_variables_start_afresh():
    result = through_client(["--version"], {"LD_PRELOAD": "/nonexistent-strata-preload.so"})
    st.expect_exit(result, 0)
    # The dynamic loader says it at each start: the client's, then strata's own (a fork would not).
    st.check(result.stderr.count("nonexistent-strata-preload.so") == 2,
             "LD_PRELOAD set: strata was not started afresh (the loader spoke %d time(s), not twice)"
             % result.stderr.count("nonexistent-strata-preload.so"), result)


def commands_of(server_pid):
    return st.child_pids(server_pid)


def wait_until(condition, what, timeout=30):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            st.fail("timed out waiting until %s" % what)
        time.sleep(0.02)


_clients = []


def long_run(label):
    """A client of a run that would take hours; killed at the end of the case whatever happens (a
    client that started the run itself would run on)."""
    socket, pid = server()
    out = st.temp_dir(label)
    client = subprocess.Popen([st._fork_server["client"], socket, st.strata_bin(), "run", st.GOOD_SYNTHETIC,
                               "--out", out, "--set", "train.steps=1000000"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              cwd=st.scratch_dir())
    _clients.append(client)
    wait_until(lambda: commands_of(pid), "the server forked the command")
    return client, pid


def signals_cross_both_ways():
    try:
        client, pid = long_run("killed_command")
        (command,) = commands_of(pid)
        os.kill(command, signal.SIGKILL)
        st.check(client.wait(timeout=30) == -signal.SIGKILL,
                 "a command killed by SIGKILL: its client ended with %s" % client.returncode)
        client, pid = long_run("killed_client")
        client.kill()
        client.wait(timeout=30)
        wait_until(lambda: not commands_of(pid), "the killed client's command was gone")
    finally:
        for client in _clients:
            if client.poll() is None:
                client.kill()
                client.wait()


if __name__ == "__main__":
    st.main([served_after_its_starting_thread_ended, same_as_afresh, load_time_variables_start_afresh, signals_cross_both_ways])
