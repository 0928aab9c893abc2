#!/usr/bin/env python3
"""The consumer test of the SDK: `cmake --install` of the build into a temporary prefix, the
template plugin (plugins/template) and the zeropp plugin (plugins/zeropp) configured and built out of
tree against that prefix with find_package(Strata), and two-rank runs of the *installed* `strata`
with each on STRATA_PLUGIN_PATH. The installed CLI must find libstrata_core, LibTorch and its built-in plugins
by itself (RPATH, lib/strata/plugins), never the build tree.

    STRATA_BUILD_DIR=build STRATA_TORCH_DIR=<Torch_DIR> ~/.cache/strata/venv/bin/python \
      tests/integration/test_install.py

Environment (CTest sets the first three): STRATA_BUILD_DIR (the build to install; default
build/ of this checkout), STRATA_CMAKE (default: cmake on PATH), STRATA_TORCH_DIR (LibTorch's
Torch_DIR; default: asked from this interpreter's torch).
"""
import json
import math
import os
import re
import shutil
import sys

import strata_test as st

BUILD_TIMEOUT = 900  # seconds: configuring LibTorch and compiling one plugin without ccache

state = {}  # what the cases produce for the next ones: prefix, plugin_dir


def cmake():
    path = os.environ.get("STRATA_CMAKE") or shutil.which("cmake")
    st.check(path, "cmake is needed (set STRATA_CMAKE or put cmake on PATH)")
    return path


def torch_cmake_prefix():
    """The directory to put on CMAKE_PREFIX_PATH for find_package(Torch)."""
    torch_dir = os.environ.get("STRATA_TORCH_DIR")
    if torch_dir:
        return os.path.dirname(os.path.normpath(torch_dir))  # .../share/cmake/Torch -> .../share/cmake
    result = st.run_command([sys.executable, "-c", "import torch.utils; print(torch.utils.cmake_prefix_path)"])
    st.expect_exit(result, 0)
    return result.stdout.strip()


def installed(*parts):
    st.check("prefix" in state, "the install case failed, so there is nothing installed to test")
    return os.path.join(state["prefix"], *parts)


def plugin_rows(result):
    """{name: library} from the table `strata plugins` prints (library: the last column)."""
    rows = {}
    for line in result.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] != "KIND":
            rows[parts[1]] = parts[-1]
    return rows


def install_into_a_prefix():
    build = os.path.abspath(os.environ.get("STRATA_BUILD_DIR") or os.path.join(st.REPO, "build"))
    prefix = os.path.join(st.temp_dir("install"), "prefix")
    result = st.run_command([cmake(), "--install", build, "--prefix", prefix], timeout=BUILD_TIMEOUT)
    st.expect_exit(result, 0)
    state["prefix"] = prefix
    for rel in ("bin/strata", "lib/strata/bin/strata", "lib/libstrata_core.so", "include/strata/strategy.hpp",
                "include/strata/plugin.hpp",
                "lib/libstrata_kit.a", "include/strata/kit.hpp", "include/strata/engine.hpp",
                "lib/strata/plugins/libstrata_strategy_ddp.so", "lib/strata/plugins/libstrata_model_mlp.so",
                "lib/cmake/Strata/StrataConfig.cmake", "lib/cmake/Strata/StrataConfigVersion.cmake",
                "lib/cmake/Strata/StrataTargets.cmake", "lib/cmake/Strata/StrataPlugin.cmake",
                "lib/strata/plugins/libstrata_model_torchscript.so", "share/strata/tools/export_model.py"):
        st.check(os.path.isfile(installed(rel)), "%s was not installed" % rel, result)
    # The template is for copying and building out of tree, not a built-in.
    st.check(not os.path.exists(installed("lib/strata/plugins/libstrata_strategy_local_sgd.so")),
             "the template plugin must not be installed (it would clash with the user's build of it)")


def installed_binaries_resolve_their_libraries():
    if not shutil.which("ldd"):
        raise st.Skip("ldd is not installed")
    for rel in ("lib/strata/bin/strata", "lib/libstrata_core.so", "lib/strata/plugins/libstrata_strategy_ddp.so"):
        result = st.run_command(["ldd", installed(rel)])
        st.expect_exit(result, 0)
        st.check("not found" not in result.stdout, "%s has unresolved libraries" % rel, result)
        st.check(re.search(r"libtorch_cpu\.so => /", result.stdout), "%s does not resolve libtorch_cpu.so" % rel, result)
        if rel != "lib/libstrata_core.so":
            core = re.search(r"libstrata_core\.so => (\S+)", result.stdout)
            st.check(core and os.path.realpath(core.group(1)) == os.path.realpath(installed("lib/libstrata_core.so")),
                     "%s must load the installed libstrata_core.so, not the build tree's" % rel, result)


