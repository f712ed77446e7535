#include "corpus.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace train {

double Rng::normal() {
  // 1 - uniform() lies in (0, 1], so the logarithm is finite.
  const double radius = std::sqrt(-2.0 * std::log(1.0 - uniform()));
  return radius * std::cos(2.0 * 3.14159265358979323846 * uniform());
}

namespace {

std::vector<uint8_t> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open corpus file " + path.string());
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("cannot read corpus file " + path.string());
  return bytes;
}

}  // namespace

Corpus load_corpus(const std::string& path, uint32_t context) {
  namespace fs = std::filesystem;
  Corpus corpus;
  std::vector<uint8_t> text;
  std::error_code error;
  if (fs::is_directory(path, error)) {
    std::vector<fs::path> files;
    for (const fs::directory_entry& entry : fs::directory_iterator(path, error)) {
      // Regular files only: Debian's GPL, LGPL and GFDL are symlinks to a
      // versioned file that is read once under its own name.
      if (entry.is_regular_file(error) && !entry.is_symlink(error)) files.push_back(entry.path());
    }
    if (error)
      throw std::runtime_error("cannot list corpus directory " + path + ": " + error.message());
    std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
      return a.filename().string() < b.filename().string();
    });
    for (const fs::path& file : files) {
      const std::vector<uint8_t> bytes = read_file(file);
      text.insert(text.end(), bytes.begin(), bytes.end());
      corpus.files.push_back(file.string());
    }
  } else {
    text = read_file(path);
    corpus.files.push_back(path);
  }
  const size_t split = text.size() / 10 * 9 + (text.size() % 10) * 9 / 10;  // floor(0.9 n)
  corpus.train.assign(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(split));
  corpus.validation.assign(text.begin() + static_cast<std::ptrdiff_t>(split), text.end());
  const size_t needed = size_t{context} + 2;
  if (corpus.train.size() < needed || corpus.validation.size() < needed) {
    throw std::runtime_error("corpus " + path + " has " + std::to_string(text.size()) +
                             " bytes: too short for sequences of " + std::to_string(context) +
                             " tokens in both the train and validation splits");
  }
  return corpus;
}

namespace {

void copy_sequence(const std::vector<uint8_t>& text, size_t offset, uint32_t context,
                   int32_t* tokens, int32_t* targets) {
  for (uint32_t t = 0; t < context; ++t) {
    tokens[t] = text[offset + t];
    targets[t] = text[offset + t + 1];
  }
}

}  // namespace

void sample_batch(const Corpus& corpus, uint32_t context, uint32_t count, Rng& rng,
                  std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  tokens.resize(size_t{count} * context);
  targets.resize(size_t{count} * context);
  const uint64_t offsets = corpus.train.size() - context;  // [0, n - T - 1] inclusive
  for (uint32_t s = 0; s < count; ++s) {
    const size_t offset = rng.below(offsets);
    copy_sequence(corpus.train, offset, context, &tokens[size_t{s} * context],
                  &targets[size_t{s} * context]);
  }
}

void validation_batch(const Corpus& corpus, uint32_t context, uint32_t count,
                      std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  tokens.resize(size_t{count} * context);
  targets.resize(size_t{count} * context);
  const size_t last = corpus.validation.size() - context - 1;
  for (uint32_t s = 0; s < count; ++s) {
    const size_t offset = count == 1 ? 0 : last * s / (count - 1);
    copy_sequence(corpus.validation, offset, context, &tokens[size_t{s} * context],
                  &targets[size_t{s} * context]);
  }
}

}  // namespace train
