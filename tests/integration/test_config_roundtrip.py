#!/usr/bin/env python3
"""The run directory's config.toml is the resolved experiment (docs/user-guide.md, Outputs): it records
the --set overrides, running it again reproduces the run exactly, and it still validates when
the original experiment used paths relative to its own file ([dataset] path, [plugins] paths),
wherever the run directory is."""

import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402

try:
    import tomllib  # Python 3.11+
except ImportError:  # pragma: no cover
    tomllib = None

OVERRIDES = ("train.steps=7", "model.hidden=[8, 8]", "optimizer.name=sgd", "optimizer.lr=0.05", "log.every=2")


class Cache:
    run_dir = None
    summary = None


def overridden_run():
    if Cache.run_dir is None:
        out = os.path.join(st.temp_dir("over"), "run")
        st.strata_run(st.GOOD_SYNTHETIC, out, *OVERRIDES)
        Cache.summary = st.load_summary(out)
        Cache.run_dir = out
    return Cache


def overrides_recorded():
    run = overridden_run()
    if tomllib is None:
        raise st.Skip("tomllib needs Python 3.11")
    with open(os.path.join(run.run_dir, "config.toml"), "rb") as f:
        resolved = tomllib.load(f)
    for (section, key), value in {("train", "steps"): 7, ("model", "hidden"): [8, 8], ("optimizer", "name"): "sgd",
                                  ("optimizer", "lr"): 0.05, ("log", "every"): 2,
                                  ("dataset", "train_size"): 512}.items():
        got = resolved.get(section, {}).get(key)
        st.check(got == value, "config.toml [%s] %s is %r, expected %r" % (section, key, got, value))


def rerun_reproduces():
    run = overridden_run()
    out = os.path.join(st.temp_dir("rerun"), "run")
    result = st.strata_run(os.path.join(run.run_dir, "config.toml"), out)
    again = st.load_summary(out)
    st.check(again["loss_curve"] == run.summary["loss_curve"],
             "running config.toml again gave another loss curve:\n  %s\n  %s"
             % (run.summary["loss_curve"], again["loss_curve"]), result)
    st.check(again["param_norm"] == run.summary["param_norm"], "param_norm %r != %r"
             % (again["param_norm"], run.summary["param_norm"]), result)


def _experiment_with(work, extra_dataset, extra_sections):
    with open(st.GOOD_SYNTHETIC, encoding="utf-8") as f:
        text = f.read()
    if extra_dataset is not None:
        start = text.index("[dataset]")
        end = text.index("[strategy]")
        text = text[:start] + "[dataset]\n" + extra_dataset + "\n" + text[end:]
    text += "\n" + extra_sections
    os.makedirs(os.path.join(work, "experiments"), exist_ok=True)
    config = os.path.join(work, "experiments", "relative.toml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(text)
    return config


def _run_then_validate_elsewhere(config, work):
    # The run directory is not next to the experiment, so a relative path copied verbatim into
    # config.toml would point somewhere else.
    out = os.path.join(work, "runs", "deep", "run")
    st.strata_run(config, out)
    result = st.strata("validate", os.path.join(out, "config.toml"))
    if result.returncode != 0:
        st.fail("the run's config.toml does not validate: a path relative to the experiment file was copied "
                "verbatim, and from the run directory it names another place", result)


def relative_dataset_path():
    data = st.require_fashion_mnist()
    work = st.temp_dir("reldata")
    os.symlink(os.path.abspath(data), os.path.join(work, "fmnist"))
    config = _experiment_with(work, 'name = "fashion_mnist"\npath = "../fmnist"\ntrain_limit = 256\n'
                                    'eval_limit = 64\n', "")
    _run_then_validate_elsewhere(config, work)


def relative_plugin_paths():
    work = st.temp_dir("relplug")
    os.makedirs(os.path.join(work, "experiments", "my_plugins"))  # an empty plugin directory
    config = _experiment_with(work, None, '[plugins]\npaths = ["my_plugins"]\n')
    _run_then_validate_elsewhere(config, work)


if __name__ == "__main__":
    st.main([overrides_recorded, rerun_reproduces, relative_dataset_path, relative_plugin_paths])
