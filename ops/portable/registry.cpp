#include "registry.hpp"

namespace hal::ops {

std::span<const Implementation* const> implementations(hal_op_kind_t kind) {
  static const portable::ImplementationTable table = [] {
    portable::ImplementationTable built;
    portable::add_matmul(built);
    portable::add_normalization(built);
    portable::add_elementwise(built);
    portable::add_training(built);
    portable::add_attention(built);
    portable::add_convolution(built);
    portable::add_pooling(built);
    portable::add_channel_norm(built);
    portable::add_math(built);
    portable::add_indexing(built);
    portable::add_paged(built);
    portable::add_lowp(built);
    return built;
  }();
  const auto index = static_cast<uint32_t>(kind);
  if (index >= table.size()) return {};
  return table[index];
}

}  // namespace hal::ops
