#!/usr/bin/env python3
"""Damaged dataset files are found by `strata validate`, not by `run`: exit 2, one error paragraph
at `dataset.path` that names the file, says what is wrong (in numbers) and how to fix it, with no
C++ stack text and no raw control characters from the file. Small files in each plugin's format
are written to temporary directories, validated as written (exit 0), then damaged one way each:
truncated, a cut-off gzip stream, bytes after the data, a damaged gzip trailer, a label out of
range, a wrong magic number. Real Fashion-MNIST, when installed, is damaged in a copy.

    STRATA_BIN=build/bin/strata python3 tests/integration/test_damaged_data.py
"""
import concurrent.futures
import os
import shutil

import data_files
import strata_test as st

TOML = """# test_damaged_data.py: {dataset} files in a temporary directory
[experiment]
name = "damaged_{dataset}"
[model]
name = "{model}"
{model_options}
[dataset]
name = "{dataset}"
path = "{path}"
[strategy]
name = "single"
[train]
steps = 1
global_batch_size = 4
warmup_steps = 0
[eval]
every = 0
"""
MODELS = {"fashion_mnist": ("mlp", ""), "cifar10": ("cnn", ""), "mrpc": ("llama", 'preset = "debug"'),
          "text": ("llama", 'preset = "debug"')}
# C++ stack text, and library internals that mean nothing to the user (SentencePiece's source
# lines, libstdc++'s iostream failures).
STACK_TEXT = ["frame #", "Exception raised from", "sentencepiece_processor.cc", "basic_filebuf"]


def config(dataset, path):
    model, options = MODELS[dataset]
    directory = st.temp_dir("config")
    file = os.path.join(directory, dataset + ".toml")
    with open(file, "w", encoding="utf-8") as f:
        f.write(TOML.format(dataset=dataset, model=model, model_options=options, path=path))
    return file


def validate(dataset, path, *sets):
    return st.strata("validate", config(dataset, path), *st.set_args(*sets))


def expect_clean_report(result, code, *fragments):
    """Exit `code`, the fragments in stderr, a fix, no stack text, no control characters."""
    st.expect_clean_failure(result, code, *fragments)
    for marker in STACK_TEXT:
        st.expect_not_in(marker, result.stderr + result.stdout, result)
    controls = sorted({c for c in result.stderr if (ord(c) < 32 and c != "\n") or 127 <= ord(c) < 160})
    st.check(not controls, "stderr holds control characters %r" % controls, result)


class Checks:
    """The validations of one case, queued while its files are written and damaged, then run two
    at a time (each is mostly start-up: loading LibTorch and the plugins)."""

    def __init__(self):
        self.pending = []

    def valid(self, dataset, path, *sets):
        """validate exits 0."""
        self.pending.append(lambda: st.expect_exit(validate(dataset, path, *sets), 0))

    def found(self, dataset, path, damage, *sets, extra=()):
        """validate exits 2 at dataset.path, naming the damaged file and what is wrong."""
        def check():
            result = validate(dataset, path, *sets)
            expect_clean_report(result, 2, "dataset.path", damage.path, damage.message, *extra)
            return "  %s: %s" % (damage.file_name, result.stderr.splitlines()[0][:300])
        self.pending.append(check)

    def refused(self, dataset, path, *fragments):
        """validate exits 2 with the fragments (the key first); strings with "=" are --set values."""
        sets = [f for f in fragments if "=" in f]
        def check():
            result = validate(dataset, path, *sets)
            expect_clean_report(result, 2, *[f for f in fragments if "=" not in f])
            return None
        self.pending.append(check)

    def run(self):
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(check) for check in self.pending]
        for future in futures:
            line = future.result()  # re-raises the first failure, in queue order
            if line:
                print(line)


def copy_of(directory, label):
    copy = os.path.join(st.temp_dir(label), "data")
    shutil.copytree(directory, copy)
    return copy


