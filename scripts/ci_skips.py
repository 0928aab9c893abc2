#!/usr/bin/env python3
"""Prints which tests of the last ctest run were skipped, and why, and its ten slowest tests (the end
of .ci/run's log).

    python3 scripts/ci_skips.py [build/Testing/Temporary/LastTest.log]

CTest's LastTest.log records a skipped test (its SKIP_RETURN_CODE, 77) as "Test Passed.", so the
tests say it themselves: each skip prints its reason as the last line before exiting 77, `SKIPPED:
...` from the integration scripts (tests/integration/strata_test.py) and `skipped: ...` from the
doctest cases (tests/gpu). A test that passed with some of its cases skipped ends with `SKIPPED
CASES (k of n): ...`; those are listed apart. Always exits 0: the tests' verdict is ctest's.
"""
import os
import re
import sys

DEFAULT_LOG = os.path.join("build", "Testing", "Temporary", "LastTest.log")
# "12/340 Test: NAME", then later "Output:", a dashed line, the output, "<end of output>", and
# after the timing lines "Test Passed." / "Test Failed." / "Test Not Run.".
TEST = re.compile(r"^\s*\d+/\d+ Test: (.*)$")
TIME = re.compile(r"^Test time =\s*([0-9.]+) sec")
STATUS = re.compile(r"^Test (Passed|Failed|Not Run)\.?")
SKIP_LINE = re.compile(r"^(SKIPPED|skipped): ")
PARTIAL_LINE = re.compile(r"^SKIPPED CASES \(")


def tests_of(path, times=None):
    """(name, output lines, status) of each test in the log, in order; `times`, a dict, gets each
    test's seconds."""
    name, output, in_output = None, [], False
    with open(path, encoding="utf-8", errors="replace") as f:
        for raw in f:
            line = raw.rstrip("\n")
            m = TEST.match(line)
            if m and not in_output:
                name, output = m.group(1), []
                continue
            if name is None:
                continue
            if line == "Output:" and not in_output and not output:
                in_output = True
                next(f, None)  # the dashed line
                continue
            if in_output:
                if line.endswith("<end of output>"):
                    if line != "<end of output>":  # output that did not end with a newline
                        output.append(line[: -len("<end of output>")])
                    in_output = False
                else:
                    output.append(line)
                continue
            t = TIME.match(line)
            if t and times is not None:
                times[name] = float(t.group(1))
            m = STATUS.match(line)
            if m:
                yield name, output, m.group(1)
                name = None


def last_line(output):
    for line in reversed(output):
        if line.strip():
            return line.strip()
    return ""


def main(argv):
    path = argv[1] if len(argv) > 1 else DEFAULT_LOG
    if not os.path.isfile(path):
        print("ci: no test log at %s (the tests did not run)" % path)
        return 0
    skipped, partial, total, times = [], [], 0, {}
    for name, output, status in tests_of(path, times):
        total += 1
        line = last_line(output)
        if status == "Passed" and SKIP_LINE.match(line):
            skipped.append((name, line))
        elif status == "Passed" and PARTIAL_LINE.match(line):
            partial.append((name, line))
    print("ci: %d of %d tests skipped%s" % (len(skipped), total, ":" if skipped else ""))
    for name, line in skipped:
        print("  %s: %s" % (name, line))
    if partial:
        print("ci: %d passed tests skipped some of their cases:" % len(partial))
        for name, line in partial:
            print("  %s: %s" % (name, line))
    slowest = sorted(times.items(), key=lambda item: -item[1])[:10]
    if slowest:
        print("ci: the %d slowest tests (%.0f s of %.0f s in all):" % (len(slowest), sum(t for _, t in slowest),
                                                                    sum(times.values())))
        for name, seconds in slowest:
            print("  %7.1f s  %s" % (seconds, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
