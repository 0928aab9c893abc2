#!/usr/bin/env python3
"""No binary of this build binds a C++ standard-library symbol to LibTorch's copy of it.

The PyPI LibTorch's libraries export, unversioned, their own copies of parts of libstdc++
(std::filesystem, string streams, ...). The dynamic loader takes the first definition in the
lookup scope, and an unversioned definition satisfies even a versioned reference, so whichever of
libtorch and libstdc++ comes first wins. LibTorch's std::filesystem::remove_all calls
recursive_directory_iterator::__erase, which no libstdc++ exports: bound to that copy, removing a
non-empty directory jumps to address 0. cmake/StrataCompiler.cmake names libstdc++ first in
every binary that links LibTorch; this test asks the dynamic loader (LD_DEBUG=bindings with
LD_BIND_NOW, so every reference is resolved at load) where each reference of a project object
goes, and fails naming the binary and the symbol when one binds to a LibTorch library although
libstdc++ defines it, or when it is a standard-library function that only LibTorch's copy defines
(a strong definition: weak ones are template instantiations, which any library may share).

Cases: the detector itself on two tiny programs (one linked LibTorch first, which must be
flagged, one linked as the project links, which must not); every executable and every shared
library of the build tree, each as the dynamic loader loads it on its own (ldd-style: nothing of
the program runs); the plugins as the `strata` host loads them (`strata validate` of the quick
start loads the built-in ones, `strata plugins` the test fixtures).

Environment (CTest sets all of them; see tests/integration/CMakeLists.txt):
  STRATA_BIN                   the `strata` executable
  STRATA_FIXTURE_PLUGIN_DIR    the fixture plugins
  STRATA_BUILD_DIR             the build tree whose binaries are checked
  STRATA_CXX                   the C++ compiler of the build (for the detector's two programs)
  STRATA_TORCH_LIBRARY         libtorch.so of the build
  STRATA_LIBSTDCXX_FIRST       the link flags that put libstdc++ first (StrataCompiler.cmake)
"""

import functools
import os
import re
import shlex
import struct
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402

# "binding file <referencing object> [ns] to <defining object> [ns]: normal symbol `<name>' [<version>]"
BINDING = re.compile(r"binding file (\S+) \[\d+\] to (\S+) \[\d+\]: \w+ symbol `([^']+)'(?: \[([^\]]+)\])?")
# Mangled names of the standard library: std:: (St), its abbreviations (Sa allocator, Sb
# basic_string, Ss string, Si/So/Sd streams), __gnu_cxx and __cxxabiv1, with the vtable, typeinfo,
# VTT, guard variable and thunk prefixes and cv/ref qualifiers of member functions.
STD_NAME = re.compile(r"^_Z(?:T[VTIS]|GV|T[hv][n\d_]*|Tc[hvn\d_]*)?N?[rVK]*[RO]?(?:St|S[absiod]|9__gnu_cxx|10__cxxabiv1)")
TORCH_BASENAME = re.compile(r"^lib(?:torch|c10|caffe2|shm)[\w.-]*\.so")


@functools.lru_cache(maxsize=None)
def realpath(path):
    return os.path.realpath(path)


def env_path(name):
    value = os.environ.get(name)
    if not value:
        raise st.TestFailure("%s is not set: run this test through ctest (ctest --test-dir build -R integration.link)"
                             % name)
    return value


class Build:
    """What the cases need to know about the build, read once."""

    def __init__(self):
        self.dir = os.path.realpath(env_path("STRATA_BUILD_DIR"))
        self.cxx = env_path("STRATA_CXX")
        self.libtorch = os.path.realpath(env_path("STRATA_TORCH_LIBRARY"))
        self.torch_dir = os.path.dirname(self.libtorch)
        self.libstdcxx_first = shlex.split(env_path("STRATA_LIBSTDCXX_FIRST"))
        self._definitions = {}

    def is_torch(self, path):
        real = realpath(path)
        return real.startswith(self.torch_dir + os.sep) or bool(TORCH_BASENAME.match(os.path.basename(real)))

    def definitions(self, path):
        """{name (without version): nm's type letter} of the dynamic symbols `path` defines."""
        if path not in self._definitions:
            out = subprocess.run(["nm", "-D", "--defined-only", path], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, check=True).stdout
            fields = (line.split() for line in out.splitlines())
            self._definitions[path] = {f[2].split("@")[0]: f[1] for f in fields if len(f) == 3}
        return self._definitions[path]

    def is_strong(self, path, name):
        """Whether `path` defines `name` as a strong symbol: weak (W, V) and unique (u) ones are template
        instantiations and inline functions, which every library that uses them may define."""
        kind = self.definitions(path).get(name)
        return kind is not None and kind not in "WwVvu"


