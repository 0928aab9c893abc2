"""Shared helpers of Strata's end-to-end tests (standard library only).

Each test script is a list of cases run by `main(cases)`: every case runs even when an earlier
one failed, prints PASS, FAIL (with the command, its exit code, stdout and stderr) or SKIP (with
the reason). The exit code tells CTest what happened (each test has SKIP_RETURN_CODE 77):
  1   a case failed, or there were no cases at all (a test that runs nothing does not pass);
  77  nothing failed and nothing passed but something skipped: CTest reports the test Skipped, and the
      last line, `SKIPPED: reason [cases]; ...`, says why (scripts/ci_skips.py lists these lines);
  0   nothing failed and something passed. CTest has no partial skip, so a test where some cases
      passed and others skipped is Passed, and its last line, `SKIPPED CASES (k of n): reason
      [cases]; ...`, names the ones that did not run.
A script that cannot run at all (no GPU) calls skip_all(reason): the same `SKIPPED:` line, exit 77.

Environment:
  STRATA_BIN                 the `strata` executable (set by CTest); falls back to
                             build/bin/strata of this checkout, with a note
  STRATA_FIXTURE_PLUGIN_DIR  directory of the fixture plugins (tests/fixtures/plugins, built)
  STRATA_TEST_KEEP=1         keep the temporary directories (they are kept anyway on failure)
  TMPDIR                     where temporary directories go (never inside the repository)
"""

import atexit
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

DEFAULT_TIMEOUT = 300  # seconds; no command of a test may hang longer than this
SKIP_EXIT_CODE = 77     # CTest's SKIP_RETURN_CODE of every integration test

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(TESTS_DIR))
CONFIGS = os.path.join(REPO, "tests", "fixtures", "configs")
GOOD_SYNTHETIC = os.path.join(CONFIGS, "good_synthetic.toml")
QUICKSTART = os.path.join(REPO, "experiments", "quickstart.toml")
READ_EVENTS = os.path.join(TESTS_DIR, "read_events.py")
TRACE_OVERLAP = os.path.join(REPO, "bench", "trace_overlap.py")

# Keys of summary.json that docs/user-guide.md promises (dotted paths into nested objects).
SUMMARY_KEYS = [
    "experiment", "strategy", "model", "dataset", "world_size", "backend", "device",
    "steps", "global_batch_size", "train_time_s", "step_time_s", "samples_per_s",
    "final_loss", "eval.loss", "eval.accuracy", "param_norm",
    "memory.model_state_bytes.params", "memory.model_state_bytes.grads",
    "memory.model_state_bytes.optimizer", "memory.peak_bytes",
    "comm.payload_bytes_per_step", "comm.bus_bytes_per_step", "comm.calls_per_step", "comm.time_s",
]

# Signs that the process crashed instead of reporting an error.
CRASH_MARKERS = ["terminate called", "Exception raised from", "Segmentation", "core dumped",
                 "Aborted", "AddressSanitizer", "Traceback (most recent call last)"]


class TestFailure(AssertionError):
    """A failed check; the message says what was expected and what happened."""


class Skip(Exception):
    """The case cannot run here (a missing optional tool or data); the reason is printed."""


# ---- the binary and its runs -----------------------------------------------------------------

_bin_note_printed = False


def strata_bin():
    """Path of the `strata` executable: $STRATA_BIN, else build/bin/strata of this checkout."""
    global _bin_note_printed
    path = os.environ.get("STRATA_BIN")
    if not path:
        path = os.path.join(REPO, "build", "bin", "strata")
        if not _bin_note_printed:
            print("note: STRATA_BIN is not set; using %s" % path)
            _bin_note_printed = True
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise TestFailure("the strata executable %s does not exist or is not executable; set STRATA_BIN "
                          "(CTest does) or build the `strata` target" % path)
    return os.path.abspath(path)


def plugins_dir():
    """The plugin directory next to the binary (build/plugins for build/bin/strata)."""
    return os.path.normpath(os.path.join(os.path.dirname(strata_bin()), "..", "plugins"))


