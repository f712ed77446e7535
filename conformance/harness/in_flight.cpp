#include "in_flight.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <new>

#include "api_model.hpp"
#include "check.hpp"

namespace halconform {
namespace {

constexpr uint32_t kMagic = 0x48434946;  // "HCIF"

InFlightTable* g_table = nullptr;

InFlightTable* private_table() {
  static InFlightTable* table = [] {
    auto* t = new InFlightTable{};
    t->magic = kMagic;
    for (InFlightSlot& slot : t->slots) slot.function.store(kNoCall);
    return t;
  }();
  return table;
}

uint64_t current_tid() {
  static thread_local const uint64_t tid = static_cast<uint64_t>(syscall(SYS_gettid));
  return tid;
}

InFlightSlot* my_slot() {
  static thread_local InFlightSlot* slot = [] {
    InFlightTable& table = in_flight_table();
    const uint32_t index = table.next_slot.fetch_add(1) % kInFlightSlots;
    table.slots[index].thread_id.store(current_tid());
    return &table.slots[index];
  }();
  return slot;
}

}  // namespace

uint64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000000ull + static_cast<uint64_t>(now.tv_nsec);
}

InFlightTable& in_flight_table() {
  InFlightTable* table = __atomic_load_n(&g_table, __ATOMIC_ACQUIRE);
  return table != nullptr ? *table : *private_table();
}

void attach_in_flight_table() {
  struct stat info {};
  if (fstat(kInFlightFd, &info) != 0 || info.st_size != static_cast<off_t>(sizeof(InFlightTable))) {
    return;
  }
  void* mapped =
      mmap(nullptr, sizeof(InFlightTable), PROT_READ | PROT_WRITE, MAP_SHARED, kInFlightFd, 0);
  ::close(kInFlightFd);  // the mapping stays; plugins must not inherit the descriptor
  if (mapped == MAP_FAILED) return;
  auto* table = static_cast<InFlightTable*>(mapped);
  if (table->magic != kMagic) {
    munmap(mapped, sizeof(InFlightTable));
    return;
  }
  __atomic_store_n(&g_table, table, __ATOMIC_RELEASE);
}

void mark_test_thread() {
  in_flight_table().test_thread.store(current_tid());
}

InFlight::InFlight(uint32_t function, const char*) : slot_(my_slot()) {
  previous_function_ = slot_->function.load(std::memory_order_relaxed);
  previous_since_ = slot_->since_ns.load(std::memory_order_relaxed);
  slot_->since_ns.store(monotonic_ns(), std::memory_order_relaxed);
  slot_->function.store(function, std::memory_order_release);
}

InFlight::~InFlight() {
  slot_->since_ns.store(previous_since_, std::memory_order_relaxed);
  slot_->function.store(previous_function_, std::memory_order_release);
}

double seconds_in_call(const char* function_name) {
  const InFlightTable& table = in_flight_table();
  const uint64_t me = current_tid();
  const uint64_t now = monotonic_ns();
  double longest = -1;
  for (const InFlightSlot& slot : table.slots) {
    const uint32_t function = slot.function.load(std::memory_order_acquire);
    if (function == kNoCall || slot.thread_id.load() == me) continue;
    if (function >= model::functions().size()) continue;
    if (std::string_view(model::functions()[function].name) != function_name) continue;
    const uint64_t since = slot.since_ns.load(std::memory_order_relaxed);
    longest = std::max(longest, static_cast<double>(now - std::min(now, since)) * 1e-9);
  }
  return longest;
}

std::string describe_in_flight(const InFlightTable& table) {
  const uint64_t now = monotonic_ns();
  const uint64_t test_thread = table.test_thread.load();
  std::string test_part, others;
  for (const InFlightSlot& slot : table.slots) {
    const uint32_t function = slot.function.load(std::memory_order_acquire);
    if (function == kNoCall || function >= model::functions().size()) continue;
    const double seconds =
        static_cast<double>(now - std::min(now, slot.since_ns.load(std::memory_order_relaxed))) *
        1e-9;
    const char* name = model::functions()[function].name;
    if (slot.thread_id.load() == test_thread) {
      test_part = strf("%s has not returned after %.1f s on the test's thread", name, seconds);
    } else {
      others += strf("%s%s for %.1f s (thread %llu)", others.empty() ? "" : ", ", name, seconds,
                     static_cast<unsigned long long>(slot.thread_id.load()));
    }
  }
  if (test_part.empty() && others.empty()) return {};
  std::string text =
      test_part.empty() ? "no HAL call is in flight on the test's thread" : test_part;
  if (!others.empty()) text += "; also in flight: " + others;
  return text;
}

}  // namespace halconform
