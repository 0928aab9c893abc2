#!/usr/bin/env python3
"""Every defective experiment in tests/fixtures/configs/bad_*.toml is refused by both
`strata validate` and `strata run` with exit code 2 and one error paragraph that names the
position of the defect, without crashing; `--set` overrides are checked the same way.

Each bad file declares its expectation on its first line:

    # expect: 7:1 unknown key

meaning stderr must contain `<file>:7:1` and the text `unknown key` (taken literally; ` ... `
separates several texts that must all appear, in any order)."""

import glob
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402

EXPECT = re.compile(r"^#\s*expect:\s*(\d+):(\d+)\s+(\S.*?)\s*$")


def expectation(path):
    with open(path, encoding="utf-8") as f:
        first = f.readline()
    m = EXPECT.match(first)
    if not m:
        st.fail("%s: the first line must be `# expect: LINE:COL text`, it is %r" % (path, first))
    return int(m.group(1)), int(m.group(2)), m.group(3)


def check_refused(result, where, text):
    st.expect_exit(result, 2)
    st.expect_no_crash(result)
    st.expect_error_paragraph(result)
    # FILE:LINE:COL followed by no further digit (7:1 must not match 7:12).
    if not re.search(re.escape(where) + r"(?!\d)", result.stderr):
        st.fail("expected stderr to name the position %s" % where, result)
    for fragment in text.split(" ... "):
        st.expect_stderr(result, fragment)
    st.check(not result.stdout.strip() or "error" not in result.stdout,
             "the error went to stdout instead of stderr", result)


def bad_config_case(path):
    def case():
        line, col, text = expectation(path)
        where = "%s:%d:%d" % (path, line, col)
        check_refused(st.strata("validate", path), where, text)
        out = os.path.join(st.temp_dir("bad"), "run")
        result = st.strata("run", path, "--out", out)
        check_refused(result, where, text)
        st.check(not os.path.exists(os.path.join(out, "summary.json")),
                 "a refused experiment left a summary.json in %s" % out, result)
    return os.path.splitext(os.path.basename(path))[0], case


def fixture_set_is_complete():
    """The defects the brief asks for each have a fixture (guards against lost files)."""
    names = {os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(st.CONFIGS, "bad_*.toml"))}
    wanted = {"bad_toml_syntax", "bad_duplicate_key", "bad_duplicate_table", "bad_unknown_section",
              "bad_unknown_key_core", "bad_unknown_key_plugin", "bad_wrong_type", "bad_steps_negative",
              "bad_lr_negative", "bad_unknown_choice", "bad_unknown_plugin", "bad_missing_model",
              "bad_missing_name", "bad_micro_batches", "bad_dataset_path", "bad_plugin_paths"}
    st.check(wanted <= names, "missing fixtures: %s" % sorted(wanted - names))
    st.check(os.path.isfile(st.GOOD_SYNTHETIC), "missing %s" % st.GOOD_SYNTHETIC)


def good_config_validates():
    result = st.strata("validate", st.GOOD_SYNTHETIC)
    st.expect_exit(result, 0)
    st.expect_stdout(result, "ok")
    st.check(not result.stderr.strip(), "validate of a good file printed on stderr", result)


# ---- --set overrides -------------------------------------------------------------------------

def set_refused(override, *fragments):
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", override)
    st.expect_exit(result, 2)
    st.expect_no_crash(result)
    st.expect_error_paragraph(result)
    for fragment in fragments:
        st.expect_stderr(result, fragment)
    return result


def set_not_an_integer():
    set_refused("train.steps=abc", "--set train.steps=abc", "expected an integer")


def set_unknown_key():
    set_refused("train.stpes=5", "--set train.stpes=5", "Did you mean 'steps'")


def set_unknown_plugin_key():
    set_refused("model.hiden=[8]", "--set model.hiden=[8]", "Did you mean 'hidden'")