_build = None


def build():
    global _build
    if _build is None:
        _build = Build()
    return _build


# ---- ELF files -------------------------------------------------------------------------------

def elf_kind(path):
    """'exe' for an executable (it names a program interpreter), 'lib' for a shared library, else None."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return None  # only 64-bit little-endian ELF is built here
            e_type, = struct.unpack_from("<H", head, 16)
            if e_type not in (2, 3):  # ET_EXEC, ET_DYN
                return None
            e_phoff, = struct.unpack_from("<Q", head, 32)
            e_phentsize, e_phnum = struct.unpack_from("<HH", head, 54)
            f.seek(e_phoff)
            table = f.read(e_phentsize * e_phnum)
    except OSError:
        return None
    for i in range(e_phnum):
        p_type, = struct.unpack_from("<I", table, i * e_phentsize)
        if p_type == 3:  # PT_INTERP
            return "exe"
    return "lib" if e_type == 3 else None


def interpreter(path):
    """The program interpreter (the dynamic loader) an executable names."""
    with open(path, "rb") as f:
        head = f.read(64)
        e_phoff, = struct.unpack_from("<Q", head, 32)
        e_phentsize, e_phnum = struct.unpack_from("<HH", head, 54)
        f.seek(e_phoff)
        table = f.read(e_phentsize * e_phnum)
        for i in range(e_phnum):
            p_type, _, p_offset = struct.unpack_from("<IIQ", table, i * e_phentsize)
            p_filesz, = struct.unpack_from("<Q", table, i * e_phentsize + 32)
            if p_type == 3:
                f.seek(p_offset)
                return f.read(p_filesz).rstrip(b"\0").decode()
    raise st.TestFailure("%s names no program interpreter" % path)


def needed(path):
    """The DT_NEEDED entries of `path`, in order."""
    out = subprocess.run(["readelf", "-d", "-W", path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def project_binaries(root):
    """Every executable and shared library under the build tree (CMake's scratch projects left out)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "CMakeFiles")
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                kind = elf_kind(path)
                if kind:
                    found.append((path, kind))
    return found


# ---- asking the dynamic loader -----------------------------------------------------------------

class Bindings:
    """The symbol bindings the dynamic loader reported, and the objects it loaded."""

    def __init__(self, records, objects, result):
        self.records = records  # [(referencing object, defining object, symbol, version or None)]
        self.objects = objects  # paths of the objects that referenced or defined something
        self.result = result

    def violations(self, roots):
        """[(referencing object, symbol, version, defining object, also in libstdc++)] for the references of
        objects under `roots` that bind to a LibTorch library although libstdc++ defines them, or although
        they are standard-library functions that LibTorch defines as strong symbols (its private copy)."""
        b = build()
        libstdcxx = next((o for o in self.objects if os.path.basename(o).startswith("libstdc++.so")), None)
        exports = b.definitions(realpath(libstdcxx)) if libstdcxx else {}
        bad = []
        for ref, dfn, sym, ver in self.records:
            if not any(realpath(ref).startswith(r + os.sep) for r in roots) or not b.is_torch(dfn):
                continue
            if sym in exports:
                bad.append((ref, sym, ver, dfn, True))
            elif STD_NAME.match(sym) and b.is_strong(realpath(dfn), sym):
                bad.append((ref, sym, ver, dfn, False))
        return bad


def read_bindings(prefix, result):
    directory, base = os.path.split(prefix)
    records, objects = [], set()
    for name in sorted(os.listdir(directory)):
        if not name.startswith(base + "."):
            continue
        path = os.path.join(directory, name)
        with open(path, errors="replace") as f:
            for line in f:
                if "binding file" not in line:
                    continue
                m = BINDING.search(line)
                if m:
                    records.append(m.groups())
                    objects.add(m.group(1))
                    objects.add(m.group(2))
        os.remove(path)
    return Bindings(records, objects, result)


def traced_load(path, scratch):
    """The bindings of `path` loaded on its own by the dynamic loader in ldd's mode: every object is
    relocated (LD_BIND_NOW) and nothing of the program runs."""
    prefix = os.path.join(scratch, "trace-" + os.path.basename(path))
    loader = interpreter(st.strata_bin())
    result = st.run_command([loader, path], env={
        "LD_TRACE_LOADED_OBJECTS": "1", "LD_WARN": "yes", "LD_BIND_NOW": "1",
        "LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": prefix})
    return read_bindings(prefix, result)


def traced_run(args, scratch, env=None, label="run"):
    """The bindings of a real run of `args` (and of the children it starts), every reference resolved at load."""
    prefix = os.path.join(scratch, label)
    extra = {"LD_BIND_NOW": "1", "LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": prefix}
    extra.update(env or {})
    result = st.run_command(args, env=extra)
    return read_bindings(prefix, result)


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), stdout=subprocess.PIPE, text=True).stdout
    lines = out.splitlines()
    return lines if len(lines) == len(names) else list(names)


