// The hip plugin's dialect compiles through the shared kernel cache, with the
// real hiprtc and without a GPU: a second compile of the same source is a hit
// (hiprtc's compile count does not move), another architecture or another
// source is a miss, damaged or planted entries are rebuilt (the code object
// check runs on every cached entry), and an unsafe directory turns the cache
// off with a message that names it.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <random>
#include <string>

#include "cache_test_support.hpp"
#include "dialect_cache.hpp"
#include "hiprtc.hpp"
#include "hiprtc_test_support.hpp"

using namespace cache_test;
using hal::util::CacheUse;

namespace {

using hiprtc_test::open_hiprtc;

constexpr char kSource[] =
    "kernel void scale(global float* x, float by, unsigned n) {\n"
    "  int i = global_id(0);\n"
    "  if (i < n) x[i] = x[i] * by;\n"
    "}\n";
// What an MI200 reports (gcnArchName), and a target without features.
constexpr char kMi200[] = "gfx90a:sramecc+:xnack-";
constexpr char kMi100[] = "gfx908";

struct Compile {
  hal::hip::CompiledDialect compiled;
  hal::hip::CacheOutcome outcome;
};

Compile compile(const hal::hip::Hiprtc& hiprtc, const std::string& arch, CollectedLog& log,
                const std::string& source = kSource) {
  Compile result;
  std::string message;
  const auto status = hal::hip::compile_dialect_cached(hiprtc, source, arch, log.sink(),
                                                       result.compiled, result.outcome, message);
  INFO(message);
  REQUIRE(status == hal::hip::DialectStatus::kOk);
  REQUIRE(result.compiled.translated.find("scale") != nullptr);
  return result;
}

std::string entry_path(const std::string& directory, const hal::hip::Hiprtc& hiprtc,
                       const std::string& arch) {
  hal::dialect::TranslatedModule translated;
  hal::dialect::Diagnostic diagnostic;
  REQUIRE(hal::dialect::translate(kSource, hal::dialect::Backend::kHip, translated, diagnostic));
  return objects_dir(directory) + "/hip-" + hal::hip::dialect_cache_key(hiprtc, translated, arch) +
         ".hsaco";
}

}  // namespace

TEST_CASE("hiprtc cache: a second compile of the same source is a hit, another arch a miss",
          "[cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  const auto hiprtc = open_hiprtc();
  CHECK(hiprtc->identity().find("hiprtc ") == 0);
  CollectedLog log;
  const size_t before = hiprtc->compile_count();
  const Compile first = compile(*hiprtc, kMi200, log);
  CHECK(first.outcome.use == CacheUse::kStored);
  CHECK(hiprtc->compile_count() == before + 1);
  const std::string entry = entry_path(directory, *hiprtc, kMi200);
  CHECK(only_entry(objects_dir(directory), ".hsaco") ==
        entry.substr(objects_dir(directory).size() + 1));
  CHECK(slurp(entry) == first.compiled.code);
  CHECK(slurp(record_path(entry, ".hsaco")) == record_for(entry, first.compiled.code));

  const Compile second = compile(*hiprtc, kMi200, log);
  CHECK(second.outcome.use == CacheUse::kHit);
  CHECK(hiprtc->compile_count() == before + 1);
  CHECK(second.compiled.code == first.compiled.code);
  CHECK(log.mentions("'" + entry + "' is used: nothing is compiled"));

  // Another architecture, the same one without its features, another source.
  CHECK(compile(*hiprtc, kMi100, log).outcome.use == CacheUse::kStored);
  CHECK(compile(*hiprtc, "gfx90a", log).outcome.use == CacheUse::kStored);
  std::string other_source = kSource;
  other_source.replace(other_source.find("x[i] * by"), 9, "x[i] + by");
  CHECK(compile(*hiprtc, kMi200, log, other_source).outcome.use == CacheUse::kStored);
  CHECK(hiprtc->compile_count() == before + 4);
  CHECK(compile(*hiprtc, kMi100, log).outcome.use == CacheUse::kHit);
  CHECK(hiprtc->compile_count() == before + 4);
  CHECK(listing(objects_dir(directory)).size() == 4 * 2);
}