def fixture_plugin_dir(case=None):
    """$STRATA_FIXTURE_PLUGIN_DIR (or one case directory below it); Skip when unset or missing."""
    base = os.environ.get("STRATA_FIXTURE_PLUGIN_DIR")
    if not base:
        raise Skip("STRATA_FIXTURE_PLUGIN_DIR is not set (CTest sets it to the built fixture plugins)")
    path = os.path.join(base, case) if case else base
    if not os.path.isdir(path):
        raise Skip("fixture plugin directory %s does not exist (build the strata_fixture_plugins target)" % path)
    return path


def fixture_libraries(case):
    """The shared libraries of one fixture case directory; Skip when it holds none (not built)."""
    path = fixture_plugin_dir(case)
    libs = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".so"))
    if not libs:
        raise Skip("fixture plugin directory %s holds no .so (build the strata_fixture_plugins target)" % path)
    return libs


class Result:
    """What a command did: args, returncode, stdout, stderr, seconds."""

    def __init__(self, args, returncode, stdout, stderr, seconds, env_note=""):
        self.args = args
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.seconds = seconds
        self.env_note = env_note

    def command(self):
        return (self.env_note + " " if self.env_note else "") + " ".join(shlex.quote(a) for a in self.args)

    def describe(self, limit=6000):
        def clip(text):
            if len(text) <= limit:
                return text
            return "[... %d characters left out ...]\n" % (len(text) - limit) + text[-limit:]

        return ("  command:   %s\n  exit code: %s (after %.1f s)\n  --- stdout ---\n%s\n  --- stderr ---\n%s\n  ---"
                % (self.command(), self.returncode, self.seconds, clip(self.stdout).rstrip(),
                   clip(self.stderr).rstrip()))


def _clean_env(extra=None):
    env = dict(os.environ)
    # The tests choose the plugin search path themselves; a developer's setting must not leak in.
    env.pop("STRATA_PLUGIN_PATH", None)
    env.setdefault("PYTHONUNBUFFERED", "1")
    notes = []
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
            notes.append("%s=%s" % (key, shlex.quote(value)))
    return env, " ".join(notes)


def run_command(args, env=None, timeout=DEFAULT_TIMEOUT, cwd=None):
    """Runs args (a list), captures output, never hangs: a timeout is a TestFailure."""
    full_env, note = _clean_env(env)
    start = time.monotonic()
    try:
        proc = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=full_env, cwd=cwd or scratch_dir(), timeout=timeout)
    except subprocess.TimeoutExpired as e:
        partial = Result(args, "killed (timeout)", _text(e.stdout), _text(e.stderr), time.monotonic() - start, note)
        raise TestFailure("the command did not finish within %s s:\n%s" % (timeout, partial.describe()))
    return Result(args, proc.returncode, _text(proc.stdout), _text(proc.stderr), time.monotonic() - start, note)


def _text(data):
    if data is None:
        return ""
    if isinstance(data, bytes):
        return data.decode("utf-8", errors="replace")
    return data


def strata(*args, env=None, timeout=DEFAULT_TIMEOUT, cwd=None):
    """Runs `strata ARGS...` (arguments are converted to strings), through this script's fork server
    where there is one (_fork_socket)."""
    command = [strata_bin()] + [str(a) for a in args]
    socket = _fork_socket()
    if socket is None:
        return run_command(command, env=env, timeout=timeout, cwd=cwd)
    result = run_command([_fork_server["client"], socket] + command, env=env, timeout=timeout, cwd=cwd)
    result.args = command  # what ran, as a failure shows it
    return result


# The fork server (core/app/fork_server.hpp): one strata process per script, loaded once, that runs
# each command in a fork of itself; strata_fork_client (STRATA_FORK_CLIENT, set by CTest) hands it
# the command with this process's descriptors, directory and environment, and exits with its status.
# A command whose start-up variables differ from the server's (OMP_*, LD_*, CUDA_*, ...) is started
# afresh by the client. STRATA_TEST_FORK=0 starts every command afresh.
_fork_server = {}
_fork_lock = threading.Lock()  # scripts call strata() from several threads


