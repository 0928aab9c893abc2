#!/usr/bin/env python3
"""The documentation holds: README.md is short and has a table of contents, every file of docs/
starts with its own; every relative link of README.md, docs/*.md and BENCHMARKS.md reaches a file
of the repository and every #anchor a heading of it; every command in the shell code blocks of
README.md and docs/*.md that calls the CLI (`build/bin/strata ...`, or any `.../bin/strata`)
names a subcommand and flags that `strata --help` and `strata <command> --help` list, none
calls a bare `strata` (setup does not put it on PATH), and every file they name under
experiments/, examples/, tests/fixtures/, scripts/ or bench/ exists; docs/reference.md names
every command, every flag and every key of every core section the CLI knows.

Each failure names file:line. Standard library only; runs the binary for its help texts only
(a few seconds)."""

import os
import re
import shlex
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402

README = os.path.join(st.REPO, "README.md")
DOCS = os.path.join(st.REPO, "docs")
BENCHMARKS = os.path.join(st.REPO, "BENCHMARKS.md")
REFERENCE = os.path.join(DOCS, "reference.md")
README_MAX_LINES = 350

# Code blocks whose lines are commands; any other label (toml, text, cpp, ...) is not run.
SHELL_LABELS = {"", "sh", "bash", "shell", "console"}
# Paths under these directories named by a command must exist in the repository.
CHECKED_PATH_PREFIXES = ("experiments/", "examples/", "tests/fixtures/", "scripts/", "bench/")
# Core sections of an experiment file (`strata describe NAME`); plugins are described by name.
CORE_SECTIONS = ["experiment", "train", "optimizer", "eval", "log", "distributed", "precision", "checkpoint",
                 "plugins", "compare"]


def rel(path):
    return os.path.relpath(path, st.REPO)


def markdown_files(include_benchmarks=False):
    files = [README]
    if os.path.isdir(DOCS):
        files += sorted(os.path.join(DOCS, n) for n in os.listdir(DOCS) if n.endswith(".md"))
    if include_benchmarks and os.path.isfile(BENCHMARKS):
        files.append(BENCHMARKS)
    return files


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")


# ---- markdown ---------------------------------------------------------------------------------

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^\s`]*)")


class Doc:
    """A markdown file split into prose lines and fenced code blocks, with its headings' anchors."""

    def __init__(self, path):
        self.path = path
        self.lines = read_lines(path)
        if self.lines and self.lines[-1] == "":
            self.lines.pop()  # the newline that ends the file
        self.prose = []    # (line number, text) outside code blocks
        self.blocks = []   # (label, [(line number, text), ...])
        self.headings = []  # (line number, level, text, anchor)
        fence, label, body = None, None, None
        for number, line in enumerate(self.lines, 1):
            m = FENCE.match(line)
            if fence is None:
                if m:
                    fence, label, body = m.group(2), m.group(3).lower(), []
                    continue
                self.prose.append((number, line))
            else:
                if m and m.group(2).startswith(fence) and not m.group(3):
                    self.blocks.append((label, body))
                    fence = None
                else:
                    body.append((number, line))
        if fence is not None:
            raise st.TestFailure("%s:%d: a code block is never closed" % (rel(path), len(self.lines)))
        seen = {}
        for number, line in self.prose:
            h = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if h:
                base = github_anchor(h.group(2))
                anchor = base if base not in seen else "%s-%d" % (base, seen[base])
                seen[base] = seen.get(base, 0) + 1
                self.headings.append((number, len(h.group(1)), h.group(2), anchor))

    def anchors(self):
        return {a for _, _, _, a in self.headings}

    def where(self, number):
        return "%s:%d" % (rel(self.path), number)


def github_anchor(heading):
    """The id GitHub gives a heading: markup and punctuation dropped, lowercase, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text)                          # inline HTML tags
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)                         # punctuation (\w keeps '_')
    return text.replace(" ", "-")


INLINE_CODE = re.compile(r"(`+)((?:(?!\n\s*\n)[\s\S])+?)\1")  # not across paragraphs
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")


def links(doc):
    """(line number, target) of every link of the prose, a link's text may span lines (inline code
    and code blocks left out)."""
    out = []
    prose = dict(doc.prose)
    lines = [prose.get(n, "") for n in range(1, len(doc.lines) + 1)]  # code blocks as blank lines
    for number, line in enumerate(lines, 1):
        m = REF_DEF.match(line)
        if m:
            out.append((number, m.group(1)))
    text = "\n".join(lines)
    text = INLINE_CODE.sub(lambda c: re.sub(r"[^\n]", " ", c.group(0)), text)
    for m in LINK.finditer(text):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(2)))
    return out


