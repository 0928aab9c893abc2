#!/usr/bin/env python3
"""The plugin search path degrades gracefully: a library that does not load (not a shared library,
not a Strata plugin, a broken one, one cut short) is reported by one warning naming it and stops
only the commands that need it; `strata plugins` lists it with the reason; an experiment naming a plugin
that only a broken library would provide fails naming that library; a library that crashes while
it loads is named before strata exits 2; a STRATA_PLUGIN_PATH entry that does not exist is a
warning, a [plugins] paths entry that does not exist an error."""

import os
import re
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402


def junk_library_dir():
    """A directory holding libx.so: random bytes, not a shared library."""
    d = st.temp_dir("junk")
    path = os.path.join(d, "libx.so")
    with open(path, "wb") as f:
        f.write(os.urandom(4096))
    return d, os.path.realpath(path)  # strata names libraries by their canonical path


def warnings_about(result, path):
    """The warning lines of stderr that name `path`."""
    return [l for l in result.stderr.splitlines() if l.startswith(("warning:", "[rank")) and path in l]


def plugins_sections(result):
    """(the table of `strata plugins`, the lines after it) split at the first blank line."""
    table, _, rest = result.stdout.partition("\n\n")
    return table, rest


def compile_c_library(name, source):
    """A shared library built from C `source` with the system's cc; Skip without one."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise st.Skip("no C compiler (cc) to build the crashing library")
    d = st.temp_dir(name)
    src = os.path.join(d, name + ".c")
    with open(src, "w", encoding="utf-8") as f:
        f.write(source)
    lib = os.path.join(d, "lib%s.so" % name)
    proc = subprocess.run([cc, "-shared", "-fPIC", "-o", lib, src], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if proc.returncode != 0:
        raise st.Skip("cc could not build a shared library: %s" % proc.stdout.strip())
    return d, os.path.realpath(lib)


# ---- a library that does not load stops only what needs it --------------------------------------

def junk_library_does_not_stop_a_run():
    d, lib = junk_library_dir()
    config = st.QUICKSTART if st.fashion_mnist_available()[0] else st.GOOD_SYNTHETIC
    out = st.temp_dir("run")
    result = st.strata_run(config, out, "train.steps=3", env={"STRATA_PLUGIN_PATH": d})
    st.check(os.path.isfile(os.path.join(out, "summary.json")), "the run wrote no summary.json", result)
    lines = warnings_about(result, lib)
    st.check(len(lines) == 1, "expected exactly one warning naming %s, got %d" % (lib, len(lines)), result)
    st.check("was not loaded" in lines[0] and "dynamic loader" in lines[0],
             "the warning should say the library was not loaded and why: %r" % lines[0], result)


def warnings_not_repeated_by_spawned_ranks():
    d, lib = junk_library_dir()
    result = st.strata_run(st.GOOD_SYNTHETIC, st.temp_dir("ddp"), "train.steps=2", "strategy.name=ddp",
                           "distributed.nproc=2", env={"STRATA_PLUGIN_PATH": d})
    count = result.stderr.count(lib)
    st.check(count == 1, "the launcher warns about %s once and its ranks do not repeat it (seen %d times)"
             % (lib, count), result)


def plugins_lists_what_did_not_load():
    d, lib = junk_library_dir()
    paths = [d, st.fixture_plugin_dir("missing_symbol"), st.fixture_plugin_dir("wrong_names")]
    broken = [lib] + [os.path.realpath(p) for p in st.fixture_libraries("missing_symbol") +
                      st.fixture_libraries("wrong_names")]
    result = st.strata("plugins", env={"STRATA_PLUGIN_PATH": ":".join(paths)})
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    table, rest = plugins_sections(result)
    for name in ("single", "mlp", "synthetic"):
        st.check(re.search(r"^\S+\s+%s\s" % name, table, re.M), "the table should list %s" % name, result)
    st.check("not loaded (3 libraries" in rest, "after the table: a `not loaded (3 libraries` section", result)
    for path in broken:
        line = [l for l in rest.splitlines() if path in l]
        st.check(line, "the not-loaded section should name %s" % path, result)
    st.expect_in(lib + ": the dynamic loader cannot load it", rest, result, "the not-loaded section")
    st.expect_in("not a Strata plugin", rest, result, "the not-loaded section")
    st.expect_in("declares strategy names [fixture_declared] but it registered [fixture_actual]", rest, result,
                 "the not-loaded section")
    st.check("fixture_actual" not in table, "a library that failed must leave no entry in the table", result)
    st.expect_not_in("was not loaded", result.stderr, result, "stderr (the listing reports them)")


def nothing_loads_is_an_error():
    """Only a broken library on the path and no built-ins: exit 2 (a copy of strata with no plugins)."""
    d, lib = junk_library_dir()
    work = st.temp_dir("bare")
    os.makedirs(os.path.join(work, "bin"))
    exe = os.path.join(work, "bin", "strata")
    shutil.copy(st.strata_bin(), exe)
    if st.run_command([exe, "--version"]).returncode != 0:
        raise st.Skip("a copy of %s does not run outside its directory (its libraries are found relative to it)"
                      % st.strata_bin())
    result = st.run_command([exe, "plugins"], env={"STRATA_PLUGIN_PATH": d})
    st.expect_clean_failure(result, 2, "no plugin loaded")
    st.expect_in(lib, result.stdout, result, "stdout")


# ---- the search path itself --------------------------------------------------------------------

def missing_environment_entry_warns():
    missing = os.path.join(st.temp_dir("nopath"), "does_not_exist")
    result = st.strata("validate", st.GOOD_SYNTHETIC, env={"STRATA_PLUGIN_PATH": missing})
    st.expect_exit(result, 0)
    st.expect_stderr(result, 'warning: STRATA_PLUGIN_PATH entry "%s" does not exist' % missing)


def missing_experiment_entry_is_an_error():
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", 'plugins.paths=["does_not_exist"]')
    st.expect_clean_failure(result, 2, "plugins.paths", "does_not_exist")


# ---- a plugin that only a broken library provides ------------------------------------------------

def plugin_of_a_broken_library_names_it():
    """The manifest was read (names known): the error names exactly that library."""
    libs = st.fixture_libraries("wrong_names")
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("wrong_names")}
    for command in (["validate", st.GOOD_SYNTHETIC], ["run", st.GOOD_SYNTHETIC, "--out", st.temp_dir("r")]):
        result = st.strata(*(command + ["--set", "strategy.name=fixture_declared"]), env=env)
        st.expect_clean_failure(result, 2, "strategy.name", "strategy 'fixture_declared' comes from plugin library",
                                os.path.realpath(libs[0]), "which did not load")
    result = st.strata("describe", "fixture_declared", env=env)
    st.expect_clean_failure(result, 2, os.path.realpath(libs[0]), "did not load")


def unknown_plugin_lists_broken_libraries():
    """No manifest read (not a shared library): the libraries that did not load are the suspects."""
    d, lib = junk_library_dir()
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", "model.name=mlp2", env={"STRATA_PLUGIN_PATH": d})
    st.expect_clean_failure(result, 2, "model.name", "unknown model 'mlp2'", "Did you mean 'mlp'",
                            "1 plugin library did not load and may provide it: " + lib)


# ---- a library cut short -------------------------------------------------------------------------

def truncated_library_is_a_warning():
    """A plugin library cut short (an interrupted copy): the dynamic loader would touch a page past
    its end (SIGBUS) while loading it. It is refused before loading: a warning for a command that
    does not need it, the reason in `strata plugins`, and named when the experiment asks for what
    it would provide."""
    built = sorted(n for n in os.listdir(st.plugins_dir()) if n.endswith(".so"))
    if not built:
        raise st.Skip("no plugin library in %s to cut short" % st.plugins_dir())
    source = os.path.join(st.plugins_dir(), built[0])
    d = st.temp_dir("truncated")
    with open(source, "rb") as f:
        whole = f.read()
    for size in (5000, len(whole) // 2):
        lib = os.path.join(d, "libstrata_cut.so")
        with open(lib, "wb") as f:
            f.write(whole[:size])
        lib = os.path.realpath(lib)
        env = {"STRATA_PLUGIN_PATH": d}
        result = st.strata("plugins", env=env)
        st.expect_exit(result, 0)
        st.expect_no_crash(result)
        _, rest = plugins_sections(result)
        st.expect_in(lib + ": the file is cut short (truncated)", rest, result, "the not-loaded section")
        result = st.strata("validate", st.GOOD_SYNTHETIC, env=env)
        st.expect_exit(result, 0)
        lines = warnings_about(result, lib)
        st.check(len(lines) == 1 and "cut short" in lines[0],
                 "expected one warning naming %s as cut short, got %r" % (lib, lines), result)
        result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", "model.name=cut_model", env=env)
        st.expect_clean_failure(result, 2, "model.name", "unknown model 'cut_model'",
                                "1 plugin library did not load and may provide it: " + lib, "cut short")


# ---- a library that crashes while it loads -------------------------------------------------------

CRASHES = {
    "SIGABRT": "#include <stdlib.h>\n__attribute__((constructor)) static void boom(void) { abort(); }\n",
    "SIGSEGV": "__attribute__((constructor)) static void boom(void) { *(volatile int*)0 = 1; }\n",
}


def crashing_library_is_named():
    for signal, source in CRASHES.items():
        d, lib = compile_c_library("crash_" + signal.lower(), source)
        for args in (["plugins"], ["validate", st.GOOD_SYNTHETIC]):
            result = st.strata(*args, env={"STRATA_PLUGIN_PATH": d})
            st.expect_exit(result, 2)  # not killed by the signal
            st.expect_error_paragraph(result)
            st.expect_stderr(result, "error: plugin library %s crashed while loading (%s in its initialization code)."
                             % (lib, signal))
            st.expect_stderr(result, "fix: remove it from the plugin search path")


if __name__ == "__main__":
    st.main([
        junk_library_does_not_stop_a_run, warnings_not_repeated_by_spawned_ranks, plugins_lists_what_did_not_load,
        nothing_loads_is_an_error, missing_environment_entry_warns, missing_experiment_entry_is_an_error,
        plugin_of_a_broken_library_names_it, unknown_plugin_lists_broken_libraries, truncated_library_is_a_warning,
        crashing_library_is_named,
    ])
