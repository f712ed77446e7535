#include "fake_vendor.hpp"

#include <elf.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace fake_vendor {

void Host::set_paused(bool pause) {
  std::lock_guard lock(mutex);
  paused = pause;
  changed.notify_all();
}

void Host::wait_until(const std::function<bool()>& done) {
  std::unique_lock lock(mutex);
  paused = false;
  changed.notify_all();
  changed.wait(lock, done);
}

Stream::Stream(Host& host, uint64_t stream_id)
    : id(stream_id), host_(host), worker_([this] { loop(); }) {}

Stream::~Stream() {
  stop();
}

void Stream::push_locked(std::function<void()> work, std::function<bool()> ready) {
  queue_.push_back(Work{std::move(ready), std::move(work)});
  host_.changed.notify_all();
}

void Stream::push(std::function<void()> work, std::function<bool()> ready) {
  std::lock_guard lock(host_.mutex);
  push_locked(std::move(work), std::move(ready));
}

bool Stream::idle() const {
  return queue_.empty() && !busy_;
}

void Stream::stop() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard lock(host_.mutex);
    stopping_ = true;  // its queued work still runs, as in CUDA and HIP
    host_.changed.notify_all();
  }
  worker_.join();
}

bool Stream::runnable() const {
  if (queue_.empty()) return stopping_;
  if (host_.paused && !stopping_) return false;
  return !queue_.front().ready || queue_.front().ready();
}

void Stream::loop() {
  std::unique_lock lock(host_.mutex);
  while (true) {
    host_.changed.wait(lock, [&] { return runnable(); });
    if (queue_.empty()) return;  // stopping, and everything ran
    Work work = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    if (work.run) work.run();  // outside the lock: a host function may call the library
    lock.lock();
    busy_ = false;
    host_.changed.notify_all();
  }
}

std::function<void()> record_work(Host& host, const std::shared_ptr<EventState>& event) {
  const uint64_t generation = ++event->recorded;
  return [&host, event, generation] {
    std::lock_guard lock(host.mutex);
    event->completed = std::max(event->completed, generation);
    event->when = std::chrono::steady_clock::now();
    host.changed.notify_all();
  };
}

std::function<void()> wait_work(Host& host, const std::shared_ptr<EventState>& event) {
  const uint64_t target = event->recorded;  // the record enqueued last
  return [&host, event, target] {
    std::unique_lock lock(host.mutex);
    host.changed.wait(lock, [&] { return event->completed >= target; });
  };
}

bool reached(const EventState& event) {
  return event.completed >= event.recorded;
}

void synchronize(Host& host, const Event& event) {
  std::shared_ptr<EventState> awaited;
  {
    std::lock_guard lock(host.mutex);
    awaited = event.state;
  }
  host.wait_until([&] { return reached(*awaited); });
}

Elapsed elapsed(const EventState& first, const EventState& last, float* ms) {
  if (!first.timing || !last.timing) return Elapsed::kInvalid;
  if (!reached(first) || !reached(last)) return Elapsed::kNotReady;
  if (first.completed == 0 || last.completed == 0) return Elapsed::kInvalid;
  *ms = std::chrono::duration<float, std::milli>(last.when - first.when).count();
  return Elapsed::kDone;
}

fake_kernel_launch_t launch_record(const std::string& name, const uint32_t grid[3],
                                   const uint32_t block[3], uint32_t shared_bytes,
                                   uint64_t stream_id) {
  fake_kernel_launch_t launch{};
  std::snprintf(launch.name, sizeof(launch.name), "%s", name.c_str());
  std::copy(grid, grid + 3, launch.grid);
  std::copy(block, block + 3, launch.block);
  launch.shared_bytes = shared_bytes;
  launch.stream_id = stream_id;
  return launch;
}

bool copy_params(fake_kernel_launch_t& launch, const std::vector<uint32_t>& sizes,
                 void* const* params) {
  launch.param_count = static_cast<uint32_t>(sizes.size());
  size_t offset = 0;
  for (size_t i = 0; i < sizes.size() && i < 64; ++i) {
    launch.param_sizes[i] = sizes[i];
    if (offset + sizes[i] > sizeof(launch.params)) return false;
    std::memcpy(launch.params + offset, params[i], sizes[i]);
    offset += sizes[i];
  }
  return true;
}

size_t elf_extent(const unsigned char* data) {
  Elf64_Ehdr header;
  std::memcpy(&header, data, sizeof(header));
  size_t end =
      std::max<size_t>(sizeof(header), header.e_shoff + header.e_shnum * sizeof(Elf64_Shdr));
  end = std::max<size_t>(end, header.e_phoff + header.e_phnum * sizeof(Elf64_Phdr));
  for (uint16_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr section;
    std::memcpy(&section, data + header.e_shoff + i * sizeof(Elf64_Shdr), sizeof(section));
    if (section.sh_type != SHT_NOBITS) {
      end = std::max<size_t>(end, section.sh_offset + section.sh_size);
    }
  }
  return end;
}

}  // namespace fake_vendor
