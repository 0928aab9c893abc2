#pragma once
// Turning exceptions into one readable paragraph.

#include <exception>
#include <string>

namespace strata::detail {

/// what() of an exception without LibTorch's "Exception raised from ..." trailer and C++ frames.
std::string exception_text(const std::exception& e);
/// The paragraph the CLI prints for any exception: "error: <where>: <message>\n  fix: <fix>".
std::string format_error(const std::exception& e);
/// Exit code for an exception (strata::Error knows its own; anything else is 1).
int exit_code_of(const std::exception& e);

}  // namespace strata::detail
