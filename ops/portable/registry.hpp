// The portable implementations per op kind; each family file adds its own.
#pragma once

#include "hal_ops/implementation.hpp"

#include <array>
#include <vector>

namespace hal::ops::portable {

using ImplementationTable = std::array<std::vector<const Implementation*>, HAL_OP_KIND_COUNT>;

void add_matmul(ImplementationTable& table);         // matmul.cpp
void add_normalization(ImplementationTable& table);  // normalization.cpp
void add_elementwise(ImplementationTable& table);    // elementwise.cpp
void add_training(ImplementationTable& table);       // training.cpp
void add_attention(ImplementationTable& table);      // attention.cpp
void add_convolution(ImplementationTable& table);    // convolution.cpp
void add_pooling(ImplementationTable& table);        // pooling.cpp
void add_channel_norm(ImplementationTable& table);   // channel_norm.cpp
void add_math(ImplementationTable& table);           // math.cpp
void add_indexing(ImplementationTable& table);       // indexing.cpp
void add_paged(ImplementationTable& table);          // paged.cpp
void add_lowp(ImplementationTable& table);           // lowp.cpp

}  // namespace hal::ops::portable