TEST_CASE("hiprtc cache: seeded damage and planted entries are rebuilt, every entry is checked",
          "[cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  const auto hiprtc = open_hiprtc();
  CollectedLog log;
  const std::string good = compile(*hiprtc, kMi200, log).compiled.code;
  const std::string entry = entry_path(directory, *hiprtc, kMi200);
  const std::string record = record_path(entry, ".hsaco");

  std::mt19937 random(90210);
  for (int round = 0; round < 8; ++round) {
    const std::string damage = damage_entry(random, entry, record);
    CAPTURE(round, damage);
    log.clear();
    const size_t before = hiprtc->compile_count();
    const Compile rebuilt = compile(*hiprtc, kMi200, log);
    CHECK(rebuilt.outcome.use == CacheUse::kStored);
    CHECK(hiprtc->compile_count() == before + 1);
    CHECK(log.mentions("the kernel cache entry " + entry + " is rebuilt: "));
    CHECK(rebuilt.compiled.code == good);
    CHECK(slurp(entry) == good);
  }

  // Consistent plants (an object and its matching record): only the code
  // object check keeps them out.
  const std::string plants[] = {good.substr(0, good.size() - 1), "not a code object",
                                std::string("\x7f"
                                            "ELF\x02\x01\x01",
                                            7) +
                                    std::string(64, '\0')};
  for (const std::string& plant : plants) {
    CAPTURE(plant.size());
    write_file(entry, plant);
    write_file(record, record_for(entry, plant));
    log.clear();
    const size_t before = hiprtc->compile_count();
    const Compile rebuilt = compile(*hiprtc, kMi200, log);
    CHECK(hiprtc->compile_count() == before + 1);
    CHECK(log.mentions("not a code object: "));
    CHECK(rebuilt.compiled.code == good);
  }
}

TEST_CASE("hiprtc cache: an entry holding a code object for another architecture is rebuilt",
          "[cache]") {
  // The key names the architecture; the file under it is checked too. Each
  // plant is consistent (its record matches), a real code object of the same
  // source, only built for another target, or its header forged to one.
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  const auto hiprtc = open_hiprtc();
  CollectedLog log;
  const std::string good = compile(*hiprtc, kMi200, log).compiled.code;
  const std::string mi100 = compile(*hiprtc, kMi100, log).compiled.code;
  const std::string featureless = compile(*hiprtc, "gfx90a", log).compiled.code;
  std::string forged = good;
  forged[48] = 0x30;  // e_flags' low byte, EF_AMDGPU_MACH: gfx908's machine number
  const std::string entry = entry_path(directory, *hiprtc, kMi200);
  const std::string record = record_path(entry, ".hsaco");
  const std::pair<std::string, std::string> plants[] = {
      {mi100, "gfx908"}, {featureless, "gfx90a"}, {forged, "gfx908:sramecc+:xnack-"}};
  for (const auto& [plant, built_for] : plants) {
    CAPTURE(built_for);
    write_file(entry, plant);
    write_file(record, record_for(entry, plant));
    log.clear();
    const size_t before = hiprtc->compile_count();
    const Compile rebuilt = compile(*hiprtc, kMi200, log);
    CHECK(rebuilt.outcome.use == CacheUse::kStored);
    CHECK(hiprtc->compile_count() == before + 1);
    CHECK(log.mentions("the kernel cache entry " + entry + " is rebuilt: '" +
                       entry.substr(entry.rfind('/') + 1) + "': the code object is built for " +
                       built_for + ", not gfx90a:sramecc+:xnack-"));
    CHECK(rebuilt.compiled.code == good);
    CHECK(slurp(entry) == good);
  }
}

TEST_CASE("hiprtc cache: an unsafe cache directory turns the cache off with a message naming it",
          "[cache]") {
  Scratch scratch;
  const std::string group = scratch.path + "/group";
  REQUIRE(mkdir(group.c_str(), 0700) == 0);
  REQUIRE(chmod(group.c_str(), 0770) == 0);
  EnvOverride cache_dir("HAL_CACHE_DIR", group.c_str());
  const auto hiprtc = open_hiprtc();
  CollectedLog log;
  const size_t before = hiprtc->compile_count();
  CHECK(compile(*hiprtc, kMi200, log).outcome.use == CacheUse::kNoCache);
  CHECK(log.mentions("the kernel cache is not used ('" + group +
                     "' has mode 0770: group or others may write to it); the hip plugin "
                     "compiles HAL dialect modules at every load"));
  CHECK(compile(*hiprtc, kMi200, log).outcome.use == CacheUse::kNoCache);
  CHECK(hiprtc->compile_count() == before + 2);
  CHECK(listing(group).empty());
}
