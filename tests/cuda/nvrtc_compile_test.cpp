// The cuda plugin's compile path without a GPU: every kernel of the
// conformance dialect file translated to CUDA C++ and compiled to PTX by
// NVRTC through the plugin's own compile_dialect, and the two ways it fails.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>

#include "image.hpp"
#include "nvrtc.hpp"
#include "nvrtc_test_support.hpp"
#include "sources.hpp"

namespace {

using nvrtc_test::open_nvrtc;
using nvrtc_test::ptx;

std::string read_file(const char* path) {
  std::ifstream file(path, std::ios::binary);
  REQUIRE(file);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// The .entry names of a PTX text, found independently of the plugin.
std::set<std::string> ptx_entries(const std::string& ptx) {
  std::set<std::string> names;
  const std::regex entry(R"(\.entry\s+([A-Za-z_][A-Za-z0-9_]*)\s*\()");
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), entry); it != std::sregex_iterator();
       ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

}  // namespace

TEST_CASE("every conformance dialect kernel compiles to PTX with NVRTC") {
  const auto nvrtc = open_nvrtc();
  // The oldest architecture NVRTC 13 offers, a common one, and the newest.
  const int arch = GENERATE(75, 90, 120);
  INFO("compute_" << arch);
  REQUIRE(nvrtc->pick_arch(arch / 10, arch % 10) == arch);
  const std::string source = read_file(HAL_TEST_DIALECT_KERNELS);
  // An independent count of the kernels: every `kernel` keyword at a line start.
  const std::regex kernel_keyword(R"((^|\n)kernel\s)");
  const auto declared = static_cast<size_t>(std::distance(
      std::sregex_iterator(source.begin(), source.end(), kernel_keyword), std::sregex_iterator()));
  // The conformance set has 24 kernels today (23 plus f32_to_half); a set that
  // shrank below that would make this test vacuous.
  REQUIRE(declared >= 24);

  hal::cuda::CompiledDialect compiled;
  std::string message;
  const auto status = hal::cuda::compile_dialect(*nvrtc, source, ptx(arch), compiled, message);
  INFO(message);
  REQUIRE(status == hal::cuda::DialectStatus::kOk);
  CHECK(compiled.translated.kernels.size() == declared);
  CHECK(compiled.image.find(".target sm_" + std::to_string(arch)) != std::string::npos);
  const std::set<std::string> entries = ptx_entries(compiled.image);
  CHECK(entries.size() == declared);
  for (const auto& kernel : compiled.translated.kernels) {
    INFO(kernel.entry);
    CHECK(entries.count(kernel.entry) == 1);  // extern "C": the name is not mangled
  }
}

TEST_CASE("the architecture is the highest NVRTC offers at or below the device's") {
  const auto nvrtc = open_nvrtc();
  CHECK(nvrtc->pick_arch(8, 6) == 86);
  CHECK(nvrtc->pick_arch(9, 0) == 90);
  CHECK(nvrtc->pick_arch(7, 0) == 0);  // below NVRTC 13's oldest (75): nothing to offer
  CHECK(nvrtc->pick_arch(99, 9) >= 120);
}

TEST_CASE("the target is a cubin for the device's own architecture when NVRTC offers it") {
  const auto nvrtc = open_nvrtc();
  REQUIRE(nvrtc->emits_cubin());
  const hal::cuda::CompileTarget h100 = nvrtc->pick_target(9, 0);
  CHECK(h100.cubin);
  CHECK(h100.arch == 90);
  CHECK(h100.describe() == "sm_90 cubin");
  CHECK(nvrtc->options(h100).front() == "--gpu-architecture=sm_90");
  // 8.5 is no architecture NVRTC offers: PTX for the best below, with why.
  const hal::cuda::CompileTarget odd = nvrtc->pick_target(8, 5);
  CHECK_FALSE(odd.cubin);
  CHECK(odd.arch == 80);
  CHECK(odd.why_ptx.find("does not offer sm_85") != std::string::npos);
  CHECK(nvrtc->options(odd).front() == "--gpu-architecture=compute_80");

  hal::cuda::CompiledDialect compiled;
  std::string message;
  const std::string source = read_file(HAL_TEST_DIALECT_KERNELS);
  REQUIRE(hal::cuda::compile_dialect(*nvrtc, source, h100, compiled, message) ==
          hal::cuda::DialectStatus::kOk);
  std::string why;
  CHECK(hal::cuda::check_binary_image(compiled.image.data(), compiled.image.size(), why));
  CHECK(hal::cuda::cubin_arch(compiled.image.data(), compiled.image.size()) == 90);
  // Every kernel is in the cubin under its unmangled name.
  for (const auto& kernel : compiled.translated.kernels) {
    INFO(kernel.entry);
    CHECK(compiled.image.find(std::string(1, '\0') + kernel.entry + std::string(1, '\0')) !=
          std::string::npos);
  }
}

