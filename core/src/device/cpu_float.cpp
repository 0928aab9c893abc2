#include "device/cpu_float.hpp"

#include <ATen/Context.h>
#include <ATen/Parallel.h>

namespace strata {

bool flush_denormals(bool on) {
  if (!at::globalContext().setFlushDenormal(on)) return false;
  // The pool's threads keep the state they were created with: each runs one index of this range
  // (grain 1, one index per thread) and sets its own.
  const auto threads = static_cast<std::int64_t>(at::get_num_threads());
  at::parallel_for(0, threads, 1, [on](std::int64_t, std::int64_t) { at::globalContext().setFlushDenormal(on); });
  return true;
}

}  // namespace strata
