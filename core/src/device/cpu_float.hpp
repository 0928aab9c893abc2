#pragma once
// The CPU's treatment of denormal floats ([train] flush_denormals).

namespace strata {

/// FTZ and DAZ (denormal results flushed to zero, denormal inputs read as zero) on, or off, on the
/// calling thread and on every thread of LibTorch's intra-op pool; threads created afterwards by
/// any of them (the data loader's, a pool grown later) inherit it. Returns false where the CPU
/// has no such mode (nothing changed).
bool flush_denormals(bool on);

}  // namespace strata