TEST_CASE("a dialect error and a compiler error are told apart, with the source line") {
  const auto nvrtc = open_nvrtc();
  hal::cuda::CompiledDialect compiled;
  std::string message;
  SECTION("not the dialect") {
    CHECK(hal::cuda::compile_dialect(*nvrtc, "kernel void k(struct s x) {}", ptx(90), compiled,
                                     message) == hal::cuda::DialectStatus::kInvalidSource);
    CHECK(message.find("the HAL dialect source is invalid") != std::string::npos);
  }
  SECTION("rejected by NVRTC") {
    const std::string source =
        "kernel void k(global float* out) {\n"
        "  out[0] = undeclared_name;\n"
        "}\n";
    CHECK(hal::cuda::compile_dialect(*nvrtc, source, ptx(90), compiled, message) ==
          hal::cuda::DialectStatus::kCompilerRejected);
    CHECK(message.find("NVRTC") != std::string::npos);
    CHECK(message.find("undeclared_name") != std::string::npos);
    CHECK(message.find("(2)") != std::string::npos);  // the dialect source's line 2
  }
}

TEST_CASE("ptxas -v figures are read per entry", "[ptxas]") {
  // As NVRTC 13.0 writes them with --ptxas-options=-v (two entries, one spilling).
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'e' for 'sm_90'\n"
      "ptxas info    : Function properties for e\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 4 registers, used 0 barriers\n"
      "ptxas info    : Compile time = 42.709 ms\n"
      "ptxas info    : Compiling entry function 'attention_fwd' for 'sm_90'\n"
      "ptxas info    : Function properties for attention_fwd\n"
      "ptxas         .     2048 bytes stack frame, 1932 bytes spill stores, 2100 bytes spill "
      "loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 256 bytes smem, 400 bytes cmem[0]\n";
  const auto entries = hal::cuda::parse_ptxas_log(log);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].entry == "e");
  CHECK(entries[0].registers == 4);
  CHECK(entries[0].spill_store_bytes == 0);
  CHECK(entries[0].shared_bytes == 0);
  CHECK(entries[1].entry == "attention_fwd");
  CHECK(entries[1].registers == 255);
  CHECK(entries[1].stack_bytes == 2048);
  CHECK(entries[1].spill_store_bytes == 1932);
  CHECK(entries[1].spill_load_bytes == 2100);
  CHECK(entries[1].shared_bytes == 256);
  CHECK(hal::cuda::parse_ptxas_log("").empty());
}

