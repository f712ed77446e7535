// The kernel cache every plugin shares (hal_util/kernel_cache.hpp,
// cached_build.hpp), without a compiler: a stand-in build counts its runs and
// makes images a stand-in check accepts. A second build is a hit; seeded
// damage, a link, a writable or foreign entry are rebuilt with a log line; a
// directory others control is refused; a failing build or store never leaves
// an entry.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "cache_test_support.hpp"
#include "hal_util/cached_build.hpp"
#include "hal_util/kernel_cache.hpp"

using namespace cache_test;
using hal::util::CacheUse;

namespace {

constexpr char kMagic[] = "IMG1";

// A build that makes "IMG1" + |payload| and counts its runs.
struct CountingBuild {
  std::string payload = "payload";
  int runs = 0;
  bool fails = false;
  hal::util::CacheBuilder builder() {
    return [this](std::vector<unsigned char>& image) {
      ++runs;
      if (fails) return false;
      const std::string bytes = kMagic + payload;
      image.assign(bytes.begin(), bytes.end());
      return true;
    };
  }
};

bool starts_with_magic(const std::vector<unsigned char>& image, std::string& why) {
  if (image.size() < 4 || std::string(image.begin(), image.begin() + 4) != kMagic) {
    why = "not an IMG1 image";
    return false;
  }
  return true;
}

hal::util::CachedBuildRequest request_for(const std::string& key) {
  hal::util::CachedBuildRequest request;
  request.prefix = "test";
  request.object_suffix = ".img";
  request.key = key;
  request.validate = starts_with_magic;
  return request;
}

const std::string kKey = hal::util::KernelCache::key_of({"source", "options", "arch"});

}  // namespace

TEST_CASE("the key changes with every part and with where the parts split", "[kernel_cache]") {
  using hal::util::KernelCache;
  const std::string base = KernelCache::key_of({"text", "nvrtc 13.0", "compute_90", "-O3"});
  CHECK(base.size() == 32);
  CHECK(base.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(KernelCache::key_of({"text", "nvrtc 13.0", "compute_90", "-O3"}) == base);
  CHECK(KernelCache::key_of({"text ", "nvrtc 13.0", "compute_90", "-O3"}) != base);
  CHECK(KernelCache::key_of({"text", "nvrtc 13.1", "compute_90", "-O3"}) != base);
  CHECK(KernelCache::key_of({"text", "nvrtc 13.0", "compute_80", "-O3"}) != base);
  CHECK(KernelCache::key_of({"text", "nvrtc 13.0", "compute_90", "-O2"}) != base);
  CHECK(KernelCache::key_of({"text", "nvrtc 13.0", "compute_90"}) != base);
  CHECK(KernelCache::key_of({"ab", "c"}) != KernelCache::key_of({"a", "bc"}));
  // The first 128 bits of the SHA-256 of the parts joined by NUL bytes.
  const std::string joined("ab\0c", 4);
  CHECK(KernelCache::key_of({"ab", "c"}) ==
        hal::util::Sha256::hex(hal::util::Sha256::of(joined.data(), joined.size())).substr(0, 32));
}

TEST_CASE("a second build is a hit: nothing is built, the entry is private", "[kernel_cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  CountingBuild build;
  CollectedLog log;
  hal::util::CachedBuild first, second;
  REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), first));
  CHECK(first.use == CacheUse::kStored);
  CHECK(build.runs == 1);
  const std::string object = objects_dir(directory) + "/test-" + kKey + ".img";
  CHECK(slurp(object) == std::string(kMagic) + "payload");
  CHECK(slurp(objects_dir(directory) + "/test-" + kKey + ".record") ==
        record_for(object, slurp(object)));
  CHECK(listing(objects_dir(directory)).size() == 2);                    // no temporary left
  CHECK(listing(directory) == std::set<std::string>{"key", "objects"});  // the key outside
  CHECK(secret_of(object).size() == 32);
  struct stat status {};
  for (const std::string& owner_only : {directory, objects_dir(directory)}) {
    REQUIRE(stat(owner_only.c_str(), &status) == 0);
    CHECK((status.st_mode & 0777) == 0700);
  }
  for (const std::string& file : {object, directory + "/key"}) {
    REQUIRE(stat(file.c_str(), &status) == 0);
    CHECK((status.st_mode & 0777) == 0600);
  }

  REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), second));
  CHECK(second.use == CacheUse::kHit);
  CHECK(build.runs == 1);
  CHECK(second.image == first.image);
  CHECK(second.origin.find(object) != std::string::npos);
  CHECK(log.mentions("'" + object + "' is used: nothing is compiled"));

  // Another key is another entry.
  hal::util::CachedBuild other;
  const std::string other_key = hal::util::KernelCache::key_of({"source", "options", "arch2"});
  REQUIRE(hal::util::build_cached(request_for(other_key), build.builder(), log.sink(), other));
  CHECK(other.use == CacheUse::kStored);
  CHECK(build.runs == 2);
  CHECK(listing(objects_dir(directory)).size() == 4);
}