def contents_list(doc, first_lines):
    """The anchors linked from the first list of same-file links within the first lines."""
    anchors, in_list = [], False
    for number, line in doc.prose:
        if number > first_lines and not in_list:
            break
        item = re.match(r"^\s*(?:[-*+]|\d+\.)\s+(.*)$", line)
        if item and re.search(r"\]\(#[^)]+\)", item.group(1)):
            in_list = True
            anchors += re.findall(r"\]\(#([^)\s]+)\)", item.group(1))
        elif in_list and line.strip() and not item:
            break
        elif in_list and not line.strip():
            # a blank line ends the list unless another item follows
            following = [l for n, l in doc.prose if n > number and l.strip()]
            if not following or not re.match(r"^\s*(?:[-*+]|\d+\.)\s+.*\]\(#", following[0]):
                break
    return anchors


# ---- the CLI ----------------------------------------------------------------------------------

class Cli:
    """Subcommands and the flags of each, from the help texts (run once)."""
    commands = None   # {"run": {"--nproc", ...}, "bench comms": {...}, ...}
    top_flags = None  # flags of `strata` alone (--help, --version)


def help_of(*args):
    result = st.strata(*(list(args) + ["--help"]))
    st.expect_exit(result, 0)
    return result


def options_in(text):
    """Flags of the `options:` section of a help text, and any in its usage line."""
    flags = set()
    section = False
    for line in text.splitlines():
        if re.match(r"^\S", line):
            section = line.startswith("options:")
            if line.startswith("usage:"):
                flags.update(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", line))
            continue
        if section:
            m = re.match(r"^\s+(-\w|--[\w-]+)(?:\s+\[\s*(--[\w-]+)\s*\])?", line)
            if m:
                flags.update(x for x in m.groups() if x)
    return flags


def cli():
    if Cli.commands is not None:
        return Cli
    top = help_of()
    commands = {}
    section = False
    for line in top.stdout.splitlines():
        if re.match(r"^\S", line):
            section = line.startswith("commands:")
            continue
        if section:
            m = re.match(r"^  ([a-z][\w-]*)(?: ([a-z][\w-]*))?", line)
            if m:
                name = m.group(1)
                if name == "bench" and m.group(2):
                    name = "bench " + m.group(2)
                commands[name] = None
    st.check(commands, "`strata --help` lists no commands", top)
    Cli.top_flags = options_in(top.stdout) | {"-h", "--help", "--version"}
    for name in list(commands):
        commands[name] = options_in(help_of(*name.split()).stdout) | {"-h", "--help"}
    if any(c.startswith("bench ") for c in commands):
        commands["bench"] = options_in(help_of("bench").stdout) | {"-h", "--help"}
    Cli.commands = commands
    return Cli


# ---- shell commands in code blocks -------------------------------------------------------------

def logical_lines(label, body):
    """(line number, text) of each command line: continuations joined, prompts removed; in a
    console block only the lines after a `$ ` prompt."""
    out, pending, start = [], None, None
    for number, text in body:
        if pending is None:
            stripped = text.lstrip()
            if label == "console":
                if not stripped.startswith("$ "):
                    continue
                stripped = stripped[2:]
            elif stripped.startswith("$ "):
                stripped = stripped[2:]
            pending, start = stripped, number
        else:
            pending += " " + text.strip()
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        out.append((start, pending))
        pending = None
    if pending is not None:
        out.append((start, pending))
    return out


def simple_commands(line):
    """The simple commands of a shell line as token lists (comments dropped, split at && || ; | &)."""
    try:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        tokens = list(lexer)
    except ValueError:
        tokens = line.split("#", 1)[0].split()
    commands, current = [], []
    for token in tokens:
        if token and set(token) <= set(";&|()<>"):
            if current:
                commands.append(current)
            current = []
        else:
            current.append(token)
    if current:
        commands.append(current)
    return commands


ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
CLI_PATH = re.compile(r"(^|/)bin/strata$")
WRAPPERS = {"exec", "time", "nice", "env", "sudo", "command", "nohup"}


def shell_blocks(doc):
    for label, body in doc.blocks:
        if label in SHELL_LABELS:
            yield label, body


def command_problems(doc):
    """Problems of the CLI calls of doc's shell blocks and inline code: (line number, message)."""
    known = cli().commands
    problems = []
    for label, body in shell_blocks(doc):
        for number, line in logical_lines(label, body):
            for tokens in simple_commands(line):
                words = list(tokens)
                while words and (ASSIGNMENT.match(words[0]) or words[0] in WRAPPERS):
                    words.pop(0)
                for i, word in enumerate(words):
                    if word == "strata":
                        follows = words[i + 1] if i + 1 < len(words) else ""
                        if i == 0 or follows in {c.split()[0] for c in known} | {"--help", "-h", "--version"}:
                            problems.append((number, "a bare `strata %s` (strata is not on PATH: write "
                                             "build/bin/strata)" % follows))
                        continue
                    if not CLI_PATH.search(word):
                        continue
                    problems += [(number, p) for p in check_call(words[i + 1:], known)]
    for number, tokens in inline_calls(doc):
        problems += [(number, p) for p in check_call(tokens[1:], known)]
    return problems


def inline_calls(doc):
    """(line number, tokens) of each inline code span of the prose that is a CLI call
    (`build/bin/strata run ...`), a span's text may span lines."""
    prose = dict(doc.prose)
    text = "\n".join(prose.get(n, "") for n in range(1, len(doc.lines) + 1))
    out = []
    for m in INLINE_CODE.finditer(text):
        try:
            tokens = shlex.split(m.group(2))
        except ValueError:
            tokens = m.group(2).split()
        # the program's name alone, or a placeholder for the command (`strata <command> --help`), is no call
        if len(tokens) > 1 and CLI_PATH.search(tokens[0]) and not tokens[1].startswith("<"):
            out.append((text.count("\n", 0, m.start()) + 1, tokens))
    return out


def check_call(args, known):
    """What is wrong with `strata ARGS` (the tokens after the binary)."""
    if not args:
        return ["`strata` without a command"]
    first = args[0]
    if first.startswith("-"):
        flag = first.split("=", 1)[0]
        return [] if flag in Cli.top_flags else ["`strata %s`: no such option of strata (strata --help)" % first]
    name, rest = first, args[1:]
    if first == "bench" and rest and not rest[0].startswith("-"):
        name, rest = "bench " + rest[0], rest[1:]
    if name not in known:
        return ["`strata %s`: no such command (strata --help lists %s)" % (name, ", ".join(sorted(known)))]
    problems = []
    for arg in rest:
        if not arg.startswith("-") or arg in ("-", "--") or re.match(r"^-\d", arg):
            continue
        flag = arg.split("=", 1)[0]
        if flag not in known[name]:
            problems.append("`strata %s %s`: `strata %s --help` has no option %s"
                            % (name, arg, name, flag))
    return problems


def named_paths(doc):
    """(line number, path) of every argument of a shell command that names a checked path."""
    out = []
    for label, body in shell_blocks(doc):
        for number, line in logical_lines(label, body):
            for tokens in simple_commands(line):
                for token in tokens:
                    # --flag=PATH and NAME=PATH name PATH
                    value = token.split("=", 1)[1] if (token.startswith("-") and "=" in token) \
                        or ASSIGNMENT.match(token) else token
                    for part in value.split(","):
                        part = part.strip()
                        if part.startswith("./"):
                            part = part[2:]
                        if part.startswith(CHECKED_PATH_PREFIXES) and not re.search(r"[$*?<>{}]", part):
                            out.append((number, part))
    return out


# ---- cases --------------------------------------------------------------------------------------

def readme_is_short_with_contents():
    doc = Doc(README)
    problems = []
    if len(doc.lines) > README_MAX_LINES:
        problems.append("%s: README.md has %d lines, at most %d are allowed (move text to docs/)"
                        % (doc.where(README_MAX_LINES + 1), len(doc.lines), README_MAX_LINES))
    problems += contents_problems(doc, first_lines=40)
    st.check(not problems, "\n".join(problems))


def contents_problems(doc, first_lines):
    """The file has a contents list near its top that links every ## heading (but the list's own)."""
    listed = contents_list(doc, first_lines)
    if len(listed) < 3:
        return ["%s: no table of contents (a list of links to the file's own headings) in the first %d lines"
                % (doc.where(1), first_lines)]
    problems = []
    for number, level, text, anchor in doc.headings:
        if level == 2 and anchor not in listed and anchor not in ("contents", "table-of-contents"):
            problems.append("%s: heading %r (#%s) is missing from the table of contents"
                            % (doc.where(number), text, anchor))
    return problems


def docs_have_contents():
    files = [p for p in markdown_files() if p != README]
    st.check(files, "docs/ holds no .md files")
    problems = []
    for path in files:
        problems += contents_problems(Doc(path), first_lines=30)
    st.check(not problems, "\n".join(problems))


def links_resolve():
    docs = {}

    def doc_of(path):
        if path not in docs:
            docs[path] = Doc(path)
        return docs[path]

    problems, count = [], 0
    for path in markdown_files(include_benchmarks=True):
        doc = doc_of(path)
        for number, target in links(doc):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
                continue
            count += 1
            file_part, _, anchor = target.partition("#")
            dest = path if not file_part else os.path.normpath(os.path.join(os.path.dirname(path), file_part))
            if file_part.startswith("/"):
                problems.append("%s: link %r is absolute; links are relative to the file" % (doc.where(number), target))
                continue
            if not (dest == st.REPO or dest.startswith(st.REPO + os.sep)):
                problems.append("%s: link %r leaves the repository" % (doc.where(number), target))
                continue
            if not os.path.exists(dest):
                problems.append("%s: link %r: %s does not exist" % (doc.where(number), target, rel(dest)))
                continue
            if anchor:
                if not dest.endswith(".md") or not os.path.isfile(dest):
                    problems.append("%s: link %r: an anchor into %s, which is not a markdown file"
                                    % (doc.where(number), target, rel(dest)))
                elif anchor not in doc_of(dest).anchors():
                    problems.append("%s: link %r: %s has no heading with the anchor #%s"
                                    % (doc.where(number), target, rel(dest), anchor))
    st.check(count > 0, "no relative links found at all: the parser is broken")
    st.check(not problems, "\n".join(problems))


def commands_exist():
    problems, calls = [], 0
    for path in markdown_files():
        doc = Doc(path)
        for number, message in command_problems(doc):
            problems.append("%s: %s" % (doc.where(number), message))
        for label, body in shell_blocks(doc):
            calls += sum(1 for _, line in logical_lines(label, body) if "bin/strata" in line)
    st.check(calls > 0, "no `build/bin/strata` command found in any code block: the parser is broken")
    st.check(not problems, "\n".join(problems))


def named_files_exist():
    problems = []
    for path in markdown_files():
        doc = Doc(path)
        for number, named in named_paths(doc):
            if not os.path.exists(os.path.join(st.REPO, named)):
                problems.append("%s: %s does not exist in the repository" % (doc.where(number), named))
    st.check(not problems, "\n".join(problems))


def reference_is_complete():
    st.check(os.path.isfile(REFERENCE), "%s does not exist" % rel(REFERENCE))
    doc = Doc(REFERENCE)
    text = "\n".join(doc.lines)

    def heading_line(anchor):
        """Where a missing entry belongs: the line of that ## heading (else 1)."""
        return next((n for n, level, _, a in doc.headings if a == anchor), 1)

    info = cli()
    problems = []
    commands_at = doc.where(heading_line("commands"))
    for name, flags in sorted(info.commands.items()):
        if not re.search(r"strata %s\b" % re.escape(name), text):
            problems.append("%s: the command `strata %s` is not described" % (commands_at, name))
        for flag in sorted(flags - {"-h", "--help"}):
            if not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(flag), text):
                problems.append("%s: `strata %s %s` (in its --help) is not described" % (commands_at, name, flag))
    for section in CORE_SECTIONS:
        result = st.strata("describe", section)
        st.expect_exit(result, 0)
        keys_at = doc.where(heading_line("sweep-files" if section == "compare" else "experiment-file-keys"))
        for key in re.findall(r"^  ([a-z_][\w]*)\s", result.stdout, re.M):
            if not re.search(r"\b%s\b" % re.escape(key), text):
                problems.append("%s: the key %s.%s (strata describe %s) is not described"
                                % (keys_at, section, key, section))
    st.check(not problems, "\n".join(problems))


if __name__ == "__main__":
    st.main([readme_is_short_with_contents, docs_have_contents, links_resolve, commands_exist,
             named_files_exist, reference_is_complete])
