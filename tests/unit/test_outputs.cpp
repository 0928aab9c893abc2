// Unit tests for how Strata writes its outputs: whole files through a temporary name (a failed
// write leaves the old file and no temporary), streamed files that keep only complete appends,
// and run directories claimed by exactly one run.

#include "test_support.hpp"
#include "text/wrap.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "io/atomic_file.hpp"
#include "io/run_dir.hpp"
#include "strata/errors.hpp"

namespace {

using strata::test::temporaries;

namespace fs = std::filesystem;
using strata::RunDirUse;
using strata::test::FileSizeLimit;
using strata::test::TempDir;

std::string read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

using strata::test::error_of;

using strata::test::contains;

}  // namespace

TEST_CASE("write_text_file replaces a file whole and leaves no temporary") {
  TempDir dir;
  const fs::path file = dir.path() / "summary.json";
  strata::write_text_file(file, "first\n");
  strata::write_text_file(file, "second\n");
  CHECK(read(file) == "second\n");
  CHECK(temporaries(dir.path()).empty());
}

TEST_CASE("write_text_file into a missing directory names the path and the reason") {
  TempDir dir;
  const fs::path file = dir.path() / "missing" / "config.toml";
  const std::string error = error_of([&] { strata::write_text_file(file, "x = 1\n"); });
  CHECK(contains(error, (dir.path() / "missing" / "config.toml").string()));
  CHECK(contains(error, "No such file or directory"));
  CHECK_FALSE(fs::exists(dir.path() / "missing"));
}

TEST_CASE("a write that runs out of space keeps the old file and leaves no temporary") {
  TempDir dir;
  const fs::path file = dir.path() / "summary.json";
  strata::write_text_file(file, "old\n");
  std::string error;
  {
    FileSizeLimit limit(4096);  // EFBIG past 4 KiB, as ENOSPC on a full disk
    error = error_of([&] { strata::write_text_file(file, std::string(10000, 'x')); });
  }
  CHECK(contains(error, file.string()));
  CHECK(contains(error, "File too large"));
  CHECK(read(file) == "old\n");
  CHECK(temporaries(dir.path()).empty());
  // Nor is a new file left empty in place.
  const std::string fresh = error_of([&] {
    FileSizeLimit limit(0);
    strata::write_text_file(dir.path() / "config.toml", "x = 1\n");
  });
  CHECK(contains(fresh, "File too large"));
  CHECK_FALSE(fs::exists(dir.path() / "config.toml"));
  CHECK(temporaries(dir.path()).empty());
}

TEST_CASE("whole files are never written through a planted link, and a leftover temporary blocks nothing") {
  TempDir dir;
  const fs::path victim = dir.write("victim", "precious\n");
  const fs::path out = dir.path() / "out";
  fs::create_directories(out);
  // The old fixed temporary names, and the final name itself, planted as links to the victim.
  for (const char* name : {"config.toml.tmp", ".config.toml.tmp", "summary.json.tmp", "summary.json"})
    fs::create_symlink(victim, out / name);
  strata::write_text_file(out / "config.toml", "x = 1\n");
  strata::write_text_file(out / "summary.json", "{}\n");  // replaces the link, not its target
  CHECK(read(victim) == "precious\n");
  CHECK(read(out / "config.toml") == "x = 1\n");
  CHECK_FALSE(fs::is_symlink(out / "summary.json"));
  CHECK(read(out / "summary.json") == "{}\n");
  CHECK(fs::is_symlink(out / "config.toml.tmp"));  // left as they were
  // A temporary file of a killed writer stays where it is; the next write takes a fresh name.
  std::ofstream(out / ".config.toml.0000000000000000.tmp") << "partial";
  strata::write_text_file(out / "config.toml", "x = 2\n");
  CHECK(read(out / "config.toml") == "x = 2\n");
  std::vector<std::string> files;  // the temporaries that are not the planted links
  for (const auto& name : temporaries(out))
    if (!fs::is_symlink(out / name)) files.push_back(name);
  CHECK(files == std::vector<std::string>{".config.toml.0000000000000000.tmp"});
  // A name too long for a temporary beside it is cut, not refused.
  const std::string longest(255, 'n');
  strata::write_text_file(out / longest, "long\n");
  CHECK(read(out / longest) == "long\n");
}

TEST_CASE("StreamedFile refuses to write through a link") {
  TempDir dir;
  const fs::path victim = dir.write("victim", "precious\n");
  fs::create_symlink(victim, dir.path() / "output.log");
  strata::StreamedFile file;
  const std::string error = error_of([&] { file.open(dir.path() / "output.log", /*exclusive=*/false, "the log"); });
  CHECK(contains(error, "the log " + (dir.path() / "output.log").string()));
  CHECK(contains(error, "symbolic link"));
  strata::StreamedFile exclusive;
  CHECK_FALSE(exclusive.open(dir.path() / "output.log", /*exclusive=*/true));
  CHECK(errno == EEXIST);
  CHECK(read(victim) == "precious\n");
}

TEST_CASE("StreamedFile names a full device and the reason") {
  if (!fs::exists("/dev/full")) return;  // not on this system: nothing to write to
  strata::StreamedFile file;
  REQUIRE(file.open("/dev/full", /*exclusive=*/false, "the log"));
  const std::string error = error_of([&] { file.append("line\n", 5); });
  CHECK(contains(error, "the log /dev/full"));
  CHECK(contains(error, "No space left on device"));
}

