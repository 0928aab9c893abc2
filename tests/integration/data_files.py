"""Small data files in the real formats of the file-reading dataset plugins (standard library only),
for the end-to-end tests of `fashion_mnist`, `cifar10`, `text` and `mrpc`.

Every writer takes a directory (created when missing), writes deterministic content (the same
arguments give the same bytes) and returns what a test needs to check. The `damage_*` functions
rewrite one file of a valid set and return a `Damage` naming the file and the text that the
plugin's error message must contain, so a test reads:

    data_files.write_cifar10(tmp)
    damage = data_files.damage_cifar10_label(tmp)
    result = st.run_strata(["validate", toml])       # [dataset] path = tmp
    st.expect_exit(result, 2)
    assert damage.file_name in result.stderr and damage.message in result.stderr

Formats:
  Fashion-MNIST    IDX files train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
                   t10k-labels-idx1-ubyte, raw or gzip-compressed (.gz): magic 00 00 08 <dims>, one
                   big-endian uint32 per dimension, then the unsigned bytes.
  CIFAR-10 binary  data_batch_1.bin .. data_batch_5.bin, test_batch.bin: records of 1 label byte
                   (0..9) + 3072 pixel bytes (1024 R, 1024 G, 1024 B, each 32x32 row-major).
  text             UTF-8 files in a directory (the plugin reads them sorted by name).
  MRPC             GLUE train.tsv/dev.tsv or Microsoft msr_paraphrase_train.txt/_test.txt: the
                   header `Quality\t#1 ID\t#2 ID\t#1 String\t#2 String`, then one pair per line.
"""

import collections
import gzip
import os
import random
import struct

CIFAR_RECORD = 3073          # bytes of one CIFAR-10 record: 1 label + 3 * 32 * 32 pixels
CIFAR_PIXELS = 3072
CIFAR_TRAIN_FILES = ["data_batch_%d.bin" % i for i in range(1, 6)]
CIFAR_TEST_FILE = "test_batch.bin"

MRPC_HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"
MRPC_LAYOUTS = {"glue": ("train.tsv", "dev.tsv"),
                "msr": ("msr_paraphrase_train.txt", "msr_paraphrase_test.txt")}

# What a damage_* function did: the file it changed (full path and base name), the 1-based line
# or 0-based record concerned (None when not about one), and a text the error message contains.
Damage = collections.namedtuple("Damage", "path file_name position message")


def _mkdir(directory):
    os.makedirs(directory, exist_ok=True)
    return directory


# ---- CIFAR-10 ---------------------------------------------------------------------------------

def cifar10_record(label, index):
    """One record: the label byte, then an image whose colour depends on the label (so a model can
    learn it) with a little index-dependent texture."""
    rng = random.Random(label * 1000003 + index)
    base = [(37 * label) % 256, (91 * label + 40) % 256, (157 * label + 80) % 256]
    pixels = bytearray(CIFAR_PIXELS)
    for c in range(3):
        for p in range(1024):
            pixels[c * 1024 + p] = (base[c] + rng.randrange(32)) % 256
    return bytes([label]) + bytes(pixels)


def write_cifar10(directory, train_records=(20, 20, 20, 20, 20), test_records=20):
    """Writes data_batch_<i>.bin with train_records[i-1] records each (as many files as entries,
    at most 5) and test_batch.bin with test_records records. Labels cycle 0..9. Returns
    {file name: [labels]}."""
    _mkdir(directory)
    if not 1 <= len(train_records) <= 5:
        raise ValueError("CIFAR-10 has 1 to 5 training files, got %d" % len(train_records))
    labels = {}
    plan = list(zip(CIFAR_TRAIN_FILES, train_records)) + [(CIFAR_TEST_FILE, test_records)]
    for k, (name, count) in enumerate(plan):
        file_labels = [(k + r) % 10 for r in range(count)]
        with open(os.path.join(directory, name), "wb") as f:
            for r, label in enumerate(file_labels):
                f.write(cifar10_record(label, k * 100000 + r))
        labels[name] = file_labels
    return labels


def damage_cifar10_truncate(directory, name="data_batch_1.bin", drop_bytes=100):
    """Cuts the last `drop_bytes` bytes off a written CIFAR-10 file: its size is then no longer a
    multiple of 3073."""
    path = os.path.join(directory, name)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - drop_bytes)
    return Damage(path, name, None, "is %d bytes, not a whole number of 3073-byte records" % (size - drop_bytes))


def damage_cifar10_label(directory, name="data_batch_1.bin", record=3, label=200):
    """Sets the label byte of record `record` (0-based) of a written CIFAR-10 file to `label`."""
    path = os.path.join(directory, name)
    with open(path, "r+b") as f:
        f.seek(record * CIFAR_RECORD)
        f.write(bytes([label]))
    return Damage(path, name, record, "label %d at record %d" % (label, record))


def damage_cifar10_missing(directory, name="test_batch.bin"):
    """Removes one file of a written CIFAR-10 set."""
    path = os.path.join(directory, name)
    os.remove(path)
    return Damage(path, name, None, "lacks " + name)