def describe(violations, what):
    """One paragraph per binary: the symbols (at most 8 shown), where they went, its DT_NEEDED order."""
    by_ref = {}
    for ref, sym, ver, dfn, in_libstdcxx in violations:
        by_ref.setdefault(ref, []).append((sym, ver, dfn, in_libstdcxx))
    text = []
    for ref, items in sorted(by_ref.items()):
        unique = sorted(set(items))
        shown = unique[:8]
        lines = []
        for name, (sym, ver, dfn, in_libstdcxx) in zip(demangle([s for s, _, _, _ in shown]), shown):
            lines.append("    %s\n      %s %s -> %s%s" % (name, sym, "[%s]" % ver if ver else "(unversioned)", dfn,
                                                        "" if in_libstdcxx else " (this libstdc++ lacks it)"))
        if len(unique) > len(shown):
            lines.append("    ... and %d more" % (len(unique) - len(shown)))
        text.append("%s (%s): %d standard-library symbol(s) bind to LibTorch's copies instead of libstdc++:\n%s\n"
                    "  its DT_NEEDED order: %s" % (ref, what, len(unique), "\n".join(lines),
                                                   " ".join(needed(ref)) if os.path.exists(ref) else "?"))
    return "\n".join(text)


FIX_HINT = ("Link libstdc++ ahead of LibTorch (cmake/StrataCompiler.cmake, strata_link_libstdcxx_first on "
            "strata_core), so that the dynamic loader finds libstdc++'s definitions first.")


def expect_clean(violations, what):
    if violations:
        raise st.TestFailure(describe(violations, what) + "\n" + FIX_HINT)


# ---- the cases ---------------------------------------------------------------------------------

PROBE = r"""
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <system_error>
// Removes the directory named on the command line, contents and all.
int main(int argc, char** argv) {
  if (argc < 2) return 0;
  std::error_code ec;
  const auto n = std::filesystem::remove_all(argv[1], ec);
  std::printf("removed %ju\n", static_cast<std::uintmax_t>(n));
  return ec ? 1 : 0;
}
"""


def detector_flags_a_libtorch_first_link():
    """Two programs that call std::filesystem::remove_all and load libtorch.so: linked with LibTorch
    ahead of libstdc++ (as libstrata_core and the plugins were linked before), the call binds to
    libtorch.so's copy and the check must say so; linked with the project's flags, nothing is reported."""
    b = build()
    if "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathERSt10error_code" not in b.definitions(b.libtorch):
        raise st.Skip("this libtorch.so exports no std::filesystem::remove_all, so there is nothing a link "
                      "could bind wrongly to show the check on")
    work = st.temp_dir("link-probe")
    source = os.path.join(work, "probe.cpp")
    with open(source, "w") as f:
        f.write(PROBE)
    # libtorch.so stays needed in both (as in the project's binaries, which use it); only the order changes.
    torch = ["-Wl,--push-state,--no-as-needed", b.libtorch, "-Wl,--pop-state", "-Wl,-rpath," + b.torch_dir]
    programs = {"torch_first": [], "libstdcxx_first": b.libstdcxx_first}
    for name, flags in programs.items():
        out = os.path.join(work, "probe_" + name)
        result = st.run_command([b.cxx, "-std=c++17", "-O1"] + flags + [source, "-o", out] + torch, cwd=work)
        st.check(result.returncode == 0, "the probe program did not build", result)
    bad = traced_load(os.path.join(work, "probe_torch_first"), work)
    st.check(any(os.path.basename(o) == "libtorch.so" for o in bad.objects),
             "the dynamic loader did not load libtorch.so for probe_torch_first", bad.result)
    found = bad.violations([work])
    st.check(any("remove_all" in sym for _, sym, _, _, _ in found),
             "probe_torch_first binds std::filesystem::remove_all to libtorch.so, yet the check found %s"
             % (describe(found, "probe") or "nothing"), bad.result)
    print("  detector: probe_torch_first is flagged as it should be:\n" + describe(found, "linked LibTorch first"))
    good = traced_load(os.path.join(work, "probe_libstdcxx_first"), work)
    st.check(any(os.path.basename(o) == "libtorch.so" for o in good.objects),
             "the dynamic loader did not load libtorch.so for probe_libstdcxx_first", good.result)
    expect_clean(good.violations([work]), "linked with %s" % " ".join(b.libstdcxx_first))


