#!/usr/bin/env python3
"""The command line itself: help, version, usage errors and exit codes, `strata plugins` and
`strata describe`, plugins found at run time (never linked into the binary), and broken
plugin libraries on STRATA_PLUGIN_PATH or in [plugins] paths (tests/fixtures/plugins, built
into $STRATA_FIXTURE_PLUGIN_DIR)."""

import os
import re
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402

BUILTIN = {"single": "strategy", "mlp": "model", "cnn": "model", "synthetic": "dataset", "fashion_mnist": "dataset"}


def plugin_rows(result):
    """{name: (kind, library)} from the table `strata plugins` prints (library: the last column)."""
    rows = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[0] == "KIND":
            continue
        rows[parts[1]] = (parts[0], parts[-1])
    return rows


# ---- help, version, usage ---------------------------------------------------------------------

def help_exits_0():
    for args in (["--help"], ["-h"], ["run", "--help"]):
        result = st.strata(*args)
        st.expect_exit(result, 0)
        st.expect_stdout(result, "usage: strata")
        for command in ("run", "validate", "plugins", "describe"):
            st.expect_stdout(result, command)


def version_exits_0():
    result = st.strata("--version")
    st.expect_exit(result, 0)
    st.check(re.search(r"\bstrata \d+\.\d+\.\d+", result.stdout), "--version should print `strata X.Y.Z`", result)


def no_arguments_exit_2():
    result = st.strata()
    st.expect_exit(result, 2)
    st.expect_no_crash(result)
    st.expect_stderr(result, "usage: strata")


def unknown_command_exit_2():
    result = st.strata("trian")
    st.expect_clean_failure(result, 2, "trian", "usage: strata")


def unknown_flag_exit_2():
    result = st.strata("run", st.GOOD_SYNTHETIC, "--bogus")
    st.expect_clean_failure(result, 2, "--bogus")


def run_without_file_exit_2():
    for command in ("run", "validate"):
        result = st.strata(command)
        st.expect_clean_failure(result, 2, "needs an experiment file")


def option_without_value_exit_2():
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out")
    st.expect_exit(result, 2)
    st.expect_no_crash(result)
    st.expect_stderr(result, "--out")


def too_many_files_exit_2():
    result = st.strata("validate", st.GOOD_SYNTHETIC, st.GOOD_SYNTHETIC)
    st.expect_clean_failure(result, 2)


def out_is_a_file_exit_2():
    # An unusable --out is the user's input being wrong, found before any training: a usage error
    # (exit 2), not a training failure (exit 1).
    path = os.path.join(st.temp_dir("outfile"), "a_file")
    with open(path, "w") as f:
        f.write("not a directory\n")
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", path)
    st.expect_no_crash(result)
    st.expect_error_paragraph(result)
    st.expect_stderr(result, path)
    st.expect_exit(result, 2)


# ---- plugins and describe ----------------------------------------------------------------------

def plugins_lists_builtins():
    result = st.strata("plugins")
    st.expect_exit(result, 0)
    rows = plugin_rows(result)
    libraries = {}
    plugdir = os.path.realpath(st.plugins_dir())
    for name, kind in BUILTIN.items():
        st.check(name in rows, "`strata plugins` does not list %s" % name, result)
        got_kind, library = rows[name]
        st.check(got_kind == kind, "%s is listed as a %s, expected %s" % (name, got_kind, kind), result)
        st.check(os.path.isfile(library), "library %r of %s does not exist" % (library, name), result)
        st.check(os.path.dirname(os.path.realpath(library)) == plugdir,
                 "library of %s is %s, expected it in %s" % (name, library, plugdir), result)
        libraries[name] = os.path.realpath(library)
    st.check(len(set(libraries.values())) == len(libraries), "plugins should each come from their own library: %s"
             % libraries, result)


def binary_does_not_link_plugins():
    result = st.strata("plugins")
    st.expect_exit(result, 0)
    names = {os.path.basename(lib) for _, lib in plugin_rows(result).values()}
    st.check(names, "no plugin libraries listed", result)
    linked = ""
    tool = None
    for candidate in (["ldd", st.strata_bin()], ["readelf", "-d", st.strata_bin()]):
        if shutil.which(candidate[0]):
            proc = subprocess.run(candidate, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            if proc.returncode == 0:
                linked = proc.stdout.decode("utf-8", "replace")
                tool = " ".join(candidate)
                break
    if tool is None:
        raise st.Skip("neither ldd nor readelf works here")
    for name in sorted(names):
        st.check(name not in linked, "%s links %s; plugins must only be loaded at run time:\n%s" % (tool, name, linked))
    st.check("libc.so" in linked, "sanity: %s lists no libc, so its output is not what this check expects:\n%s"
             % (tool, linked))


def describe_mlp():
    result = st.strata("describe", "mlp")
    st.expect_exit(result, 0)
    st.check(re.search(r"^\s+hidden\s+.*default \[\d+(, \d+)*\]", result.stdout, re.M),
             "`strata describe mlp` should show option `hidden` with its default", result)
    st.expect_stdout(result, "libstrata_model_mlp")


def describe_core_section():
    result = st.strata("describe", "train")
    st.expect_exit(result, 0)
    for option in ("steps", "global_batch_size", "micro_batches", "seed", "lr_schedule"):
        st.check(re.search(r"^\s+%s\s" % option, result.stdout, re.M), "`describe train` lacks %s" % option, result)


def describe_unknown():
    result = st.strata("describe", "mpl")
    st.expect_clean_failure(result, 2, "Did you mean 'mlp'")


# ---- fixture plugins ---------------------------------------------------------------------------

def broken_plugin(case, *fragments):
    """A directory holding one broken library: every command that loads plugins exits 2 naming it."""
    def run():
        libs = st.fixture_libraries(case)
        env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir(case)}
        for args in (["plugins"], ["validate", st.GOOD_SYNTHETIC]):
            result = st.strata(*args, env=env)
            st.expect_clean_failure(result, 2)
            st.check(any(os.path.basename(lib) in result.stderr for lib in libs),
                     "stderr should name the library (%s)" % ", ".join(libs), result)
            for fragment in fragments:
                st.expect_stderr(result, fragment)
    return "plugin_" + case, run