# ---- text -------------------------------------------------------------------------------------

_WORDS = ("the model reads a batch of tokens and predicts the next one while every rank keeps "
          "its shard of the parameters gathered just before use and freed after the unit runs "
          "so memory stays small and the loss matches a single process bit for bit").split()


def text_paragraphs(count, seed=0):
    """`count` English-like paragraphs (sentences of uneven length from a small vocabulary)."""
    rng = random.Random(seed)
    paragraphs = []
    for _ in range(count):
        sentences = []
        for _ in range(rng.randint(2, 6)):
            words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 18))]
            sentences.append(" ".join(words).capitalize() + ".")
        paragraphs.append(" ".join(sentences))
    return paragraphs


def write_text_corpus(directory, files=3, paragraphs_per_file=20, seed=0):
    """Writes `files` UTF-8 files part_<k>.txt (one non-ASCII character each, so multi-byte
    characters are exercised). Returns the list of paths in the order the plugin reads them."""
    _mkdir(directory)
    paths = []
    for k in range(files):
        path = os.path.join(directory, "part_%02d.txt" % k)
        body = "\n\n".join(text_paragraphs(paragraphs_per_file, seed * 1000 + k))
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write("Part %d \u2014 na\u00efve caf\u00e9.\n%s\n" % (k, body))
        paths.append(path)
    return paths


def write_text_file(path, size_bytes=4096, seed=0):
    """Writes one ASCII text file of exactly `size_bytes` bytes; returns its path."""
    _mkdir(os.path.dirname(os.path.abspath(path)))
    text = ""
    k = 0
    while len(text) < size_bytes:
        text += "\n".join(text_paragraphs(4, seed * 1000 + k)) + "\n"
        k += 1
    with open(path, "w", encoding="ascii", newline="\n") as f:
        f.write(text[:size_bytes])
    return path


def damage_text_binary(directory, name="part_99.bin"):
    """Adds a binary (non-UTF-8) file to a text directory: the plugin refuses it by name."""
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(b"ELF header\n\x7fELF\x02\x01\x01\x00\xff\xfe binary")
    return Damage(path, name, None, "is not UTF-8 text")


def damage_text_latin1(directory, name="part_98.txt"):
    """Adds a Latin-1 encoded file (valid text, wrong encoding) to a text directory."""
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write("first line\nna\u00efve caf\u00e9\n".encode("latin-1"))
    return Damage(path, name, 2, "is not UTF-8 text: byte 0xEF")


# ---- MRPC -------------------------------------------------------------------------------------

def mrpc_pairs(count, seed=0):
    """`count` (label, id1, id2, sentence1, sentence2) tuples with uneven sentence lengths (3 to 40
    words, so byte-level examples range from about 20 to 500 bytes). Label 1 pairs share most
    words, label 0 pairs do not, so a model can learn the task. Labels alternate 1, 0, 1, ..."""
    rng = random.Random(seed)
    pairs = []
    for i in range(count):
        label = 1 if i % 2 == 0 else 0
        n1 = rng.choice([3, 5, 8, 12, 20, 30, 40])
        first = [rng.choice(_WORDS) for _ in range(n1)]
        if label == 1:
            second = [w if rng.random() < 0.8 else rng.choice(_WORDS) for w in first]
        else:
            second = [rng.choice(_WORDS) for _ in range(rng.choice([3, 6, 10, 25, 40]))]
        s1 = " ".join(first).capitalize() + "."
        s2 = " ".join(second).capitalize() + ' "quoted" \u2014 ok.'
        pairs.append((label, 1000000 + 2 * i, 1000001 + 2 * i, s1, s2))
    return pairs


def _write_mrpc_file(path, pairs, bom=False, crlf=False):
    newline = "\r\n" if crlf else "\n"
    lines = [MRPC_HEADER] + ["%d\t%d\t%d\t%s\t%s" % p for p in pairs]
    with open(path, "w", encoding="utf-8-sig" if bom else "utf-8", newline="") as f:
        f.write(newline.join(lines) + newline)


def write_mrpc(directory, layout="glue", train_pairs=40, eval_pairs=16, seed=0):
    """Writes an MRPC directory: layout "glue" (train.tsv, dev.tsv) or "msr"
    (msr_paraphrase_train.txt, msr_paraphrase_test.txt, with a UTF-8 byte order mark and CRLF line
    ends like Microsoft's download). Returns {file name: [pairs]}."""
    _mkdir(directory)
    train_name, eval_name = MRPC_LAYOUTS[layout]
    msr = layout == "msr"
    written = {}
    for name, count, s in ((train_name, train_pairs, seed), (eval_name, eval_pairs, seed + 1)):
        pairs = mrpc_pairs(count, s)
        _write_mrpc_file(os.path.join(directory, name), pairs, bom=msr, crlf=msr)
        written[name] = pairs
    return written


def _rewrite_line(path, line_number, new_line):
    """Replaces 1-based line `line_number` of a text file, keeping its line ends and BOM."""
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    ending = b"\r" if lines[line_number - 1].endswith(b"\r") else b""
    lines[line_number - 1] = new_line.encode("utf-8") + ending
    with open(path, "wb") as f:
        f.write(b"\n".join(lines))


