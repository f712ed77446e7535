// HAL_ISA_CLONES: a function compiled once per x86-64 ISA level (AVX-512F,
// AVX2, baseline) and picked when the library loads by what the CPU reports
// (GCC/Clang target_clones: an ifunc). For hot loops that the compiler
// vectorises: the body is the same C++, each clone uses its ISA's vectors.
// GCC also flattens the clone, so helpers (lambdas, inline conversions) are
// compiled for the clone's ISA rather than called at baseline; Clang refuses
// flatten on a multiversioned function, so its clones go without.
#ifndef HAL_UTIL_ISA_CLONES_HPP_
#define HAL_UTIL_ISA_CLONES_HPP_

// Sanitizer builds define HAL_NO_ISA_CLONES (the resolvers run before the
// sanitizer runtime starts): one baseline build of each function.
#if defined(HAL_NO_ISA_CLONES)
#define HAL_ISA_CLONES
#elif defined(__x86_64__) && defined(__clang__)
#define HAL_ISA_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#elif defined(__x86_64__)
#define HAL_ISA_CLONES __attribute__((target_clones("avx512f", "avx2", "default"), flatten))
#else
#define HAL_ISA_CLONES
#endif

#endif  // HAL_UTIL_ISA_CLONES_HPP_
