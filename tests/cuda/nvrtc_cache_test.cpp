// The cuda plugin's dialect compiles through the shared kernel cache, with the
// real NVRTC and without a GPU: a second compile of the same source is a hit
// (NVRTC's compile count does not move), another architecture or other
// options is a miss, damaged or planted entries are rebuilt (the PTX check
// runs on every cached entry), and an unsafe directory turns the cache off
// with a message that names it.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <random>
#include <string>

#include "cache_test_support.hpp"
#include "dialect_cache.hpp"
#include "image.hpp"
#include "nvrtc.hpp"
#include "nvrtc_test_support.hpp"

using namespace cache_test;
using hal::util::CacheUse;

namespace {

using nvrtc_test::cubin;
using nvrtc_test::open_nvrtc;
using nvrtc_test::ptx;

constexpr char kSource[] =
    "kernel void scale(global float* x, float by, unsigned n) {\n"
    "  int i = global_id(0);\n"
    "  if (i < n) x[i] = x[i] * by;\n"
    "}\n";

struct Compile {
  hal::cuda::CompiledDialect compiled;
  hal::cuda::CacheOutcome outcome;
};

Compile compile(const hal::cuda::Nvrtc& nvrtc, const hal::cuda::CompileTarget& target,
                CollectedLog& log, const std::string& source = kSource) {
  Compile result;
  std::string message;
  const auto status = hal::cuda::compile_dialect_cached(nvrtc, source, target, log.sink(),
                                                        result.compiled, result.outcome, message);
  INFO(message);
  REQUIRE(status == hal::cuda::DialectStatus::kOk);
  REQUIRE(result.compiled.translated.find("scale") != nullptr);
  return result;
}

// The entry of kSource for |target|, by the key the plugin derives.
std::string entry_path(const std::string& directory, const hal::cuda::Nvrtc& nvrtc,
                       const hal::cuda::CompileTarget& target) {
  hal::dialect::TranslatedModule translated;
  hal::dialect::Diagnostic diagnostic;
  REQUIRE(hal::dialect::translate(kSource, hal::dialect::Backend::kCuda, translated, diagnostic));
  return objects_dir(directory) + "/cuda-" +
         hal::cuda::dialect_cache_key(nvrtc, translated, target) +
         (target.cubin ? ".cubin" : ".ptx");
}

}  // namespace

TEST_CASE("a second compile of the same source is a hit: NVRTC is not called", "[cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  const auto nvrtc = open_nvrtc();
  CollectedLog log;
  const size_t before = nvrtc->compile_count();
  const Compile first = compile(*nvrtc, ptx(90), log);
  CHECK(first.outcome.use == CacheUse::kStored);
  CHECK(nvrtc->compile_count() == before + 1);
  const std::string entry = entry_path(directory, *nvrtc, ptx(90));
  CHECK(only_entry(objects_dir(directory), ".ptx") ==
        entry.substr(objects_dir(directory).size() + 1));
  CHECK(slurp(entry) == first.compiled.image);
  CHECK(slurp(record_path(entry, ".ptx")) == record_for(entry, first.compiled.image));
  CHECK(first.compiled.image.find(".target sm_90") != std::string::npos);

  const Compile second = compile(*nvrtc, ptx(90), log);
  CHECK(second.outcome.use == CacheUse::kHit);
  CHECK(nvrtc->compile_count() == before + 1);
  CHECK(second.compiled.image == first.compiled.image);
  CHECK(second.outcome.origin.find(entry) != std::string::npos);
  CHECK(log.mentions("'" + entry + "' is used: nothing is compiled"));
  // The kernel records come from the translation, not from the cache.
  CHECK(second.compiled.translated.find("scale")->arg_types ==
        first.compiled.translated.find("scale")->arg_types);
}

TEST_CASE("another architecture, other options or another source is a miss", "[cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  const auto nvrtc = open_nvrtc();
  CollectedLog log;
  const size_t before = nvrtc->compile_count();
  CHECK(compile(*nvrtc, ptx(90), log).outcome.use == CacheUse::kStored);
  const Compile older = compile(*nvrtc, ptx(75), log);
  CHECK(older.outcome.use == CacheUse::kStored);
  CHECK(older.compiled.image.find(".target sm_75") != std::string::npos);
  CHECK(nvrtc->compile_count() == before + 2);
  CHECK(compile(*nvrtc, ptx(75), log).outcome.use == CacheUse::kHit);
  std::string other_source = kSource;
  other_source.replace(other_source.find("x[i] * by"), 9, "x[i] + by");
  CHECK(compile(*nvrtc, ptx(90), log, other_source).outcome.use == CacheUse::kStored);
  CHECK(nvrtc->compile_count() == before + 3);

  // The same headers by another path: another -I option, so another entry.
  const std::string include_link = scratch.path + "/include";
  REQUIRE(!nvrtc->include_dir().empty());
  REQUIRE(symlink(nvrtc->include_dir().c_str(), include_link.c_str()) == 0);
  EnvOverride include_path("HAL_CUDA_INCLUDE_PATH", include_link.c_str());
  const auto relinked = open_nvrtc();
  REQUIRE(relinked->include_dir() == include_link);
  CHECK(relinked->options(ptx(90)) != nvrtc->options(ptx(90)));
  const size_t relinked_before = relinked->compile_count();
  CHECK(compile(*relinked, ptx(90), log).outcome.use == CacheUse::kStored);
  CHECK(relinked->compile_count() == relinked_before + 1);
  CHECK(compile(*relinked, ptx(90), log).outcome.use == CacheUse::kHit);
  CHECK(listing(objects_dir(directory)).size() == 2 * 4);
}

