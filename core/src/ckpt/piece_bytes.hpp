#pragma once
// The bytes of a rank's checkpoint pieces, in order, for writing: host pieces are read where they
// are; device pieces reach the host through two pinned staging buffers, so that the copies into
// one (queued without blocking, one event per buffer) run while the other's bytes are checksummed
// and written. One wait per buffer instead of one synchronous copy through pageable memory per
// piece, and at most two buffers of host memory whatever the pieces' sizes.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "strata/sharded_state.hpp"

namespace strata::ckpt {

/// Bytes of each staging buffer.
inline constexpr std::int64_t kStageBytes = std::int64_t{32} << 20;

/// Calls visit(i, data, size) for consecutive spans of piece i's bytes (its elements, row-major),
/// pieces in order, at least once per piece (size 0 for an empty one); `data` is valid during the
/// call only. `stage_host`: stage host pieces too, through pageable buffers (tests of the staging
/// on a machine without a GPU).
void for_each_piece_span(const std::vector<TensorPiece>& pieces,
                         const std::function<void(std::size_t, const void*, std::size_t)>& visit,
                         std::int64_t stage_bytes = kStageBytes, bool stage_host = false);

}  // namespace strata::ckpt