def binaries_of(kind):
    b = build()
    found = [p for p, k in project_binaries(b.dir) if k == kind]
    st.check(found, "no %s found under %s" % ("executables" if kind == "exe" else "shared libraries", b.dir))
    return found


def check_each(paths, required, what):
    """Loads each path on its own; fails with every violation found. `required`: basenames that must be
    among the checked ones, so that the case cannot pass by finding nothing."""
    b = build()
    work = st.temp_dir("link-" + what)
    checked, violations = [], []
    for path in paths:
        bindings = traced_load(path, work)
        if not any(b.is_torch(o) for o in bindings.objects):
            continue  # LibTorch is not loaded with it: nothing can bind there
        checked.append(os.path.relpath(path, b.dir))
        violations += bindings.violations([b.dir])
    missing = [r for r in required if r not in {os.path.basename(p) for p in checked}]
    st.check(not missing, "%s not checked (not found under %s, or LibTorch not loaded with them)"
             % (", ".join(missing), b.dir))
    print("  %d %s loaded with LibTorch checked: %s" % (len(checked), what, " ".join(checked)))
    expect_clean(violations, "loaded on its own")


def executables_bind_libstdcxx():
    """Every executable of the build tree, as the dynamic loader loads it (its own DT_NEEDED scope)."""
    check_each(binaries_of("exe"), ["strata", "strata_unit_tests"], "executables")


def libraries_bind_libstdcxx():
    """Every shared library and plugin of the build tree, loaded on its own: what a host that has not
    loaded libstdc++ before LibTorch gets from the library's own DT_NEEDED order."""
    check_each(binaries_of("lib"), ["libstrata_core.so", "libstrata_strategy_single.so"], "shared libraries")


def plugins_in_the_host():
    """The plugins as `strata` loads them (dlopen, RTLD_NOW | RTLD_LOCAL): the built-in ones through
    `strata validate` of the quick start, the fixtures (with the built-in ones) through `strata plugins`."""
    b = build()
    work = st.temp_dir("link-host")
    runs = [traced_run([st.strata_bin(), "validate", st.QUICKSTART], work, label="validate")]
    try:
        base = st.fixture_plugin_dir()
        fixtures = sorted(os.path.join(base, d) for d in os.listdir(base))
    except st.Skip as e:
        print("  note: no fixture plugins: %s" % e)
        fixtures = []
    runs.append(traced_run([st.strata_bin(), "plugins"], work, env={"STRATA_PLUGIN_PATH": os.pathsep.join(fixtures)},
                           label="plugins"))
    for r in runs:
        st.check(not (isinstance(r.result.returncode, int) and r.result.returncode < 0),
                 "strata was killed by a signal", r.result)
    loaded = set()
    for r in runs:
        loaded |= {os.path.realpath(o) for o in r.objects}
    builtin = [os.path.realpath(os.path.join(st.plugins_dir(), n)) for n in os.listdir(st.plugins_dir())
               if n.endswith(".so")]
    not_loaded = [p for p in builtin if p not in loaded]
    st.check(builtin and not not_loaded, "strata validate and strata plugins did not load every built-in "
             "plugin: %s" % (", ".join(not_loaded) or "none found in %s" % st.plugins_dir()), runs[1].result)
    print("  strata loaded %d built-in plugins and %d fixture directories" % (len(builtin), len(fixtures)))
    violations = []
    for r in runs:
        violations += r.violations([b.dir])
    expect_clean(violations, "loaded by strata")


if __name__ == "__main__":
    st.main([detector_flags_a_libtorch_first_link, executables_bind_libstdcxx, libraries_bind_libstdcxx,
             plugins_in_the_host])