TEST_CASE("seeded damage to an entry is rebuilt with a log line, never used", "[kernel_cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  CountingBuild build;
  CollectedLog log;
  hal::util::CachedBuild result;
  REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
  const std::string object = objects_dir(directory) + "/test-" + kKey + ".img";
  const std::string record = record_path(object, ".img");
  const std::string good = slurp(object);
  std::mt19937 random(20261203);
  for (int round = 0; round < 64; ++round) {
    const std::string damage = damage_entry(random, object, record);
    CAPTURE(round, damage);
    log.clear();
    const int runs = build.runs;
    REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
    CHECK(result.use == CacheUse::kStored);
    CHECK(build.runs == runs + 1);
    CHECK(log.mentions("the kernel cache entry " + object + " is rebuilt: "));
    CHECK(std::string(result.image.begin(), result.image.end()) == good);
    CHECK(slurp(object) == good);
    CHECK(slurp(record) == record_for(object, good));
  }
}

TEST_CASE("a linked, writable or foreign entry is rebuilt, and what it points to is left alone",
          "[kernel_cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  CountingBuild build;
  CollectedLog log;
  hal::util::CachedBuild result;
  REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
  const std::string object = objects_dir(directory) + "/test-" + kKey + ".img";
  const std::string record = record_path(object, ".img");
  const std::string planted = std::string(kMagic) + "planted";

  SECTION("a symbolic link to a consistent entry elsewhere") {
    const std::string elsewhere = scratch.path + "/elsewhere.img";
    write_file(elsewhere, planted);
    REQUIRE(unlink(object.c_str()) == 0);
    REQUIRE(symlink(elsewhere.c_str(), object.c_str()) == 0);
    write_file(record, record_for(object, planted));
    REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
    CHECK(log.mentions("is a symbolic link"));
    CHECK(slurp(elsewhere) == planted);
    struct stat status {};
    REQUIRE(lstat(object.c_str(), &status) == 0);
    CHECK(S_ISREG(status.st_mode));
  }
  SECTION("a group-writable object") {
    write_file(object, planted, 0620);
    write_file(record, record_for(object, planted));
    REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
    CHECK(log.mentions("group or others may write to it"));
  }
  SECTION("a world-writable record") {
    write_file(object, planted);
    write_file(record, record_for(object, planted), 0606);
    REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
    CHECK(log.mentions("its record"));
  }
  SECTION("an object of another user") {
    if (geteuid() != 0) return;  // only root can give a file away
    write_file(object, planted);
    write_file(record, record_for(object, planted));
    REQUIRE(chown(object.c_str(), 65534, 65534) == 0);
    REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
    CHECK(log.mentions("is owned by uid 65534"));
  }
  CHECK(result.use == CacheUse::kStored);
  CHECK(build.runs == 2);
  CHECK(std::string(result.image.begin(), result.image.end()) == std::string(kMagic) + "payload");
}

TEST_CASE("a directory others control is not used, and the log names it and the rule",
          "[kernel_cache]") {
  Scratch scratch;
  std::vector<std::pair<std::string, std::string>> hostile;  // directory, the rule's words
  // Each directory holds a cache HAL wrote (with its key), then is made
  // hostile: accessible to others, a link, or another user's.
  auto plant = [&](const std::string& directory, mode_t mode) {
    {
      EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
      CountingBuild build;
      CollectedLog log;
      hal::util::CachedBuild result;
      REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
      REQUIRE(result.use == CacheUse::kStored);
    }
    REQUIRE(chmod(directory.c_str(), mode) == 0);
  };
  plant(scratch.path + "/shared", 0777);
  hostile.emplace_back(scratch.path + "/shared", "has mode 0777");
  plant(scratch.path + "/group", 0770);
  hostile.emplace_back(scratch.path + "/group", "has mode 0770");
  // Readable and enterable by others (the umask's 0755): not private.
  plant(scratch.path + "/readable", 0755);
  hostile.emplace_back(scratch.path + "/readable", "has mode 0755: group or others may read");
  plant(scratch.path + "/enterable", 0711);
  hostile.emplace_back(scratch.path + "/enterable", "has mode 0711");
  plant(scratch.path + "/target", 0700);
  REQUIRE(symlink((scratch.path + "/target").c_str(), (scratch.path + "/link").c_str()) == 0);
  hostile.emplace_back(scratch.path + "/link", "is a symbolic link");
  if (geteuid() == 0) {
    plant(scratch.path + "/foreign", 0700);
    REQUIRE(chown((scratch.path + "/foreign").c_str(), 65534, 65534) == 0);
    hostile.emplace_back(scratch.path + "/foreign", "owned by uid 65534");
  }
  for (const auto& [directory, rule] : hostile) {
    CAPTURE(directory);
    const std::set<std::string> before = listing(directory);
    EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
    CountingBuild build;
    CollectedLog log;
    hal::util::CachedBuild result;
    REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
    CHECK(result.use == CacheUse::kNoCache);
    CHECK(build.runs == 1);
    CHECK(std::string(result.image.begin(), result.image.end()) == std::string(kMagic) + "payload");
    CHECK(log.mentions("the kernel cache is not used ("));
    CHECK(log.mentions(directory));
    CHECK(log.mentions(rule));
    CHECK(result.origin.find("without a cache") != std::string::npos);
    CHECK(listing(directory) == before);
  }
}

