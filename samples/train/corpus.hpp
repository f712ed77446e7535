// The training text: a corpus every Debian system ships, a byte-level
// tokenizer (token = byte, vocabulary 256), a train/validation split, and the
// batch sampler whose state a checkpoint keeps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace train {

// splitmix64: one 64-bit word of state, so a checkpoint holds it exactly.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) (bound > 0), by the multiply-shift method; its bias
  // (bound / 2^64) is far below anything a loss curve shows.
  uint64_t below(uint64_t bound) {
    __extension__ using Wide = unsigned __int128;
    return static_cast<uint64_t>((static_cast<Wide>(next()) * bound) >> 64);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double normal();  // standard normal (Box-Muller)
  uint64_t state() const { return state_; }
  void set_state(uint64_t state) { state_ = state; }

 private:
  uint64_t state_;
};

struct Corpus {
  std::vector<uint8_t> train;
  std::vector<uint8_t> validation;
  std::vector<std::string> files;  // what it was read from, in order
};

// The default corpus: every regular file directly in /usr/share/common-licenses
// (Debian's base-files), sorted by name, concatenated.
constexpr const char* kDefaultCorpusDirectory = "/usr/share/common-licenses";

// Reads |path| (a directory: its regular files as above; a file: that file)
// and splits it: the first 90 % of bytes train, the rest validate. Throws
// std::runtime_error naming the path when it cannot be read or is too short
// for sequences of |context| + 1 bytes in both parts.
Corpus load_corpus(const std::string& path, uint32_t context);

// Fills |tokens| and |targets| (each count * context) with |count| sequences
// at offsets drawn from |rng| uniformly in [0, train.size() - context - 1].
void sample_batch(const Corpus& corpus, uint32_t context, uint32_t count, Rng& rng,
                  std::vector<int32_t>& tokens, std::vector<int32_t>& targets);

// The fixed validation set: |count| sequences at evenly spaced offsets.
void validation_batch(const Corpus& corpus, uint32_t context, uint32_t count,
                      std::vector<int32_t>& tokens, std::vector<int32_t>& targets);

}  // namespace train