def set_out_of_range():
    set_refused("optimizer.lr=-1", "--set optimizer.lr=-1", "lr must be > 0")


def set_unknown_section():
    # The section comes only from the override: the error must name the override, not a position
    # in the file (which has no [trian]).
    result = set_refused("trian.steps=5", "Did you mean 'train'")
    st.expect_stderr(result, "--set trian.steps=5")


def set_malformed():
    set_refused("train.steps", "--set train.steps", "section.key=value")
    set_refused("steps=5", "--set steps=5", "section.key")


def set_valid():
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", "train.steps=3")
    st.expect_exit(result, 0)
    st.expect_stdout(result, "3 steps")
    out = os.path.join(st.temp_dir("set"), "run")
    result = st.strata_run(st.GOOD_SYNTHETIC, out, "train.steps=3")
    summary = st.load_summary(out)
    st.check(summary["steps"] == 3, "summary steps is %r after --set train.steps=3" % summary["steps"], result)


def audit_with_sync_timing():
    """The sync audit refuses a host sync in a step; sync_timing makes one every step."""
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", "train.sync_audit=true", "--set",
                       "train.sync_timing=true")
    st.expect_exit(result, 2)
    st.expect_error_paragraph(result)
    st.expect_stderr(result, "train.sync_audit")
    st.expect_stderr(result, "sync_timing")


def deep_keys():
    """A key of 150,000 dotted parts (toml++ recursed once per part and crashed): in a table header,
    a key, an inline table, a --set key or value; arrays nested 150,000 deep: exit 2 naming the
    position and the limit, never a crash."""
    key = ".".join(["a"] * 150000)
    with open(st.GOOD_SYNTHETIC, encoding="utf-8") as f:
        base = f.read()
    line = base.count("\n") + 1  # the line appended below, in the file's last section
    cases = [("[%s]\n" % key, 2, "150000 dotted parts"),
             ("%s = 1\n" % key, 1, "150000 dotted parts"),
             ("x = [{ %s = 1 }]\n" % key, 8, "150000 dotted parts"),
             ("x = %s1%s\n" % ("[" * 150000, "]" * 150000), 0, "nested")]
    d = st.temp_dir("deep")
    for i, (text, column, fragment) in enumerate(cases):
        path = os.path.join(d, "deep%d.toml" % i)
        with open(path, "w", encoding="utf-8") as f:
            f.write(base + ("" if base.endswith("\n") else "\n") + text)
        result = st.strata("validate", path)
        check_refused(result, "%s:%d" % (path, line) + (":%d" % column if column else ""), fragment)
        if column:
            st.expect_stderr(result, "at most 64 are allowed")
        st.check(len(result.stderr) < 2000, "the error must show the key shortened", result)
    short = ".".join(["a"] * 60000)  # within the command line's limit of one argument
    result = set_refused("train.%s=1" % short, "--set train.a.a.a", "60001 dotted parts", "at most 64")
    st.check(len(result.stderr) < 2000, "the error must show the key shortened", result)
    set_refused("model.hidden={%s=1}" % short, "--set model.hidden", "dotted parts", "at most 64")


def missing_file():
    path = os.path.join(st.temp_dir("missing"), "no_such_experiment.toml")
    for command in ("validate", "run"):
        result = st.strata(command, path)
        st.expect_exit(result, 2)
        st.expect_no_crash(result)
        st.expect_error_paragraph(result)
        st.expect_stderr(result, path)


if __name__ == "__main__":
    bad_files = sorted(glob.glob(os.path.join(st.CONFIGS, "bad_*.toml")))
    st.main([fixture_set_is_complete, good_config_validates] + [bad_config_case(p) for p in bad_files]
            + [set_not_an_integer, set_unknown_key, set_unknown_plugin_key, set_out_of_range, set_unknown_section,
               set_malformed, set_valid, audit_with_sync_timing, deep_keys, missing_file])