def _fork_socket():
    """This script's fork server's socket (started on first use), or None where there is none."""
    with _fork_lock:
        if "socket" not in _fork_server and "off" not in _fork_server:
            _start_fork_server()
        return _fork_server.get("socket")


def _start_fork_server():
    client = os.environ.get("STRATA_FORK_CLIENT")
    if not client or os.environ.get("STRATA_TEST_FORK") == "0" or not os.access(client, os.X_OK):
        _fork_server["off"] = "no client"
        return
    directory = tempfile.mkdtemp(prefix="strata-fork-")  # mode 0700: nobody else reaches the socket
    path = os.path.join(directory, "socket")
    env, _ = _clean_env({"STRATA_FORK_SERVER": path})
    with open(os.path.join(directory, "server.log"), "wb") as log:
        # Its stdin is this process's pipe: the server ends at its end of file, when this process
        # ends, however it ends (a thread that started it may end long before).
        proc = subprocess.Popen([strata_bin()], stdin=subprocess.PIPE, stdout=log, stderr=log, env=env,
                                cwd=directory)
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    if not os.path.exists(path):
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        with open(os.path.join(directory, "server.log"), "rb") as f:
            why = _text(f.read()).strip() or "it did not start"
        print("note: no fork server (%s); every command starts afresh" % why)
        shutil.rmtree(directory, ignore_errors=True)
        _fork_server["off"] = "failed"
        return
    _fork_server.update(socket=path, proc=proc, directory=directory, client=os.path.abspath(client))
    atexit.register(_stop_fork_server)


def _stop_fork_server():
    proc = _fork_server.get("proc")
    if proc is not None and proc.poll() is None:
        proc.stdin.close()  # its end of file: it stops serving
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    shutil.rmtree(_fork_server.get("directory", ""), ignore_errors=True)


def strata_run(config, out, *sets, env=None, timeout=DEFAULT_TIMEOUT, expect=0):
    """`strata run CONFIG --out OUT --set S...`; checks the exit code (None: no check)."""
    args = ["run", config, "--out", out]
    for s in sets:
        args += ["--set", s]
    result = strata(*args, env=env, timeout=timeout)
    if expect is not None:
        expect_exit(result, expect)
        expect_no_crash(result)
    return result


# ---- checks -----------------------------------------------------------------------------------

class Watched:
    """A started process whose stdout and stderr are read as they come, by threads (with the time of
    each line; a chatty process never blocks on a full pipe), in a session of its own. `label`
    names it in messages (a rank number, "launcher"); `env_note` is shown with its command."""

    def __init__(self, label, args, env, env_note=""):
        self.label = label
        self.args = args
        self.env_note = env_note
        self.start = time.monotonic()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, cwd=scratch_dir(),
                                     start_new_session=True)
        self.lines = {"stdout": [], "stderr": []}
        self.ended_at = None
        self.readers = [threading.Thread(target=self._read, args=(name, stream), daemon=True)
                        for name, stream in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr))]
        for t in self.readers:
            t.start()
        threading.Thread(target=self._reap, daemon=True).start()

    def _reap(self):
        self.proc.wait()
        self.ended_at = time.monotonic()  # when it ended, whoever waits for it later

    def _read(self, name, stream):
        for raw in iter(stream.readline, b""):
            self.lines[name].append((time.monotonic(), raw.decode("utf-8", errors="replace")))

    def text(self, name):
        return "".join(line for _, line in list(self.lines[name]))

    def wait_for_line(self, pattern, timeout):
        """Waits until stdout or stderr has a line matching `pattern`; False if the process ended
        or `timeout` passed first."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            for name in ("stdout", "stderr"):
                if any(regex.search(line) for _, line in list(self.lines[name])):
                    return True
            if self.proc.poll() is not None or time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def wait(self, timeout):
        """The exit code, or None when it still runs after `timeout` s."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        while self.ended_at is None:
            time.sleep(0.01)
        for t in self.readers:
            t.join(timeout=5)
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def result(self):
        code = self.proc.poll()
        return Result(self.args, "still running" if code is None else code, self.text("stdout"),
                      self.text("stderr"), (self.ended_at or time.monotonic()) - self.start, self.env_note)


