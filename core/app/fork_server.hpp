#pragma once
// The test suite's fork server: one `strata` process, loaded once, that runs the command lines
// tests/integration/fork_client.cpp sends it, each in a fork of itself. A fresh process spends
// about 0.5 s of CPU in LibTorch alone (0.33 s filling its operator registry at load, 0.17 s in its
// static destructors at exit), and the integration tests start strata over a thousand times; a
// fork starts in a millisecond and ends, as strata's own forked runs do (launch/child.cpp), without
// the image's static destructors. Started with STRATA_FORK_SERVER=SOCKET and no arguments
// (tests/integration/strata_test.py does, once per test script).
//
// A command runs in the fork as it would in a process of its own: the client's stdin, stdout,
// stderr and working directory, its environment (nothing of the server's), its argv, its own
// process group; its exit status goes back to the client, which exits with it. Where a fork cannot
// be that process, the server says so and the client starts the program itself: a variable that
// LibTorch, OpenMP, CUDA or the C library read while the program loads differs from the server's
// (OMP_NUM_THREADS, LD_PRELOAD, CUDA_VISIBLE_DEVICES, ...), the client asks for another binary, or
// this process may not fork in its image (LibTorch's CUDA library is loaded). A client that goes
// away (killed at a test's timeout) takes its command down with it. Only this user may connect
// (SO_PEERCRED), through a socket that the caller places in a directory of its own.
//
// What a fork does not exercise is the program's own start and its static destructors at exit: the
// tests about those (integration.link, install, the launchers') start strata themselves, as does
// every command with a start-up variable of its own, and every command where CUDA is loaded.

namespace strata::app {

/// The command line as main() runs it: argv in, exit code out.
using CommandRunner = int (*)(int argc, char** argv);

/// Serves `socket_path` until this process is signalled or its standard input reaches its end (the
/// starter holds a pipe to it); returns main's exit code (2 with a message when it cannot serve).
/// Each command runs through `runner` in a fork.
int serve_forks(const char* socket_path, CommandRunner runner);

}  // namespace strata::app