def fashion_mnist_gzip():
    """.gz files: cut off, bytes after the stream, a damaged trailer (CRC-32, cut ISIZE), a label
    of 200, a foreign magic number; the sizes are checked from the gzip trailer's length."""
    checks = Checks()
    good = st.temp_dir("fashion_gz")
    data_files.write_fashion_mnist(good)
    checks.valid("fashion_mnist", good)
    images, labels = data_files.FASHION_IMAGES["train"] + ".gz", data_files.FASHION_LABELS["train"] + ".gz"
    test_labels = data_files.FASHION_LABELS["t10k"] + ".gz"
    at = lambda d, name: os.path.join(d, name)  # noqa: E731
    d = copy_of(good, "gz_cut")
    checks.found("fashion_mnist", d, data_files.damage_truncate(at(d, images), os.path.getsize(at(d, images)) // 2),
                 extra=["47040 bytes of data expected after the 16-byte header", "gzip stream is cut off"])
    d = copy_of(good, "gz_junk")
    checks.found("fashion_mnist", d, data_files.damage_append(at(d, images)), extra=["5 bytes after"])
    d = copy_of(good, "gz_crc")
    checks.found("fashion_mnist", d, data_files.damage_gzip_crc(at(d, labels)))
    d = copy_of(good, "gz_isize")
    checks.found("fashion_mnist", d, data_files.damage_truncate(at(d, test_labels), os.path.getsize(at(d, test_labels)) - 2),
                 extra=["cut off before the trailer"])
    d = copy_of(good, "gz_label")
    checks.found("fashion_mnist", d, data_files.damage_idx_label(at(d, test_labels), index=3, label=200),
                 extra=["labels must be 0..9"])
    d = copy_of(good, "gz_magic")
    checks.found("fashion_mnist", d, data_files.damage_idx_magic(at(d, images)))
    checks.run()


def fashion_mnist_raw():
    """Raw IDX files: the size is checked against the header without reading the images; a label
    of 10 (the magic number is checked as for .gz files)."""
    checks = Checks()
    good = st.temp_dir("fashion_raw")
    data_files.write_fashion_mnist(good, gz=False)
    checks.valid("fashion_mnist", good)
    images, labels = data_files.FASHION_IMAGES["train"], data_files.FASHION_LABELS["train"]
    d = copy_of(good, "raw_cut")
    checks.found("fashion_mnist", d, data_files.damage_truncate(os.path.join(d, images), 16 + 1000),
                 extra=["47040 bytes of images expected after the 16-byte header (60 x 28 x 28), found 1000"])
    d = copy_of(good, "raw_extra")
    checks.found("fashion_mnist", d, data_files.damage_append(os.path.join(d, images)), extra=["found 47045"])
    d = copy_of(good, "raw_label")
    checks.found("fashion_mnist", d, data_files.damage_idx_label(os.path.join(d, labels), index=59, label=10))
    checks.run()


def fashion_mnist_images_crc_at_run():
    """The images are decompressed lazily (validate stays fast), so a damaged CRC-32 of the images,
    which no size shows, is found by `run`: exit 1, the file named, no crash."""
    d = st.temp_dir("fashion_lazy")
    data_files.write_fashion_mnist(d)
    damage = data_files.damage_gzip_crc(os.path.join(d, data_files.FASHION_IMAGES["t10k"] + ".gz"))
    toml = config("fashion_mnist", d)
    st.expect_exit(st.strata("validate", toml), 0)
    result = st.strata("run", toml, "--out", st.temp_dir("run"))
    expect_clean_report(result, 1, damage.path, damage.message)


def fashion_mnist_real_copy():
    """Debian's Fashion-MNIST, and a copy with its training images cut to 1,000,000 bytes (a broken
    download)."""
    source = st.require_fashion_mnist()
    checks = Checks()
    checks.valid("fashion_mnist", source)
    d = os.path.join(st.temp_dir("fashion_real"), "data")
    os.mkdir(d)
    for name in os.listdir(source):
        os.symlink(os.path.join(source, name), os.path.join(d, name))
    images = os.path.join(d, "train-images-idx3-ubyte.gz")
    os.remove(images)
    with open(os.path.join(source, "train-images-idx3-ubyte.gz"), "rb") as f, open(images, "wb") as out:
        out.write(f.read(1000000))
    checks.found("fashion_mnist", d, data_files.Damage(images, os.path.basename(images), None, "is truncated"),
                 extra=["47040000 bytes of data expected after the 16-byte header", "gzip stream is cut off"])
    checks.run()


def cifar10_files():
    """CIFAR-10 binary batches: cut inside a record and at a record boundary, trailing bytes, a
    label out of range in a record that train_limit leaves out (test_transformers.py has more)."""
    checks = Checks()
    good = st.temp_dir("cifar10")
    data_files.write_cifar10(good, train_records=(4, 4, 4, 4, 4), test_records=4)
    checks.valid("cifar10", good)
    d = copy_of(good, "cifar_cut")
    checks.found("cifar10", d, data_files.damage_cifar10_truncate(d), extra=["the file is truncated"])
    d = copy_of(good, "cifar_record")
    path = os.path.join(d, "data_batch_3.bin")
    checks.found("cifar10", d, data_files.damage_truncate(path, 3 * data_files.CIFAR_RECORD),
                 extra=["is 9219 bytes; 4 records (12292 bytes) expected"])
    d = copy_of(good, "cifar_extra")
    checks.found("cifar10", d, data_files.damage_append(os.path.join(d, "test_batch.bin"), b"\0" * 10),
                 extra=["not a whole number of 3073-byte records"])
    d = copy_of(good, "cifar_unused")
    checks.found("cifar10", d, data_files.damage_cifar10_label(d, name="data_batch_5.bin", record=1, label=10),
                 "dataset.train_limit=2")
    checks.run()


def mrpc_files():
    """MRPC: a bad label past train_limit, a label with a terminal escape sequence (printed
    escaped), a file cut in the middle of its last line."""
    checks = Checks()
    good = st.temp_dir("mrpc")
    data_files.write_mrpc(good, train_pairs=12, eval_pairs=6)
    checks.valid("mrpc", good)
    d = copy_of(good, "mrpc_unused")
    checks.found("mrpc", d, data_files.damage_mrpc_label(d, line=10), "dataset.train_limit=2")
    d = copy_of(good, "mrpc_escape")
    data_files.damage_mrpc_label(d, line=4, label="\x1b[31m\x07\r9")
    path = os.path.join(d, "train.tsv")
    checks.found("mrpc", d, data_files.Damage(path, "train.tsv", 4, r'label (Quality) is "\x1B[31m\x07\x0D9"'))
    d = copy_of(good, "mrpc_cut")
    path = os.path.join(d, "dev.tsv")
    with open(path, "rb") as f:
        last_tab = f.read().rindex(b"\t")
    checks.found("mrpc", d, data_files.damage_truncate(path, last_tab)._replace(
        message="line 7 has 4 tab-separated columns"))
    checks.run()


def text_files():
    """text: a file cut in the middle of a multi-byte character."""
    checks = Checks()
    good = st.temp_dir("text")
    data_files.write_text_corpus(good, files=2, paragraphs_per_file=10)
    checks.valid("text", good)
    d = copy_of(good, "text_cut")
    path = os.path.join(d, "part_01.txt")
    with open(path, "ab") as f:
        f.write("caf\u00e9".encode("utf-8")[:-1])
    checks.found("text", d, data_files.Damage(path, "part_01.txt", None, "is not UTF-8 text: byte 0xC3"))
    checks.run()


def unusable_paths():
    """Paths that are no data set of the expected kind (a device that never ends, a /proc file that
    fails to read, a text file, an empty directory, a name with a newline), and files that are no
    tokenizer: exit 2 at the option, naming the path printably, quickly."""
    checks = Checks()
    empty = st.temp_dir("empty")
    newline = os.path.join(empty, "line1\nX")
    shown = newline.replace("\n", r"\x0A")
    for dataset in MODELS:
        for path in ["/proc/self/mem", "/dev/zero", "/etc/passwd", empty]:
            if dataset == "text" and path == "/etc/passwd":
                continue  # a text file: good data for `text`
            checks.refused(dataset, path, "dataset.path", path)
        checks.refused(dataset, "", "dataset.path", shown, "dataset.path=" + newline)  # TOML cannot hold it raw
    for dataset in ["text", "mrpc"]:
        checks.refused(dataset, "", "dataset.tokenizer", "'/etc/passwd' is not a SentencePiece model",
                       "dataset.tokenizer=/etc/passwd")
        checks.refused(dataset, "", "dataset.tokenizer", "'/proc/self/mem'", "Input/output error",
                       "dataset.tokenizer=/proc/self/mem")
        checks.refused(dataset, "", "dataset.tokenizer", shown, "dataset.tokenizer=" + newline)
    checks.run()


if __name__ == "__main__":
    st.main([fashion_mnist_gzip, fashion_mnist_raw, fashion_mnist_images_crc_at_run, fashion_mnist_real_copy,
             cifar10_files, mrpc_files, text_files, unusable_paths])