def good_fixture_plugin():
    libs = st.fixture_libraries("good")
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("good")}
    result = st.strata("plugins", env=env)
    st.expect_exit(result, 0)
    rows = plugin_rows(result)
    for name in ("fixture_echo_a", "fixture_echo_b"):
        st.check(name in rows, "`strata plugins` does not list %s" % name, result)
        st.check(rows[name][0] == "strategy", "%s should be a strategy" % name, result)
        st.check(os.path.realpath(rows[name][1]) in [os.path.realpath(l) for l in libs],
                 "%s should come from %s" % (name, libs), result)
    for name in BUILTIN:
        st.check(name in rows, "the built-in %s disappeared when STRATA_PLUGIN_PATH was set" % name, result)
    result = st.strata("describe", "fixture_echo_b", env=env)
    st.expect_exit(result, 0)
    st.check(re.search(r"^\s+answer\s+.*default 42", result.stdout, re.M), "describe should show answer = 42", result)
    # Without the variable the fixture names are unknown again.
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", "strategy.name=fixture_echo_a")
    st.expect_exit(result, 2)
    st.expect_stderr(result, "unknown strategy 'fixture_echo_a'")
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", "strategy.name=fixture_echo_a", env=env)
    st.expect_exit(result, 0)


def good_fixture_through_plugins_paths():
    good = st.fixture_plugin_dir("good")
    st.fixture_libraries("good")
    work = st.temp_dir("paths")
    with open(st.GOOD_SYNTHETIC, encoding="utf-8") as f:
        text = f.read()
    text = text.replace('name = "single"', 'name = "fixture_echo_b"\nanswer = 7')
    # A path relative to the experiment file, as DESIGN section 6 promises.
    os.symlink(good, os.path.join(work, "my_plugins"))
    config = os.path.join(work, "experiment.toml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(text + '\n[plugins]\npaths = ["my_plugins"]\n')
    result = st.strata("validate", config)
    st.expect_exit(result, 0)
    st.expect_stdout(result, "fixture_echo_b")
    result = st.strata("validate", config, "--set", "strategy.answer=-1")
    st.expect_exit(result, 2)
    st.expect_stderr(result, "--set strategy.answer=-1")


def throwing_factory():
    st.fixture_libraries("throwing_factory")
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("throwing_factory")}
    result = st.strata("plugins", env=env)
    st.expect_exit(result, 0)
    st.check("fixture_throwing" in plugin_rows(result), "fixture_throwing is not listed", result)
    for args in (["validate", st.GOOD_SYNTHETIC], ["run", st.GOOD_SYNTHETIC, "--out", st.temp_dir("throwing")]):
        result = st.strata(*(args + ["--set", "strategy.name=fixture_throwing"]), env=env)
        st.expect_clean_failure(result, 2, "fixture factory failure", "fixture_throwing")


def nonexistent_plugin_path_is_ignored():
    # Like PATH: a directory on STRATA_PLUGIN_PATH that does not exist is skipped.
    env = {"STRATA_PLUGIN_PATH": os.path.join(st.temp_dir("nopath"), "does_not_exist")}
    result = st.strata("validate", st.GOOD_SYNTHETIC, env=env)
    st.expect_exit(result, 0)


if __name__ == "__main__":
    st.main([
        help_exits_0, version_exits_0, no_arguments_exit_2, unknown_command_exit_2, unknown_flag_exit_2,
        run_without_file_exit_2, option_without_value_exit_2, too_many_files_exit_2, out_is_a_file_exit_2,
        plugins_lists_builtins, binary_does_not_link_plugins, describe_mlp, describe_core_section, describe_unknown,
        broken_plugin("missing_symbol", "not a Strata plugin"),
        broken_plugin("abi_mismatch", "ABI"),
        broken_plugin("duplicate", "'single'"),
        broken_plugin("register_throws", "fixture register failure"),
        broken_plugin("torch_mismatch", "LibTorch"),
        broken_plugin("undefined_symbol", "strata_fixture_function_that_does_not_exist"),
        broken_plugin("wrong_names", "fixture_declared"),
        good_fixture_plugin, good_fixture_through_plugins_paths, throwing_factory,
        nonexistent_plugin_path_is_ignored,
    ])