TEST_CASE("seeded damage and planted entries are rebuilt, every cached entry is checked as PTX",
          "[cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  const auto nvrtc = open_nvrtc();
  CollectedLog log;
  const std::string good = compile(*nvrtc, ptx(90), log).compiled.image;
  const std::string entry = entry_path(directory, *nvrtc, ptx(90));
  const std::string record = record_path(entry, ".ptx");

  std::mt19937 random(1303);
  for (int round = 0; round < 12; ++round) {
    const std::string damage = damage_entry(random, entry, record);
    CAPTURE(round, damage);
    log.clear();
    const size_t before = nvrtc->compile_count();
    const Compile rebuilt = compile(*nvrtc, ptx(90), log);
    CHECK(rebuilt.outcome.use == CacheUse::kStored);
    CHECK(nvrtc->compile_count() == before + 1);
    CHECK(log.mentions("the kernel cache entry " + entry + " is rebuilt: "));
    CHECK(rebuilt.compiled.image == good);
    CHECK(slurp(entry) == good);
  }

  // Consistent plants (an object and its matching record) the cache's hash
  // accepts: only the PTX check keeps them out.
  const std::string older = compile(*nvrtc, ptx(75), log).compiled.image;
  struct Plant {
    std::string bytes, phrase;
  };
  const Plant plants[] = {
      {older, "PTX for sm_75, not sm_90"},
      {good.substr(0, 64) + std::string(1, '\0') + good.substr(64), "a NUL byte at offset 64"},
      {".target sm_90\n" + good, "its first directive is not .version"},
      {"// only a comment\n", "no .version directive"},
  };
  for (const Plant& plant : plants) {
    CAPTURE(plant.phrase);
    write_file(entry, plant.bytes);
    write_file(record, record_for(entry, plant.bytes));
    log.clear();
    const size_t before = nvrtc->compile_count();
    const Compile rebuilt = compile(*nvrtc, ptx(90), log);
    CHECK(nvrtc->compile_count() == before + 1);
    CHECK(log.mentions(plant.phrase));
    CHECK(rebuilt.compiled.image == good);
  }
}

TEST_CASE("cubins are cached apart from PTX and checked for their architecture", "[cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  const auto nvrtc = open_nvrtc();
  REQUIRE(nvrtc->emits_cubin());
  CollectedLog log;
  const size_t before = nvrtc->compile_count();
  const Compile first = compile(*nvrtc, cubin(90), log);
  CHECK(first.outcome.use == CacheUse::kStored);
  const std::string entry = entry_path(directory, *nvrtc, cubin(90));
  CHECK(slurp(entry) == first.compiled.image);
  // An ELF for EM_CUDA whose e_flags name sm_90, read here independently.
  REQUIRE(first.compiled.image.size() > 64);
  CHECK(first.compiled.image.compare(0, 4,
                                     "\x7f"
                                     "ELF") == 0);
  CHECK(static_cast<unsigned char>(first.compiled.image[18]) == 190);  // e_machine, EM_CUDA
  CHECK(hal::cuda::cubin_arch(first.compiled.image.data(), first.compiled.image.size()) == 90);
  CHECK(compile(*nvrtc, cubin(90), log).outcome.use == CacheUse::kHit);
  // PTX for the same architecture is another entry.
  CHECK(compile(*nvrtc, ptx(90), log).outcome.use == CacheUse::kStored);
  CHECK(nvrtc->compile_count() == before + 2);

  const std::string record = record_path(entry, ".cubin");
  const std::string other = compile(*nvrtc, cubin(80), log).compiled.image;
  CHECK(hal::cuda::cubin_arch(other.data(), other.size()) == 80);
  const std::string text = compile(*nvrtc, ptx(90), log).compiled.image;
  struct Plant {
    std::string bytes, phrase;
  };
  const Plant plants[] = {
      {other, "a cubin for sm_80, not sm_90"},
      {text, "not a cubin: "},
      {first.compiled.image.substr(0, first.compiled.image.size() / 2), "not a cubin: "},
  };
  for (const Plant& plant : plants) {
    CAPTURE(plant.phrase);
    write_file(entry, plant.bytes);
    write_file(record, record_for(entry, plant.bytes));
    log.clear();
    const size_t compiles = nvrtc->compile_count();
    const Compile rebuilt = compile(*nvrtc, cubin(90), log);
    CHECK(nvrtc->compile_count() == compiles + 1);
    CHECK(log.mentions(plant.phrase));
    CHECK(rebuilt.compiled.image == first.compiled.image);
  }
}

TEST_CASE("an unsafe cache directory turns the cache off with a message naming it", "[cache]") {
  Scratch scratch;
  const std::string shared = scratch.path + "/shared";
  REQUIRE(mkdir(shared.c_str(), 0700) == 0);
  REQUIRE(chmod(shared.c_str(), 0777) == 0);
  EnvOverride cache_dir("HAL_CACHE_DIR", shared.c_str());
  const auto nvrtc = open_nvrtc();
  CollectedLog log;
  const size_t before = nvrtc->compile_count();
  const Compile first = compile(*nvrtc, ptx(90), log);
  CHECK(first.outcome.use == CacheUse::kNoCache);
  CHECK(log.mentions("the kernel cache is not used ('" + shared +
                     "' has mode 0777: group or others may write to it); the cuda plugin "
                     "compiles HAL dialect modules at every load"));
  CHECK(compile(*nvrtc, ptx(90), log).outcome.use == CacheUse::kNoCache);
  CHECK(nvrtc->compile_count() == before + 2);
  CHECK(listing(shared).empty());
}