def installed_cli_lists_builtin_plugins():
    result = st.run_command([installed("bin", "strata"), "plugins"])
    st.expect_exit(result, 0)
    rows = plugin_rows(result)
    plugdir = os.path.realpath(installed("lib", "strata", "plugins"))
    for name in ("single", "ddp", "mlp", "synthetic"):
        st.check(name in rows, "the installed `strata plugins` does not list %s" % name, result)
        st.check(os.path.dirname(os.path.realpath(rows[name])) == plugdir,
                 "%s comes from %s, expected %s" % (name, rows[name], plugdir), result)
    st.check("local_sgd" not in rows, "the installed CLI should not know local_sgd before it is built", result)


def installed_tree_moves_and_finds_libtorch_at_run_time():
    """A copy of the installed tree elsewhere runs (through a symlink to its bin/strata too) with its
    own plugins; STRATA_LIBTORCH chooses LibTorch, and one without libtorch.so is refused with the
    fix (exit 2)."""
    import torch
    moved = os.path.join(st.temp_dir("moved"), "elsewhere")
    shutil.copytree(installed(), moved, symlinks=True)
    link_dir = st.temp_dir("links")
    link = os.path.join(link_dir, "strata")
    os.symlink(os.path.join(moved, "bin", "strata"), link)
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    for binary, env in ((os.path.join(moved, "bin", "strata"), None), (link, {"STRATA_LIBTORCH": torch_lib})):
        result = st.run_command([binary, "plugins"], env=env)
        st.expect_exit(result, 0)
        rows = plugin_rows(result)
        st.check("ddp" in rows and os.path.realpath(rows["ddp"]).startswith(os.path.realpath(moved)),
                 "the moved tree's CLI should load its own plugins, got %s" % rows.get("ddp"), result)
    result = st.run_command([link, "plugins"], env={"STRATA_LIBTORCH": link_dir})
    st.expect_clean_failure(result, 2, "holds no libtorch.so", "STRATA_LIBTORCH")


def build_out_of_tree(folder, name):
    """Configures and builds plugins/<folder> against the installed prefix; returns its build dir."""
    work = os.path.dirname(installed())
    build = os.path.join(work, folder + "-build")
    args = [cmake(), "-S", os.path.join(st.REPO, "plugins", folder), "-B", build, "-DCMAKE_BUILD_TYPE=Release",
            "-DCMAKE_PREFIX_PATH=%s;%s" % (installed(), torch_cmake_prefix())]
    if shutil.which("ninja"):
        args += ["-G", "Ninja"]
    env = {}
    if shutil.which("ccache"):
        # The base directory makes the temporary paths relative, so reruns hit the cache.
        args += ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        env["CCACHE_BASEDIR"] = work
    result = st.run_command(args, env=env, timeout=BUILD_TIMEOUT)
    st.expect_exit(result, 0)
    result = st.run_command([cmake(), "--build", build], env=env, timeout=BUILD_TIMEOUT)
    st.expect_exit(result, 0)
    library = os.path.join(build, "libstrata_strategy_%s.so" % name)
    st.check(os.path.isfile(library), "the out-of-tree build did not produce %s" % library, result)
    # The static kit calls fmt: the plugin declares libfmt itself (not borrowed from the host's libraries).
    if shutil.which("readelf"):
        needed = st.run_command(["readelf", "-d", library], timeout=60)
        st.check("libfmt" in needed.stdout, "%s does not declare libfmt (NEEDED):\n%s" % (library, needed.stdout))
    return build


def template_builds_out_of_tree():
    state["plugin_dir"] = build_out_of_tree("template", "local_sgd")


