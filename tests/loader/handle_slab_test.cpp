// The loader's handle slab on its own (loader/handle.cpp): slots are handed
// out once per lap, a lap skips any page that still holds a live slot, a page
// whose slots are all released reads as zeroes, and a full slab refuses.
#include <catch2/catch.hpp>

#include "handle.hpp"

#include <unistd.h>

#include <cstring>
#include <new>
#include <set>
#include <vector>

using hal::loader::HandleKind;
using hal::loader::HandleSlab;

namespace {

size_t page() {
  return static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Every slot of |slab|, in the order handed out.
std::vector<char*> take_all(HandleSlab& slab, size_t count) {
  std::vector<char*> slots;
  for (size_t i = 0; i < count; ++i) slots.push_back(static_cast<char*>(slab.allocate()));
  return slots;
}

}  // namespace

TEST_CASE("handle slab: each slot once per lap, in address order", "[slab]") {
  // Two arenas of two pages, 128-byte slots (100 rounds up).
  static auto* const slab = new HandleSlab(HandleKind::kStream, 100, 2 * page(), 2);
  REQUIRE(slab->slot_bytes() == 128);
  const size_t slots_per_lap = 2 * (2 * page() / 128);
  const std::vector<char*> first = take_all(*slab, slots_per_lap);
  CHECK(std::set<char*>(first.begin(), first.end()).size() == slots_per_lap);
  for (char* slot : first) CHECK(slab->handed_out(slot));
  CHECK_FALSE(slab->handed_out(first[0] + 8));  // not a slot start
  int on_stack = 0;
  CHECK_FALSE(slab->handed_out(&on_stack));
  CHECK(slab->laps() == 0);

  // Release all but one slot of the very first page: the next lap skips that page.
  for (size_t i = 1; i < first.size(); ++i) {
    std::memset(first[i], 0x5a, 16);
    slab->release(first[i]);
  }
  // Released pages read as zeroes: a stale header is no longer a live one.
  const size_t per_page = page() / 128;
  CHECK(first[per_page][0] == 0);
  const std::vector<char*> second = take_all(*slab, slots_per_lap - per_page);
  CHECK(slab->laps() == 1);
  for (char* slot : second) {
    CHECK((slot < first[0] || slot >= first[0] + page()));  // never the page still in use
  }
  CHECK(second[0] == first[per_page]);  // the lap starts again in address order
  // Everything live: the slab refuses rather than hand a live slot out twice.
  CHECK_THROWS_AS(slab->allocate(), std::bad_alloc);
  // Never deleted: a slab lives for the whole process.
}

TEST_CASE("handle slab: slots larger than a page", "[slab]") {
  static auto* const slab = new HandleSlab(HandleKind::kKernel, page() + 1, 8 * page(), 1);
  CHECK(slab->slot_bytes() == 2 * page());
  void* a = slab->allocate();
  void* b = slab->allocate();
  CHECK(static_cast<char*>(b) - static_cast<char*>(a) == static_cast<ptrdiff_t>(2 * page()));
  std::memset(a, 1, 2 * page());
  slab->release(a);
  CHECK(static_cast<char*>(a)[2 * page() - 1] == 0);
  CHECK(slab->handed_out(a));
}