// The register and local-memory report of every portable kernel on an H100
// (sm_90), from NVRTC's own ptxas -v: a table on stdout (ctest -V, or the CI
// log): registers, the stack frame (local memory per thread: local arrays
// and spilled registers), the spill stores and loads, and the static shared
// memory. It is also the compile test of the portable families (every
// kernel the dialect declares is compiled: ptxas names it). A device
// function ptxas keeps out of line (libdevice's slow paths) is listed under
// its caller's family with "(called)": its stack frame is local memory too.
// HAL_PTXAS_MAX_LOCAL_BYTES=<n> fails the test for a kernel whose stack
// frame plus spill traffic exceeds n bytes (unset: report only: the
// portable attention's row kernels keep 2-4 KiB per thread in local memory
// today; the attention _tiled kernels none).
TEST_CASE("registers and local memory of every portable kernel (ptxas -v, sm_90)", "[ptxas]") {
  const auto nvrtc = open_nvrtc();
  REQUIRE(nvrtc->emits_cubin());
  const hal::cuda::CompileTarget target = nvrtc->pick_target(9, 0);
  REQUIRE(target.cubin);
  const char* limit_text = std::getenv("HAL_PTXAS_MAX_LOCAL_BYTES");
  const long limit = limit_text != nullptr ? std::strtol(limit_text, nullptr, 10) : -1;
  std::printf("%-16s %-44s %5s %7s %8s %8s %7s\n", "family", "kernel", "regs", "stack", "spill-st",
              "spill-ld", "smem");
  size_t kernels = 0, spilling = 0, local = 0, shared = 0;
  for (const std::string_view family : hal::ops::portable::portable_families()) {
    INFO(family);
    hal::dialect::TranslatedModule translated;
    hal::dialect::Diagnostic diagnostic;
    REQUIRE(hal::dialect::translate(hal::ops::portable::portable_source(family),
                                    hal::dialect::Backend::kCuda, translated, diagnostic));
    std::string image, log;
    REQUIRE(nvrtc->compile(translated.text, "portable.cu", target, image, log, true));
    const auto entries = hal::cuda::parse_ptxas_log(log);
    CHECK(std::count_if(entries.begin(), entries.end(), [](const auto& e) {
            return e.is_kernel;
          }) == static_cast<long>(translated.kernels.size()));
    for (const auto& kernel : translated.kernels) {
      INFO(kernel.entry << "\n" << log);
      const auto found = std::find_if(entries.begin(), entries.end(),
                                      [&](const auto& e) { return e.entry == kernel.entry; });
      REQUIRE(found != entries.end());
      CHECK(found->is_kernel);
      CHECK(found->registers > 0);
      CHECK(found->registers <= 255);  // sm_90's limit per thread
      // What the dialect records is what ptxas allocates.
      CHECK(found->shared_bytes == static_cast<long>(kernel.static_shared_bytes));
      const long spills = found->spill_store_bytes + found->spill_load_bytes;
      ++kernels;
      if (spills > 0) ++spilling;
      if (found->stack_bytes > 0) ++local;
      if (found->shared_bytes > 0) ++shared;
      std::printf("%-16.*s %-44s %5d %7ld %8ld %8ld %7ld%s%s\n", static_cast<int>(family.size()),
                  family.data(), kernel.entry.c_str(), found->registers, found->stack_bytes,
                  found->spill_store_bytes, found->spill_load_bytes, found->shared_bytes,
                  found->stack_bytes > 0 ? "  LOCAL" : "", spills > 0 ? "  SPILLS" : "");
      if (limit >= 0) CHECK(found->stack_bytes + spills <= limit);
      // The GPU matmul and attention kernels (SPEC.md §17.6.1, §17.6.5:
      // matmul_tiled, grouped_matmul_tiled, attention_*_tiled) keep everything in
      // registers and shared memory: a change that brings back a stack frame
      // or spills fails here, not on the first GPU.
      if (kernel.entry.ends_with("_tiled")) {
        CHECK(found->stack_bytes == 0);
        CHECK(spills == 0);
        CHECK(found->shared_bytes > 0);
      }
    }
    for (const auto& callee : entries) {
      if (callee.is_kernel) continue;
      std::printf("%-16.*s %-44s %5s %7ld %8ld %8ld %7s\n", static_cast<int>(family.size()),
                  family.data(), (callee.entry + " (called)").c_str(), "-", callee.stack_bytes,
                  callee.spill_store_bytes, callee.spill_load_bytes, "-");
    }
  }
  std::printf(
      "%zu portable kernels: %zu keep a stack frame in local memory, %zu spill registers, %zu use "
      "shared memory (NVRTC %s, sm_90)\n",
      kernels, local, spilling, shared, nvrtc->version().c_str());
  CHECK(kernels >= 37);
}