TEST_CASE("StreamedFile keeps only complete appends") {
  TempDir dir;
  const fs::path path = dir.path() / "output.log";
  strata::StreamedFile file;
  REQUIRE(file.open(path, /*exclusive=*/false));
  const std::string line(60, 'a');
  std::string error;
  {
    FileSizeLimit limit(100);
    file.append(line.data(), line.size());
    error = error_of([&] { file.append(line.data(), line.size()); });  // 40 of 60 bytes would fit
  }
  CHECK(contains(error, path.string()));
  CHECK(contains(error, "File too large"));
  CHECK(file.size() == 60);
  CHECK(fs::file_size(path) == 60);
  file.append("b\n", 2);  // appends go on after the last complete one
  CHECK(read(path) == line + "b\n");
  strata::StreamedFile again;
  CHECK_FALSE(again.open(path, /*exclusive=*/true));
}

TEST_CASE("make_run_directory claims an explicit --out for one run") {
  TempDir dir;
  const fs::path out = dir.path() / "run";
  CHECK(strata::make_run_directory(out, "", "x") == out);
  const std::string marker = read(out / strata::kRunMarkerFile);
  CHECK(contains(marker, "claim " + strata::run_claim() + "\n"));
  CHECK(contains(marker, "pid "));
  // The same claim (strata's launcher hands its claim to its rank 0) takes it again.
  CHECK(strata::make_run_directory(out, "", "x") == out);

  // Another run's claim: refused, exit 2; a resumed run continues there.
  std::ofstream(out / strata::kRunMarkerFile, std::ios::trunc) << "claim other\npid 42\nhost h\nstarted t\n";
  try {
    strata::make_run_directory(out, "", "x");
    FAIL("a directory claimed by another run was taken");
  } catch (const strata::UsageError& e) {
    CHECK(contains(e.what(), "run directory " + out.string() + " already holds a run"));
    CHECK(contains(e.what(), "pid 42"));
    CHECK(e.exit_code() == 2);
  }
  CHECK(strata::make_run_directory(out, "", "x", RunDirUse::kContinue) == out);
  CHECK(contains(read(out / strata::kRunMarkerFile), "claim other\n"));

  // kShare only creates the directory.
  const fs::path shared = dir.path() / "shared";
  CHECK(strata::make_run_directory(shared, "", "x", RunDirUse::kShare) == shared);
  CHECK(fs::is_directory(shared));
  CHECK_FALSE(fs::exists(shared / strata::kRunMarkerFile));
}

TEST_CASE("make_run_directory refuses the outputs of a run from before markers") {
  TempDir dir;
  const fs::path old = dir.path() / "old";
  fs::create_directories(old);
  std::ofstream(old / "summary.json") << "{}\n";
  CHECK_THROWS_AS(strata::make_run_directory(old, "", "x"), strata::UsageError);
  CHECK_FALSE(fs::exists(old / strata::kRunMarkerFile));
  CHECK(strata::make_run_directory(old, "", "x", RunDirUse::kContinue) == old);
  CHECK(fs::exists(old / strata::kRunMarkerFile));
  // An empty directory, or one with other files (a comparison's output.log), is free.
  const fs::path logged = dir.path() / "logged";
  fs::create_directories(logged);
  std::ofstream(logged / "output.log") << "starting\n";
  CHECK(strata::make_run_directory(logged, "", "x") == logged);
}

TEST_CASE("make_run_directory never reuses an automatic directory") {
  TempDir dir;
  const fs::path taken = dir.path() / "exp" / strata::utc_time("%Y%m%dT%H%M%SZ");
  fs::create_directories(taken);
  const fs::path a = strata::make_run_directory("", dir.path().string(), "exp");
  const fs::path b = strata::make_run_directory("", dir.path().string(), "exp");
  CHECK(a != taken);
  CHECK(b != taken);
  CHECK(a != b);
  for (const auto& made : {a, b}) {
    CHECK(made.parent_path() == dir.path() / "exp");
    CHECK(fs::exists(made / strata::kRunMarkerFile));
  }
  CHECK_FALSE(fs::exists(taken / strata::kRunMarkerFile));
}

TEST_CASE("wrap_text breaks at spaces within the width, indents what follows, keeps a long word whole") {
  CHECK(strata::wrap_text("short enough", 80, 4) == "short enough");
  CHECK(strata::wrap_text("one two three four five six", 0, 4) == "one two three four five six");  // a pipe: as is
  CHECK(strata::wrap_text("aaaa bbbb cccc dddd eeee ffff", 20, 2) == "aaaa bbbb cccc dddd\n  eeee ffff");
  // Printed after 10 columns of its own line: the first line holds less.
  CHECK(strata::wrap_text("aaaa bbbb cccc dddd eeee ffff", 30, 12, 12) ==
        "aaaa bbbb cccc\n            dddd eeee ffff");
  CHECK(strata::wrap_text("aaaa bbbb cccc dddd", 20, 12) == "aaaa bbbb cccc dddd");  // no room to wrap into
  CHECK(strata::wrap_text("a /a/very/long/path/that/does/not/fit b", 20, 0) == "a\n/a/very/long/path/that/does/not/fit\nb");
}

// A run made in a fork of strata check or compare (launch/child.cpp) is a run of its own: its claim
// on a run directory is not its parent's, as a process started afresh would not share it.
TEST_CASE("a fork of this process draws a run claim of its own") {
  const std::string parent = strata::run_claim();
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const std::string child = strata::run_claim();
    [[maybe_unused]] auto n = ::write(fds[1], child.data(), child.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string child;
  char buffer[256];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) child.append(buffer, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(!child.empty());
  CHECK(child != parent);
  CHECK(strata::run_claim() == parent);  // the parent's own stays
  CHECK(child.find("-" + std::to_string(pid)) != std::string::npos);  // the fork's pid in it
}
