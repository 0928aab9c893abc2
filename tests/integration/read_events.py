#!/usr/bin/env python3
"""Reads the TensorBoard event files of a run with TensorBoard's own reader and prints one JSON
object on stdout:

    {"scalars": {tag: [[step, value], ...]},     # values as float32 widened to float
     "text": {tag: [string, ...]},               # one string per text event, in step order
     "hparams": {name: value},                   # from _hparams_/session_start_info
     "hparams_written": [[name, differs], ...],  # a written _hparams_/experiment, in its order
     "hparams_metrics": [tag, ...],              # the HPARAMS tab's metrics (TensorBoard's choice)
     "hparams_experiment": {"hparams": [[name, differs], ...], "metrics": [tag, ...], "description": str}}

"hparams_experiment" is what TensorBoard's HPARAMS tab shows for RUN_DIR as its log directory,
computed by the hparams plugin's own backend context: the written experiment if some run has one,
else the one it infers from the runs' session start infos (hparams sorted, differing first).

Usage: read_events.py RUN_DIR

RUN_DIR itself, or any directory below it, may hold the event files (names containing
"tfevents"); each directory that holds some is loaded with one EventAccumulator. Exits 2 when
no event file is found and 3 when a record is truncated or fails its CRC check (TensorBoard
silently stops reading a file there). Needs only the standard library and tensorboard.
"""

import json
import logging
import os
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.hparams import plugin_data_pb2

EXPERIMENT_TAG = "_hparams_/experiment"
SESSION_START_TAG = "_hparams_/session_start_info"


class _ReaderProblems(logging.Handler):
    """Collects what TensorBoard's reader logs about bad records. Its loader swallows the
    DataLossError of a truncated record or a failed CRC check and logs it at DEBUG level as
    "Truncated record in <file> (<reason>)", then stops reading that file."""

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.problems = []

    def emit(self, record):
        message = record.getMessage()
        if record.levelno >= logging.WARNING:
            print("tensorboard: " + message, file=sys.stderr)
        if message.startswith("Truncated record in "):
            self.problems.append(message)


def _event_dirs(run_dir):
    dirs = []
    for root, _subdirs, files in os.walk(run_dir):
        if any("tfevents" in name for name in files):
            dirs.append(root)
    return sorted(dirs)


def _plugin_content(acc, plugin_name):
    try:
        return acc.PluginTagToContent(plugin_name)
    except KeyError:
        return {}


def _hparam_value(value):
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        return value.number_value
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    return None  # null_value, struct_value, list_value: not written by Strata


def hparams_experiment(logdir):
    """The experiment the HPARAMS tab shows for `logdir`: {"hparams": [[name, differs], ...] in
    TensorBoard's order, "metrics": [tag, ...], "description": str}."""
    from tensorboard import context
    from tensorboard.backend.event_processing import data_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from tensorboard.plugins.hparams import backend_context

    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, logdir)
    ctx = context.RequestContext()
    backend = backend_context.Context(base_plugin.TBContext(data_provider=provider, logdir=logdir))
    experiment = backend.experiment_from_metadata(
        ctx, "", True, backend.hparams_metadata(ctx, ""), backend.hparams_from_data_provider(ctx, "", 0))
    return {"hparams": [[h.name, h.differs] for h in experiment.hparam_infos],
            "metrics": [m.name.tag for m in experiment.metric_infos],
            "description": experiment.description}


def read_run(run_dir):
    result = {"scalars": {}, "text": {}, "hparams": {}, "hparams_written": [], "hparams_metrics": []}
    for directory in _event_dirs(run_dir):
        acc = event_accumulator.EventAccumulator(
            directory, size_guidance={"scalars": 0, "tensors": 0}
        )
        acc.Reload()
        tags = acc.Tags()
        for tag in tags.get("scalars", []):
            result["scalars"][tag] = [[e.step, e.value] for e in acc.Scalars(tag)]
        text_tags = set(_plugin_content(acc, "text"))
        for tag in tags.get("tensors", []):
            if tag in text_tags:
                strings = result["text"].setdefault(tag, [])
                for e in acc.Tensors(tag):
                    strings.extend(s.decode("utf-8") for s in e.tensor_proto.string_val)
        for tag, content in _plugin_content(acc, "hparams").items():
            data = plugin_data_pb2.HParamsPluginData.FromString(content)
            if tag == SESSION_START_TAG and data.HasField("session_start_info"):
                for name, value in data.session_start_info.hparams.items():
                    result["hparams"][name] = _hparam_value(value)
            elif tag == EXPERIMENT_TAG and data.HasField("experiment"):
                result["hparams_written"].extend(
                    [h.name, h.differs] for h in data.experiment.hparam_infos
                )
    try:
        result["hparams_experiment"] = hparams_experiment(run_dir)
    except Exception as e:  # an older or newer TensorBoard: the checks that need it fail, the others run
        result["hparams_experiment"] = {"hparams": [], "metrics": [], "description": "", "error": repr(e)}
    result["hparams_metrics"] = result["hparams_experiment"]["metrics"]
    return result


def main(argv):
    if len(argv) != 2:
        print("usage: read_events.py RUN_DIR", file=sys.stderr)
        return 2
    run_dir = argv[1]
    if not os.path.isdir(run_dir):
        print("read_events.py: %s is not a directory" % run_dir, file=sys.stderr)
        return 2
    if not _event_dirs(run_dir):
        print(
            "read_events.py: no TensorBoard event file (name containing 'tfevents') under %s"
            % run_dir,
            file=sys.stderr,
        )
        return 2

    problems = _ReaderProblems()
    logger = logging.getLogger("tensorboard")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(problems)

    result = read_run(run_dir)
    if problems.problems:
        for message in problems.problems:
            print("read_events.py: bad record: " + message, file=sys.stderr)
        return 3
    json.dump(result, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