TEST_CASE("where the cache is: HAL_CACHE_DIR, XDG_CACHE_HOME/hal, HOME/.cache/hal, else none",
          "[kernel_cache]") {
  Scratch scratch;
  EnvOverride no_cache("HAL_CACHE_DIR", nullptr);
  EnvOverride no_xdg("XDG_CACHE_HOME", nullptr);
  EnvOverride home("HOME", scratch.path.c_str());
  hal::util::KernelCache cache;
  std::string why;
  REQUIRE(cache.open("test", ".img", why));
  CHECK(cache.path() == scratch.path + "/.cache/hal/objects");
  {
    EnvOverride xdg("XDG_CACHE_HOME", (scratch.path + "/xdg").c_str());
    REQUIRE(cache.open("test", ".img", why));
    CHECK(cache.path() == scratch.path + "/xdg/hal/objects");
    EnvOverride dir("HAL_CACHE_DIR", (scratch.path + "/mine/").c_str());
    REQUIRE(cache.open("test", ".img", why));
    CHECK(cache.object_path(kKey) == scratch.path + "/mine/objects/test-" + kKey + ".img");
  }
  EnvOverride no_home("HOME", nullptr);
  CHECK_FALSE(cache.open("test", ".img", why));
  CHECK_FALSE(cache.is_open());
  CHECK(why == "none of HAL_CACHE_DIR, XDG_CACHE_HOME and HOME is set");
}

TEST_CASE("bad entry names, a failing build, an image its check refuses, a full disk",
          "[kernel_cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  hal::util::KernelCache cache;
  std::string why;
  for (const auto& [prefix, suffix] :
       std::vector<std::pair<std::string, std::string>>{{"../up", ".img"},
                                                        {"test", "img"},
                                                        {"test", "./x"},
                                                        {"", ".img"},
                                                        {"test", ".record"}}) {
    CAPTURE(prefix, suffix);
    CHECK_FALSE(cache.open(prefix, suffix, why));
    CHECK(why.find("do not make kernel cache entry names") != std::string::npos);
  }
  CountingBuild build;
  CollectedLog log;
  hal::util::CachedBuild result;
  SECTION("the build fails: nothing is stored") {
    build.fails = true;
    CHECK_FALSE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
    CHECK(listing(objects_dir(directory)).empty());
  }
  SECTION("the check refuses the fresh image: it is not stored") {
    build.payload.clear();
    auto request = request_for(kKey);
    request.validate = [](const std::vector<unsigned char>& image, std::string& problem) {
      problem = "too short";
      return image.size() > 4;
    };
    REQUIRE(hal::util::build_cached(request, build.builder(), log.sink(), result));
    CHECK(result.use == CacheUse::kNotStored);
    CHECK(log.mentions("is not stored: the compiled image fails the plugin's check: too short"));
    CHECK(listing(objects_dir(directory)).empty());
  }
  SECTION("a full disk: the image is given back, the entry is not stored") {
    build.payload = std::string(4096, 'x');
    struct sigaction ignore {
    }, saved_action{};
    ignore.sa_handler = SIG_IGN;
    REQUIRE(sigaction(SIGXFSZ, &ignore, &saved_action) == 0);
    rlimit saved{};
    REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
    rlimit tiny = saved;
    tiny.rlim_cur = 64;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &tiny) == 0);
    const bool built =
        hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result);
    REQUIRE(setrlimit(RLIMIT_FSIZE, &saved) == 0);
    REQUIRE(sigaction(SIGXFSZ, &saved_action, nullptr) == 0);
    REQUIRE(built);
    CHECK(result.use == CacheUse::kNotStored);
    CHECK(result.image.size() == 4 + 4096);
    CHECK(log.mentions("could not be stored"));
    CHECK(log.mentions("file size limit"));
    CHECK(listing(objects_dir(directory)).empty());  // the temporary is removed
  }
}

