// <immintrin.h> for files that use AVX-512 intrinsics under -Werror.
//
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized reports as a read of an uninitialised value once
// inlined (GCC bug 105593, fixed in 12.3 and 13). The warning fires where
// the intrinsic is inlined, so it stays off for the rest of the including
// file: include this last among the headers, in .cpp files only.
#ifndef HAL_UTIL_X86_INTRINSICS_HPP_
#define HAL_UTIL_X86_INTRINSICS_HPP_

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <cpuid.h>
#include <immintrin.h>
#endif

#endif  // HAL_UTIL_X86_INTRINSICS_HPP_
