#include "checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "model.hpp"

namespace train {

namespace {

constexpr char kMagic[8] = {'H', 'A', 'L', 'C', 'K', 'P', 'T', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kEndianMarker = 0x01020304u;

uint64_t fnv1a(const uint8_t* data, size_t size) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

class Writer {
 public:
  template <typename T>
  void put(const T& value) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
    data.insert(data.end(), bytes, bytes + sizeof(T));
  }
  void put_floats(const std::vector<float>& values) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
    data.insert(data.end(), bytes, bytes + values.size() * sizeof(float));
  }
  std::vector<uint8_t> data;
};

// Reads fields from a buffer whose size was checked against what they need.
class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& data) : data_(data) {}
  template <typename T>
  T get() {
    T value;
    std::memcpy(&value, data_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }
  void get_floats(std::vector<float>& out, size_t count) {
    out.resize(count);
    std::memcpy(out.data(), data_.data() + offset_, count * sizeof(float));
    offset_ += count * sizeof(float);
  }
  void skip(size_t bytes) { offset_ += bytes; }

 private:
  const std::vector<uint8_t>& data_;
  size_t offset_ = 0;
};

void write_header(Writer& out, const Checkpoint& checkpoint, uint64_t elements) {
  const TrainConfig& c = checkpoint.config;
  for (char ch : kMagic) out.put(ch);
  out.put(kVersion);
  out.put(kEndianMarker);
  for (uint32_t field : {c.model.layers, c.model.width, c.model.heads, c.model.context,
                         c.model.vocab, c.batch, c.steps, c.warmup_steps}) {
    out.put(field);
  }
  out.put(c.learning_rate);
  out.put(c.final_lr_ratio);
  for (float field : {c.beta1, c.beta2, c.epsilon, c.weight_decay, c.max_grad_norm}) out.put(field);
  out.put(c.seed);
  out.put(static_cast<uint32_t>(c.precision));
  out.put(checkpoint.step);
  out.put(checkpoint.rng_state);
  out.put(elements);
}

size_t header_bytes() {
  Writer probe;
  write_header(probe, Checkpoint{}, 0);
  return probe.data.size();
}

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw std::runtime_error("checkpoint " + path + ": " + why);
}

std::string system_error() {
  return std::strerror(errno);
}

// Closes a descriptor on every path out.
struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void save_checkpoint(const Checkpoint& checkpoint, const std::string& path) {
  const uint64_t elements = make_layout(checkpoint.config.model).total;
  if (checkpoint.params.size() != elements || checkpoint.m.size() != elements ||
      checkpoint.v.size() != elements) {
    fail(path, "the state to save does not match the model's parameter count");
  }
  Writer out;
  write_header(out, checkpoint, elements);
  out.put_floats(checkpoint.params);
  out.put_floats(checkpoint.m);
  out.put_floats(checkpoint.v);
  out.put(fnv1a(out.data.data(), out.data.size()));

  const std::filesystem::path target(path);
  const std::filesystem::path directory =
      target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  std::string name = ".";  // appended, not "." + ...: GCC 12 -O3 misreads that (-Wrestrict)
  name += target.filename().string();
  name += ".XXXXXX";
  std::string temporary = (directory / name).string();
  FileDescriptor file;
  file.fd = ::mkostemp(temporary.data(), O_CLOEXEC);  // O_EXCL, mode 0600
  if (file.fd < 0)
    fail(path, "cannot create a temporary file in " + directory.string() + ": " + system_error());
  size_t written = 0;
  while (written < out.data.size()) {
    const ssize_t n = ::write(file.fd, out.data.data() + written, out.data.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = system_error();
      ::unlink(temporary.c_str());
      fail(path, "cannot write: " + why);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(file.fd) != 0 || ::close(std::exchange(file.fd, -1)) != 0) {
    const std::string why = system_error();
    ::unlink(temporary.c_str());
    fail(path, "cannot flush: " + why);
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string why = system_error();
    ::unlink(temporary.c_str());
    fail(path, "cannot rename the temporary file into place: " + why);
  }
  FileDescriptor dir;
  dir.fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir.fd >= 0) ::fsync(dir.fd);  // the rename itself survives a crash
}

