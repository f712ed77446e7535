// SHA-256 and HMAC-SHA-256 of hal_util: the published vectors, the CPU's
// SHA extensions against the portable loop block for block, any split of
// the input across update() calls, and a keyed HMAC reused across messages
// against the one-shot function.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

#include "hal_util/hmac.hpp"
#include "hal_util/sha256.hpp"

using hal::util::Sha256;

namespace {

std::string hex_of(const std::string& text) {
  return Sha256::hex(Sha256::of(text.data(), text.size()));
}

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

TEST_CASE("SHA-256 matches FIPS 180-4's vectors", "[sha256]") {
  CHECK(hex_of("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex_of("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(hex_of(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("SHA-256: the CPU's extensions and the portable loop give the same state", "[sha256]") {
  if (!Sha256::uses_cpu_extensions()) {
    WARN("this CPU has no SHA extensions: the portable loop serves every hash");
  }
  std::mt19937 random(2032);
  for (size_t blocks : {size_t{1}, size_t{2}, size_t{3}, size_t{17}, size_t{64}}) {
    std::vector<uint8_t> data(64 * blocks);
    for (uint8_t& b : data) b = static_cast<uint8_t>(random());
    Sha256 active;
    active.update(data.data(), data.size());  // whole blocks: no padding yet
    std::array<uint32_t, 8> portable = Sha256().state_for_testing();
    Sha256::compress_portable_for_testing(portable, data.data(), blocks);
    INFO(blocks << " blocks");
    CHECK(active.state_for_testing() == portable);
  }
}

TEST_CASE("SHA-256: any split of the input across updates gives the same digest", "[sha256]") {
  std::mt19937 random(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<uint8_t> data(random() % 1500);
    for (uint8_t& b : data) b = static_cast<uint8_t>(random());
    const Sha256::Digest whole = Sha256::of(data.data(), data.size());
    Sha256 pieces;
    for (size_t at = 0; at < data.size();) {
      const size_t take = std::min<size_t>(random() % 130, data.size() - at);
      pieces.update(data.data() + at, take);
      at += take;
    }
    INFO(data.size() << " bytes");
    CHECK(pieces.finish() == whole);
  }
}

TEST_CASE("HMAC-SHA-256: a key reused across messages gives the one-shot MACs", "[sha256]") {
  // RFC 4231 test case 2, then messages of every length up to three blocks.
  const hal::util::HmacSha256 jefe(bytes_of("Jefe"));
  CHECK(Sha256::hex(jefe.mac({bytes_of("what do ya want for nothing?")})) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  std::mt19937 random(11);
  std::vector<uint8_t> key(40);
  for (uint8_t& b : key) b = static_cast<uint8_t>(random());
  const hal::util::HmacSha256 keyed(key);
  for (size_t length = 0; length <= 192; ++length) {
    std::vector<uint8_t> message(length);
    for (uint8_t& b : message) b = static_cast<uint8_t>(random());
    CHECK(keyed.mac({message}) == hal::util::hmac_sha256(key, {message}));
  }
}