def damage_mrpc_columns(directory, name="train.tsv", line=5):
    """Drops the last column of line `line` (1-based, after the header) of an MRPC file."""
    path = os.path.join(directory, name)
    with open(path, encoding="utf-8-sig") as f:
        old = f.read().split("\n")[line - 1].rstrip("\r")
    _rewrite_line(path, line, "\t".join(old.split("\t")[:4]))
    return Damage(path, name, line, "line %d has 4 tab-separated columns" % line)


def damage_mrpc_label(directory, name="train.tsv", line=7, label="2"):
    """Sets the label (Quality) of line `line` of an MRPC file to `label`."""
    path = os.path.join(directory, name)
    with open(path, encoding="utf-8-sig") as f:
        old = f.read().split("\n")[line - 1].rstrip("\r")
    _rewrite_line(path, line, "\t".join([label] + old.split("\t")[1:]))
    return Damage(path, name, line, 'line %d: label (Quality) is "%s"' % (line, label))


def damage_mrpc_header(directory, name="train.tsv"):
    """Replaces the header of an MRPC file with GLUE test.tsv's (which has no labels)."""
    path = os.path.join(directory, name)
    _rewrite_line(path, 1, "index\t#1 ID\t#2 ID\t#1 String\t#2 String")
    return Damage(path, name, 1, "line 1: expected the MRPC header")


def damage_mrpc_missing(directory, name="dev.tsv"):
    """Removes the evaluation file of an MRPC directory."""
    path = os.path.join(directory, name)
    os.remove(path)
    return Damage(path, name, None, "lacks " + name)


# ---- Fashion-MNIST (IDX) ----------------------------------------------------------------------

FASHION_IMAGES = {"train": "train-images-idx3-ubyte", "t10k": "t10k-images-idx3-ubyte"}
FASHION_LABELS = {"train": "train-labels-idx1-ubyte", "t10k": "t10k-labels-idx1-ubyte"}


def idx_bytes(dims, payload):
    """An IDX file of unsigned bytes: magic 00 00 08 <number of dims>, big-endian dims, payload."""
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(payload)


def _read_idx_file(path):
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if path.endswith(".gz") else data


def _write_idx_file(path, data):
    with open(path, "wb") as f:
        f.write(gzip.compress(data, mtime=0) if path.endswith(".gz") else data)


def write_fashion_mnist(directory, train=60, test=20, gz=True):
    """Writes the four Fashion-MNIST IDX files with `train` and `test` 28x28 images (gzip-compressed
    under .gz names when `gz`, else raw); labels cycle 0..9 and an image's brightness follows its
    label. Returns {split: (images path, labels path)}."""
    _mkdir(directory)
    suffix = ".gz" if gz else ""
    paths = {}
    for split, count in (("train", train), ("t10k", test)):
        labels = [i % 10 for i in range(count)]
        rng = random.Random(count)
        pixels = bytes((25 * label + rng.randrange(25)) % 256 for label in labels for _ in range(28 * 28))
        images_path = os.path.join(directory, FASHION_IMAGES[split] + suffix)
        labels_path = os.path.join(directory, FASHION_LABELS[split] + suffix)
        _write_idx_file(images_path, idx_bytes([count, 28, 28], pixels))
        _write_idx_file(labels_path, idx_bytes([count], labels))
        paths[split] = (images_path, labels_path)
    return paths


def damage_truncate(path, keep):
    """Keeps the first `keep` bytes of a file (raw or compressed: a .gz file's stream is cut off)."""
    with open(path, "r+b") as f:
        f.truncate(keep)
    return Damage(path, os.path.basename(path), None, "truncated")


def damage_append(path, extra=b"junk\n"):
    """Appends bytes to a file: after the data of a raw IDX file, after the gzip stream of a .gz."""
    with open(path, "ab") as f:
        f.write(extra)
    message = "after the end of its gzip data" if path.endswith(".gz") else "%d trailing bytes" % len(extra)
    return Damage(path, os.path.basename(path), None, message)


def damage_gzip_crc(path):
    """Flips the first byte of a .gz file's CRC-32 (its trailer); the data decompresses as before."""
    with open(path, "r+b") as f:
        f.seek(-8, os.SEEK_END)
        byte = f.read(1)
        f.seek(-8, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0xFF]))
    return Damage(path, os.path.basename(path), None, "CRC-32")


def damage_idx_label(path, index=3, label=200):
    """Sets label `index` (0-based) of an IDX labels file, raw or .gz, to `label`."""
    data = bytearray(_read_idx_file(path))
    data[8 + index] = label
    _write_idx_file(path, bytes(data))
    return Damage(path, os.path.basename(path), index, "label %d at index %d" % (label, index))


def damage_idx_magic(path):
    """Replaces the magic number of an IDX file, raw or .gz, with the start of a PNG file."""
    data = bytearray(_read_idx_file(path))
    data[0:4] = b"\x89PNG"
    _write_idx_file(path, bytes(data))
    return Damage(path, os.path.basename(path), None, "bad magic number 0x89504E47")