def run_installed(strategy, plugin_dir):
    """A two-rank run of the installed CLI with `strategy` from plugin_dir; returns its summary."""
    env = {"STRATA_PLUGIN_PATH": plugin_dir}
    listed = st.run_command([installed("bin", "strata"), "plugins"], env=env)
    st.expect_exit(listed, 0)
    st.check(plugin_rows(listed).get(strategy, "").startswith(plugin_dir),
             "`strata plugins` should list %s from %s" % (strategy, plugin_dir), listed)
    out = st.temp_dir("run_" + strategy)
    result = st.run_command([installed("bin", "strata"), "run", st.GOOD_SYNTHETIC, "--nproc", "2", "--out", out]
                            + st.set_args("strategy.name=" + strategy, "train.steps=8"), env=env)
    st.expect_exit(result, 0)
    st.expect_no_crash(result)
    summary = st.load_summary(out)
    st.check(summary["strategy"] == strategy, "summary.json strategy is %r" % summary["strategy"], result)
    st.check(summary["world_size"] == 2, "summary.json world_size is %r" % summary["world_size"], result)
    loss = summary["final_loss"]
    st.check(isinstance(loss, (int, float)) and math.isfinite(loss), "final_loss is %r" % loss, result)
    return summary


def installed_cli_runs_the_out_of_tree_plugin():
    st.check("plugin_dir" in state, "the out-of-tree build failed, so there is no plugin to run")
    run_installed("local_sgd", state["plugin_dir"])


def zeropp_builds_out_of_tree_passes_check_and_is_estimated():
    """The zeropp plugin (ZeRO++ over zero3; by default qwZ and qgZ: parameter gathers and gradient
    exchanges travel as int8 blocks through a gather codec and a reduce codec of the installed kit)
    built against the installed SDK: the installed CLI runs it at world 2, `strata check` holds it to
    the schedule it declares (the codecs' bytes), to
    its loss band and, without quantization, to single's model, and `strata estimate` predicts its
    bus bytes within 2% of the run's."""
    st.check(not os.path.exists(installed("lib/strata/plugins/libstrata_strategy_zeropp.so")),
             "the zeropp example must not be installed")
    plugin_dir = build_out_of_tree("zeropp", "zeropp")
    env = {"STRATA_PLUGIN_PATH": plugin_dir}
    summary = run_installed("zeropp", plugin_dir)
    measured = summary["comm"]["bus_bytes_per_step"]
    checked = st.run_command([installed("bin", "strata"), "check", "zeropp", "--world-sizes", "2", "--no-matrix"],
                             env=dict(env, TMPDIR=st.temp_dir("zeropp_check")), timeout=BUILD_TIMEOUT)
    st.expect_exit(checked, 0)
    st.expect_no_crash(checked)
    st.expect_stdout(checked, "loss band: parameters gathered and gradients reduced as quantized blocks")
    st.expect_stdout(checked, "(exact with quantize_weights = false, quantize_gradients = false)")
    row = [line for line in checked.stdout.splitlines() if line.startswith("| communication")]
    st.check(len(row) == 1 and "PASS" in row[0] and "scheduled" in row[0], "no passing communication row", checked)
    out = st.temp_dir("zeropp_estimate")
    estimated = st.run_command([installed("bin", "strata"), "estimate", st.GOOD_SYNTHETIC, "--world-sizes", "2",
                                "--strategies", "zeropp,zero3", "--out", out] + st.set_args("train.steps=8"),
                               env=env, timeout=BUILD_TIMEOUT)
    st.expect_exit(estimated, 0)
    with open(os.path.join(out, "estimate.json")) as f:
        rows = {r["strategy"]: r for r in json.load(f)["rows"]}
    st.expect_close(rows["zeropp"]["bus_bytes_per_step"], measured, "zeropp@2 bus bytes per step, predicted against measured",
                    rel=0.02)
    st.check(rows["zeropp"]["bus_bytes_per_step"] < 0.7 * rows["zero3"]["bus_bytes_per_step"],
             "zeropp's int8 gathers and exchanges should move well under zero3's float32 bytes", estimated)
    print("  zeropp@2: bus %.0f predicted / %.0f measured; zero3 %.0f predicted"
          % (rows["zeropp"]["bus_bytes_per_step"], measured, rows["zero3"]["bus_bytes_per_step"]))


if __name__ == "__main__":
    st.main([install_into_a_prefix, installed_binaries_resolve_their_libraries, installed_cli_lists_builtin_plugins,
             installed_tree_moves_and_finds_libtorch_at_run_time, template_builds_out_of_tree, installed_cli_runs_the_out_of_tree_plugin,
             zeropp_builds_out_of_tree_passes_check_and_is_estimated])
