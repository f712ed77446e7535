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
#include "nvrtc.hpp"

using namespace cache_test;
using hal::util::CacheUse;

namespace {

constexpr char kSource[] =
    "kernel void scale(global float* x, float by, unsigned n) {\n"
    "  int i = global_id(0);\n"
    "  if (i < n) x[i] = x[i] * by;\n"
    "}\n";

std::unique_ptr<hal::cuda::Nvrtc> open_nvrtc() {
  std::string why;
  auto nvrtc = hal::cuda::Nvrtc::open(why);
  INFO(why);
  REQUIRE(nvrtc != nullptr);
  return nvrtc;
}

struct Compile {
  hal::cuda::CompiledDialect compiled;
  hal::cuda::CacheOutcome outcome;
};

Compile compile(const hal::cuda::Nvrtc& nvrtc, int arch, CollectedLog& log,
                const std::string& source = kSource) {
  Compile result;
  std::string message;
  const auto status = hal::cuda::compile_dialect_cached(nvrtc, source, arch, log.sink(),
                                                        result.compiled, result.outcome, message);
  INFO(message);
  REQUIRE(status == hal::cuda::DialectStatus::kOk);
  REQUIRE(result.compiled.translated.find("scale") != nullptr);
  return result;
}

// The entry of kSource for compute_|arch|, by the key the plugin derives.
std::string entry_path(const std::string& directory, const hal::cuda::Nvrtc& nvrtc, int arch) {
  hal::dialect::TranslatedModule translated;
  hal::dialect::Diagnostic diagnostic;
  REQUIRE(hal::dialect::translate(kSource, hal::dialect::Backend::kCuda, translated, diagnostic));
  return objects_dir(directory) + "/cuda-" + hal::cuda::dialect_cache_key(nvrtc, translated, arch) +
         ".ptx";
}

}  // namespace

TEST_CASE("a second compile of the same source is a hit: NVRTC is not called", "[cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  const auto nvrtc = open_nvrtc();
  CollectedLog log;
  const size_t before = nvrtc->compile_count();
  const Compile first = compile(*nvrtc, 90, log);
  CHECK(first.outcome.use == CacheUse::kStored);
  CHECK(nvrtc->compile_count() == before + 1);
  const std::string entry = entry_path(directory, *nvrtc, 90);
  CHECK(only_entry(objects_dir(directory), ".ptx") ==
        entry.substr(objects_dir(directory).size() + 1));
  CHECK(slurp(entry) == first.compiled.ptx);
  CHECK(slurp(record_path(entry, ".ptx")) == record_for(entry, first.compiled.ptx));
  CHECK(first.compiled.ptx.find(".target sm_90") != std::string::npos);

  const Compile second = compile(*nvrtc, 90, log);
  CHECK(second.outcome.use == CacheUse::kHit);
  CHECK(nvrtc->compile_count() == before + 1);
  CHECK(second.compiled.ptx == first.compiled.ptx);
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
  CHECK(compile(*nvrtc, 90, log).outcome.use == CacheUse::kStored);
  const Compile older = compile(*nvrtc, 75, log);
  CHECK(older.outcome.use == CacheUse::kStored);
  CHECK(older.compiled.ptx.find(".target sm_75") != std::string::npos);
  CHECK(nvrtc->compile_count() == before + 2);
  CHECK(compile(*nvrtc, 75, log).outcome.use == CacheUse::kHit);
  std::string other_source = kSource;
  other_source.replace(other_source.find("x[i] * by"), 9, "x[i] + by");
  CHECK(compile(*nvrtc, 90, log, other_source).outcome.use == CacheUse::kStored);
  CHECK(nvrtc->compile_count() == before + 3);

  // The same headers by another path: another -I option, so another entry.
  const std::string include_link = scratch.path + "/include";
  REQUIRE(!nvrtc->include_dir().empty());
  REQUIRE(symlink(nvrtc->include_dir().c_str(), include_link.c_str()) == 0);
  EnvOverride include_path("HAL_CUDA_INCLUDE_PATH", include_link.c_str());
  const auto relinked = open_nvrtc();
  REQUIRE(relinked->include_dir() == include_link);
  CHECK(relinked->options(90) != nvrtc->options(90));
  const size_t relinked_before = relinked->compile_count();
  CHECK(compile(*relinked, 90, log).outcome.use == CacheUse::kStored);
  CHECK(relinked->compile_count() == relinked_before + 1);
  CHECK(compile(*relinked, 90, log).outcome.use == CacheUse::kHit);
  CHECK(listing(objects_dir(directory)).size() == 2 * 4);
}

TEST_CASE("seeded damage and planted entries are rebuilt; every cached entry is checked as PTX",
          "[cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  const auto nvrtc = open_nvrtc();
  CollectedLog log;
  const std::string good = compile(*nvrtc, 90, log).compiled.ptx;
  const std::string entry = entry_path(directory, *nvrtc, 90);
  const std::string record = record_path(entry, ".ptx");

  std::mt19937 random(1303);
  for (int round = 0; round < 12; ++round) {
    const std::string damage = damage_entry(random, entry, record);
    CAPTURE(round, damage);
    log.clear();
    const size_t before = nvrtc->compile_count();
    const Compile rebuilt = compile(*nvrtc, 90, log);
    CHECK(rebuilt.outcome.use == CacheUse::kStored);
    CHECK(nvrtc->compile_count() == before + 1);
    CHECK(log.mentions("the kernel cache entry " + entry + " is rebuilt: "));
    CHECK(rebuilt.compiled.ptx == good);
    CHECK(slurp(entry) == good);
  }

  // Consistent plants (an object and its matching record) the cache's hash
  // accepts: only the PTX check keeps them out.
  const std::string older = compile(*nvrtc, 75, log).compiled.ptx;
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
    const Compile rebuilt = compile(*nvrtc, 90, log);
    CHECK(nvrtc->compile_count() == before + 1);
    CHECK(log.mentions(plant.phrase));
    CHECK(rebuilt.compiled.ptx == good);
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
  const Compile first = compile(*nvrtc, 90, log);
  CHECK(first.outcome.use == CacheUse::kNoCache);
  CHECK(log.mentions("the kernel cache is not used ('" + shared +
                     "' has mode 0777: group or others may write to it); the cuda plugin "
                     "compiles HAL dialect modules at every load"));
  CHECK(compile(*nvrtc, 90, log).outcome.use == CacheUse::kNoCache);
  CHECK(nvrtc->compile_count() == before + 2);
  CHECK(listing(shared).empty());
}