Checkpoint load_checkpoint(const std::string& path) {
  FileDescriptor file;
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0) fail(path, "cannot open: " + system_error());
  struct stat info {};
  if (::fstat(file.fd, &info) != 0) fail(path, "cannot stat: " + system_error());
  if (!S_ISREG(info.st_mode)) fail(path, "not a regular file");
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  const size_t header = header_bytes();
  if (size < header + sizeof(uint64_t)) {
    fail(path, "truncated: " + std::to_string(size) + " bytes, shorter than the header");
  }

  std::vector<uint8_t> head(header);
  auto read_exact = [&](uint8_t* into, size_t count) {
    size_t done = 0;
    while (done < count) {
      const ssize_t n = ::read(file.fd, into + done, count - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(path, "cannot read: " + system_error());
      if (n == 0) fail(path, "truncated while reading (the file shrank)");
      done += static_cast<size_t>(n);
    }
  };
  read_exact(head.data(), header);
  if (std::memcmp(head.data(), kMagic, sizeof kMagic) != 0) {
    fail(path, "not a HAL training checkpoint (bad magic)");
  }
  Reader in(head);
  in.skip(sizeof kMagic);
  const uint32_t version = in.get<uint32_t>();
  if (version != kVersion) {
    fail(path, "format version " + std::to_string(version) + "; this build reads version " +
                   std::to_string(kVersion));
  }
  if (in.get<uint32_t>() != kEndianMarker) fail(path, "written with another byte order");
  Checkpoint checkpoint;
  TrainConfig& c = checkpoint.config;
  for (uint32_t* field : {&c.model.layers, &c.model.width, &c.model.heads, &c.model.context,
                          &c.model.vocab, &c.batch, &c.steps, &c.warmup_steps}) {
    *field = in.get<uint32_t>();
  }
  c.learning_rate = in.get<double>();
  c.final_lr_ratio = in.get<double>();
  for (float* field : {&c.beta1, &c.beta2, &c.epsilon, &c.weight_decay, &c.max_grad_norm}) {
    *field = in.get<float>();
  }
  c.seed = in.get<uint64_t>();
  c.precision = static_cast<Precision>(in.get<uint32_t>());  // validate() checks the value
  checkpoint.step = in.get<uint32_t>();
  checkpoint.rng_state = in.get<uint64_t>();
  const uint64_t elements = in.get<uint64_t>();
  try {
    validate(c, 1);
  } catch (const std::invalid_argument& error) {
    fail(path, std::string("its configuration is invalid: ") + error.what());
  }
  // A resumed run may go past its schedule (TrainConfig::steps), never past what
  // the sample counts in a u32 with room to spare.
  if (checkpoint.step > (1u << 30)) fail(path, "its step count is implausibly large");
  // The configuration is bounded by validate(), so these products cannot overflow.
  const uint64_t expected_elements = make_layout(c.model).total;
  if (elements != expected_elements) {
    fail(path, "holds " + std::to_string(elements) + " elements per array; its model has " +
                   std::to_string(expected_elements));
  }
  const uint64_t expected_size = header + 3 * elements * sizeof(float) + sizeof(uint64_t);
  if (size != expected_size) {
    fail(path, (size < expected_size ? "truncated: " : "has trailing bytes: ") +
                   std::to_string(size) + " bytes where its header implies " +
                   std::to_string(expected_size));
  }
  std::vector<uint8_t> data(size);
  std::memcpy(data.data(), head.data(), header);
  read_exact(data.data() + header, size - header);
  uint64_t stored = 0;
  std::memcpy(&stored, data.data() + size - sizeof stored, sizeof stored);
  if (fnv1a(data.data(), size - sizeof stored) != stored) {
    fail(path, "checksum mismatch: the file is corrupt");
  }
  Reader body(data);
  body.skip(header);
  body.get_floats(checkpoint.params, elements);
  body.get_floats(checkpoint.m, elements);
  body.get_floats(checkpoint.v, elements);
  return checkpoint;
}

}  // namespace train