def fail(message, result=None):
    raise TestFailure(message + ("\n" + result.describe() if result is not None else ""))


def check(condition, message, result=None):
    if not condition:
        fail(message, result)


def expect_exit(result, code):
    if result.returncode != code:
        fail("expected exit code %s, got %s" % (code, result.returncode), result)


def expect_in(fragment, text, result=None, what="output"):
    if fragment not in text:
        fail("expected %s to contain %r" % (what, fragment), result)


def expect_not_in(fragment, text, result=None, what="output"):
    if fragment in text:
        fail("expected %s not to contain %r" % (what, fragment), result)


def expect_stderr(result, fragment):
    expect_in(fragment, result.stderr, result, "stderr")


def expect_stdout(result, fragment):
    expect_in(fragment, result.stdout, result, "stdout")


def expect_no_crash(result):
    """The process ended by itself (no signal) and printed no crash marker."""
    if isinstance(result.returncode, int) and result.returncode < 0:
        fail("the process was killed by signal %d (a crash)" % -result.returncode, result)
    if result.returncode in (134, 139):  # 128 + SIGABRT / SIGSEGV through a shell
        fail("exit code %d looks like a crash" % result.returncode, result)
    for marker in CRASH_MARKERS:
        for stream, text in (("stderr", result.stderr), ("stdout", result.stdout)):
            if marker in text:
                fail("%s contains the crash marker %r" % (stream, marker), result)


def expect_error_paragraph(result):
    """stderr has an `error: ...` line and a `  fix: ...` line (the CLI's error paragraph)."""
    if not re.search(r"^error: \S", result.stderr, re.M):
        fail("expected an `error: ...` line on stderr", result)
    if not re.search(r"^  fix: \S", result.stderr, re.M):
        fail("expected a `  fix: ...` line on stderr", result)


def expect_clean_failure(result, code, *fragments):
    """Exit `code`, no crash, one error paragraph with a fix, and each fragment in stderr."""
    expect_exit(result, code)
    expect_no_crash(result)
    expect_error_paragraph(result)
    for fragment in fragments:
        expect_stderr(result, fragment)


def close(a, b, rel=0.0, abs_tol=0.0):
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_tol)


def expect_close(actual, expected, what, rel=0.0, abs_tol=0.0):
    if not isinstance(actual, (int, float)) or not close(actual, expected, rel, abs_tol):
        fail("%s: expected %r (rel tol %g, abs tol %g), got %r" % (what, expected, rel, abs_tol, actual))


# ---- temporary directories ---------------------------------------------------------------------

_root = None
_scratch = None
_keep = os.environ.get("STRATA_TEST_KEEP") == "1"


def _inside_repo(path):
    real, repo = os.path.realpath(path), os.path.realpath(REPO)
    return real == repo or real.startswith(repo + os.sep)


def temp_root():
    """This script's own directory under $TMPDIR (unique per process, so ctest -j is safe)."""
    global _root
    if _root is None:
        script = os.path.splitext(os.path.basename(sys.argv[0]))[0] or "test"
        _root = tempfile.mkdtemp(prefix="strata-%s-" % script)
        if _inside_repo(_root):
            raise TestFailure("TMPDIR points into the repository (%s); the tests must not write there" % _root)
    return _root


def temp_dir(label="run"):
    """A fresh, unique directory below temp_root() (never inside the repository)."""
    return tempfile.mkdtemp(prefix=label + "-", dir=temp_root())


def scratch_dir():
    """Working directory of the commands, so that a stray relative output lands in a temp dir."""
    global _scratch
    if _scratch is None:
        _scratch = temp_dir("cwd")
    return _scratch