TEST_CASE("an object planted with a record HAL did not key for this cache is never used",
          "[kernel_cache]") {
  // A planted object whose record passes every unkeyed check: the old
  // format's SHA-256, an HMAC under another cache's key (a copied cache, or
  // one of another user), or a genuine record of another entry.
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  CountingBuild build;
  CollectedLog log;
  hal::util::CachedBuild result;
  const std::string other_key = hal::util::KernelCache::key_of({"another", "entry"});
  REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
  REQUIRE(hal::util::build_cached(request_for(other_key), build.builder(), log.sink(), result));
  const std::string object = objects_dir(directory) + "/test-" + kKey + ".img";
  const std::string other_object = objects_dir(directory) + "/test-" + other_key + ".img";
  const std::string record = record_path(object, ".img");
  const std::string planted = std::string(kMagic) + "planted";
  const std::string unkeyed =
      "hal-test-cache 2 hmac-sha256 " +
      hal::util::Sha256::hex(hal::util::Sha256::of(planted.data(), planted.size())) + " size " +
      std::to_string(planted.size()) + "\n";
  const std::vector<std::pair<std::string, std::string>> plants = {
      {"the unkeyed SHA-256 of the object", unkeyed},
      {"the old format",
       "hal-test-cache 1 sha256 " +
           hal::util::Sha256::hex(hal::util::Sha256::of(planted.data(), planted.size())) +
           " size " + std::to_string(planted.size()) + "\n"},
      {"an HMAC under another key", record_for(object, planted, std::string(32, 'k'))},
      {"another entry's genuine record", record_for(other_object, planted)},
  };
  for (const auto& [what, planted_record] : plants) {
    CAPTURE(what);
    write_file(object, planted);
    write_file(record, planted_record);
    log.clear();
    const int runs = build.runs;
    REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
    CHECK(result.use == CacheUse::kStored);
    CHECK(build.runs == runs + 1);
    CHECK(std::string(result.image.begin(), result.image.end()) == std::string(kMagic) + "payload");
    CHECK(log.mentions("the kernel cache entry " + object + " is rebuilt: "));
    CHECK(slurp(object) == std::string(kMagic) + "payload");
  }
  // The same bytes under the genuine key of this cache are used: the test's
  // record is the one SPEC.md §8 describes.
  write_file(object, planted);
  write_file(record, record_for(object, planted));
  REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
  CHECK(result.use == CacheUse::kHit);
  CHECK(std::string(result.image.begin(), result.image.end()) == planted);
}

TEST_CASE("the cache key is made once, privately, and a key others could read is refused",
          "[kernel_cache]") {
  Scratch scratch;
  const std::string directory = scratch.path + "/cache";
  EnvOverride cache_dir("HAL_CACHE_DIR", directory.c_str());
  std::string why;
  {
    // Racing first opens agree on one key, and no temporary is left.
    std::vector<std::thread> threads;
    std::vector<std::string> keys(8);
    for (size_t i = 0; i < keys.size(); ++i) {
      threads.emplace_back([&, i] {
        hal::util::KernelCache cache;
        std::string problem;
        if (cache.open("test", ".img", problem)) keys[i] = slurp(directory + "/key");
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (const std::string& key : keys) CHECK(key == keys[0]);
    CHECK(keys[0].size() == 32);
    CHECK(listing(directory) == std::set<std::string>{"key", "objects"});
  }
  const std::string key = directory + "/key";
  const std::string genuine = slurp(key);
  hal::util::KernelCache cache;
  SECTION("readable by others") {
    REQUIRE(chmod(key.c_str(), 0644) == 0);
    CHECK_FALSE(cache.open("test", ".img", why));
    CHECK(why.find("the cache key '" + key + "' has mode 0644") != std::string::npos);
    CHECK(why.find("delete it and HAL makes a new one") != std::string::npos);
  }
  SECTION("a symbolic link") {
    write_file(scratch.path + "/elsewhere", genuine);
    REQUIRE(unlink(key.c_str()) == 0);
    REQUIRE(symlink((scratch.path + "/elsewhere").c_str(), key.c_str()) == 0);
    CHECK_FALSE(cache.open("test", ".img", why));
    CHECK(why.find("symbolic link") != std::string::npos);
  }
  SECTION("the wrong size") {
    write_file(key, genuine + "x");
    CHECK_FALSE(cache.open("test", ".img", why));
    CHECK(why.find("more than the limit of 32") != std::string::npos);
  }
  SECTION("deleted: a new key, and the old entries are rebuilt") {
    CountingBuild build;
    CollectedLog log;
    hal::util::CachedBuild result;
    REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
    REQUIRE(unlink(key.c_str()) == 0);
    REQUIRE(hal::util::build_cached(request_for(kKey), build.builder(), log.sink(), result));
    CHECK(slurp(key) != genuine);
    CHECK(result.use == CacheUse::kStored);
    CHECK(build.runs == 2);
  }
}