def _cleanup(keep):
    if _root is None:
        return
    if keep:
        print("kept: %s" % _root)
    else:
        shutil.rmtree(_root, ignore_errors=True)


# ---- run outputs ------------------------------------------------------------------------------

def _reject_constant(name):
    raise ValueError("non-standard JSON constant %s" % name)


def load_summary(run_dir):
    """summary.json of a run, parsed strictly (NaN and Infinity are not JSON)."""
    path = os.path.join(run_dir, "summary.json")
    check(os.path.isfile(path), "%s does not exist" % path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as e:
        fail("%s is not valid JSON (%s):\n%s" % (path, e, text[:4000]))


def trace_overlap(*traces):
    """bench/trace_overlap.py's rows for these traces ([train] trace_steps), and its run."""
    out = os.path.join(temp_dir("overlap"), "rows.json")
    result = run_command([sys.executable, TRACE_OVERLAP, *traces, "--json", out])
    expect_exit(result, 0)
    with open(out, encoding="utf-8") as f:
        return json.load(f), result


def lookup(obj, dotted):
    """obj['a']['b'] for 'a.b'; raises KeyError naming the missing part."""
    value = obj
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def missing_keys(summary, keys=SUMMARY_KEYS):
    out = []
    for key in keys:
        try:
            lookup(summary, key)
        except KeyError:
            out.append(key)
    return out


def tensorboard_available():
    try:
        import importlib.util
        return importlib.util.find_spec("tensorboard") is not None
    except (ImportError, ValueError):
        return False


def read_events(run_dir):
    """The run's TensorBoard events as read_events.py prints them; Skip without tensorboard."""
    if not tensorboard_available():
        raise Skip("tensorboard not installed (in %s)" % sys.executable)
    result = run_command([sys.executable, READ_EVENTS, run_dir], timeout=DEFAULT_TIMEOUT)
    if result.returncode != 0:
        fail("TensorBoard's reader could not read the events of %s" % run_dir, result)
    try:
        return json.loads(result.stdout)
    except ValueError as e:
        fail("read_events.py printed no JSON (%s)" % e, result)


def fashion_mnist_available():
    """Whether the default Fashion-MNIST directory exists (what quickstart.toml uses)."""
    path = os.environ.get("STRATA_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    return os.path.isdir(path), path


def require_fashion_mnist():
    ok, path = fashion_mnist_available()
    if not ok:
        raise Skip("Fashion-MNIST is not installed at %s (apt-get install dataset-fashion-mnist, or set "
                   "STRATA_FASHION_MNIST_DIR)" % path)
    return path


def load_model(run_dir):
    """final_model.pt of a run (save_final), read by PyTorch: {name: float64 tensor}. Skip without torch."""
    try:
        import torch
    except ImportError:
        raise Skip("torch is not installed in %s (it reads saved models)" % sys.executable)
    path = os.path.join(run_dir, "final_model.pt")
    check(os.path.isfile(path), "%s does not exist (run with train.save_final=true)" % path)
    return {k: v.double() for k, v in torch.load(path, weights_only=False).items()}


def model_difference(reference, candidate):
    """The largest, over tensors, of max|a - b| / max|a| between two runs' saved models; the worst
    tensor's name. Different names or shapes fail."""
    a, b = load_model(reference), load_model(candidate)
    check(sorted(a) == sorted(b), "the saved models hold different tensors: %s against %s" % (sorted(a), sorted(b)))
    worst, where = 0.0, None
    for name in a:
        check(a[name].shape == b[name].shape, "%s: shape %s against %s" % (name, tuple(a[name].shape),
                                                                        tuple(b[name].shape)))
        scale = float(a[name].abs().max()) or 1e-30
        diff = float((a[name] - b[name]).abs().max()) / scale
        if diff >= worst:
            worst, where = diff, name
    return worst, where


def expect_models_equal(reference, candidate, what, rel=1e-5):
    """Every tensor of candidate's final model within `rel` (relative to the tensor's largest
    magnitude) of reference's."""
    diff, name = model_difference(reference, candidate)
    check(diff <= rel, "%s: final model differs from the reference by %.3g (relative) in %s; allowed %g"
          % (what, diff, name, rel))
    return diff


# ---- processes of multi-rank jobs ---------------------------------------------------------------

def set_args(*items):
    """["--set", a, "--set", b, ...]"""
    return sum((["--set", s] for s in items), [])


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_pids(pid):
    """Direct children of `pid` (the ranks a launcher started)."""
    try:
        out = subprocess.run(["pgrep", "-P", str(pid)], stdout=subprocess.PIPE, text=True).stdout
    except FileNotFoundError:
        fail("pgrep is needed by this test (procps)")
    return [int(x) for x in out.split()]


def rank_of_process(pid):
    """The rank process `pid` is, by its name ("strata rank R" in /proc/PID/comm: a rank that strata's
    launcher forked keeps the launcher's /proc/PID/environ); -1 when gone or not (yet) a named rank."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            name = f.read().strip()
    except OSError:
        return -1
    m = re.fullmatch(r"strata (?:rank |r)(\d+)", name)
    return int(m.group(1)) if m else -1


def alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


# ---- the driver -------------------------------------------------------------------------------

def skip_all(reason):
    """Skips the whole script: prints `SKIPPED: reason` and exits 77 (CTest: Skipped)."""
    print("SKIPPED: %s" % " ".join(reason.split()))
    sys.stdout.flush()
    sys.exit(SKIP_EXIT_CODE)


def _skip_line(skipped):
    """`reason [case, case]; reason [case]` for (name, reason) pairs, grouped by reason in order."""
    by_reason = {}
    for name, reason in skipped:
        by_reason.setdefault(" ".join(reason.split()), []).append(name)  # one line, for ci_skips.py
    return "; ".join("%s [%s]" % (reason, ", ".join(names)) for reason, names in by_reason.items())


def main(cases):
    """Runs every case (a list of functions, or (name, function) pairs) and exits: 1 if any failed
    or there were none, 77 if all skipped, else 0 (see the module comment)."""
    title = os.path.basename(sys.argv[0])
    failed, skipped, passed = [], [], []
    start = time.monotonic()
    if not cases:
        print("FAIL %s: no cases to run" % title)
        sys.exit(1)
    try:
        binary = strata_bin()
    except TestFailure as e:
        print("FAIL %s: %s" % (title, e))
        sys.exit(1)
    print("%s: strata = %s, python = %s" % (title, binary, sys.executable))
    sys.stdout.flush()
    for case in cases:
        name, func = case if isinstance(case, tuple) else (case.__name__, case)
        t0 = time.monotonic()
        try:
            func()
        except Skip as e:
            skipped.append((name, str(e)))
            print("SKIP: %s (%s)" % (e, name))
        except TestFailure as e:
            failed.append(name)
            print("FAIL %s (%.1f s):\n%s" % (name, time.monotonic() - t0, e))
        except Exception:  # a bug in the test itself: report it, and go on
            failed.append(name)
            print("FAIL %s (%.1f s): unexpected exception in the test:\n%s"
                  % (name, time.monotonic() - t0, traceback.format_exc()))
        else:
            passed.append(name)
            print("PASS %s (%.1f s)" % (name, time.monotonic() - t0))
        sys.stdout.flush()
    _cleanup(_keep or bool(failed))
    print("%s: %d passed, %d failed, %d skipped in %.1f s%s"
          % (title, len(passed), len(failed), len(skipped), time.monotonic() - start,
             ("; failed: " + ", ".join(failed)) if failed else ""))
    if failed:
        sys.exit(1)
    if skipped and not passed:
        print("SKIPPED: %s" % _skip_line(skipped))
        sys.exit(SKIP_EXIT_CODE)
    if skipped:
        print("SKIPPED CASES (%d of %d): %s" % (len(skipped), len(cases), _skip_line(skipped)))
    sys.exit(0)
