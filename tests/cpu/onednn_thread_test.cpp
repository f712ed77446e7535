// Where the cpu plugin's oneDNN calls run (plugins/cpu/ops/onednn_common.hpp):
// calls that start an OpenMP team run on one thread, the oneDNN thread,
// whatever thread asks, so application threads gain no OpenMP workers;
// calls that start none run on their caller; every call takes its turn, one
// at a time; what a call throws reaches its caller. Compiled with
// onednn_common.cpp.
#include <catch2/catch.hpp>
#include <dirent.h>
#include <dnnl.h>
#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "ops/onednn_common.hpp"

using hal::cpu::ops::OnednnPlacement;
using hal::cpu::ops::run_onednn_call;
using hal::cpu::ops::SingleThreadedOnednn;

namespace {

template <class Body>
void run_on_onednn_thread(Body&& body) {
  run_onednn_call(OnednnPlacement::kOnednnThread, std::forward<Body>(body));
}

}  // namespace

namespace {

// The threads of this process now.
size_t thread_count() {
  size_t count = 0;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return 0;
  while (const dirent* entry = readdir(tasks)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(tasks);
  return count;
}

// d = a @ b for row-major n x n matrices in float64, the reference.
std::vector<double> reference_product(const std::vector<float>& a, const std::vector<float>& b,
                                      int n) {
  std::vector<double> d(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int p = 0; p < n; ++p) {
      const double x = a[static_cast<size_t>(i) * n + p];
      for (int j = 0; j < n; ++j) d[static_cast<size_t>(i) * n + j] += x * b[p * n + j];
    }
  }
  return d;
}

}  // namespace

TEST_CASE("onednn thread: every caller's body runs on one thread, never the caller's",
          "[cpu][onednn]") {
  constexpr int kCallers = 4;
  constexpr int kCallsEach = 50;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> calls{0};
  std::vector<std::thread::id> caller_ids(kCallers);
  std::vector<std::set<std::thread::id>> seen(kCallers);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      caller_ids[c] = std::this_thread::get_id();
      for (int i = 0; i < kCallsEach; ++i) {
        run_on_onednn_thread([&] {
          if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
          seen[c].insert(std::this_thread::get_id());
          calls.fetch_add(1);
          inside.fetch_sub(1);
        });
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  CHECK(calls.load() == kCallers * kCallsEach);
  CHECK(overlaps.load() == 0);  // one body at a time
  std::set<std::thread::id> all;
  for (const auto& ids : seen) all.insert(ids.begin(), ids.end());
  REQUIRE(all.size() == 1);
  for (const std::thread::id& caller : caller_ids) CHECK(*all.begin() != caller);
  CHECK(*all.begin() != std::this_thread::get_id());
}

TEST_CASE("onednn thread: what a body throws reaches its caller, and the thread serves on",
          "[cpu][onednn]") {
  CHECK_THROWS_WITH(run_on_onednn_thread([] { throw std::runtime_error("planted failure"); }),
                    "planted failure");
  int value = 0;
  run_on_onednn_thread([&] { value = 7; });
  CHECK(value == 7);
  // A failure does not stick to the next call.
  CHECK_NOTHROW(run_on_onednn_thread([] {}));
}

TEST_CASE("onednn thread: a body that asks for the thread again runs at once", "[cpu][onednn]") {
  std::thread::id outer, inner;
  run_on_onednn_thread([&] {
    outer = std::this_thread::get_id();
    run_on_onednn_thread([&] { inner = std::this_thread::get_id(); });
  });
  CHECK(outer == inner);
}

TEST_CASE("onednn thread: sgemm from many threads is right and adds one OpenMP team only",
          "[cpu][onednn]") {
  constexpr int n = 96;
  std::mt19937 random(1234);
  std::uniform_real_distribution<float> values(-1.0f, 1.0f);
  std::vector<float> a(n * n), b(n * n);
  for (float& x : a) x = values(random);
  for (float& x : b) x = values(random);
  const std::vector<double> expected = reference_product(a, b, n);

  // The oneDNN thread and its team exist from the first call on.
  run_on_onednn_thread([] {});
  const size_t before = thread_count();
  const int team = omp_get_max_threads();

  constexpr int kCallers = 4;
  std::vector<std::vector<float>> results(kCallers, std::vector<float>(n * n, -1.0f));
  std::vector<dnnl_status_t> statuses(kCallers, dnnl_runtime_error);
  std::vector<int> team_sizes(kCallers, 0);
  std::atomic<int> finished{0};
  std::atomic<bool> release{false};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int repeat = 0; repeat < 3; ++repeat) {
        run_on_onednn_thread([&] {
          // A parallel region, as oneDNN's calls open on their team.
          std::atomic<int> members{0};
#pragma omp parallel
          members.fetch_add(1);
          team_sizes[c] = members.load();
          statuses[c] = dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                                   results[c].data(), n);
        });
      }
      finished.fetch_add(1);
      // Stay alive: a caller that had hosted a team would keep its workers
      // until it ends.
      while (!release.load()) std::this_thread::yield();
    });
  }
  while (finished.load() != kCallers) std::this_thread::yield();
  const size_t during = thread_count();
  release.store(true);
  for (std::thread& caller : callers) caller.join();
  // The callers themselves, and at most one team's workers (they start with
  // the first parallel region); a team per caller would add kCallers times
  // as many.
  CHECK(team >= 2);  // the test runs with OMP_NUM_THREADS=2
  CHECK(during <= before + kCallers + static_cast<size_t>(team - 1));
  for (int size : team_sizes) CHECK(size == team);
  for (int c = 0; c < kCallers; ++c) {
    REQUIRE(statuses[c] == dnnl_success);
    double worst = 0;
    for (int i = 0; i < n * n; ++i) {
      const double error = std::abs(results[c][i] - expected[i]);
      worst = std::max(worst, error / (1e-6 * (n + 2) + 1e-6 * std::abs(expected[i])));
    }
    CHECK(worst <= 1.0);
  }
}

TEST_CASE("onednn thread: a caller whose team would be one thread runs its body itself, in turn",
          "[cpu][onednn]") {
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::thread::id single_caller, ran_single;
  std::set<std::thread::id> ran_team;
  // The oneDNN thread exists before the callers, whose ids it cannot reuse.
  run_on_onednn_thread([] {});
  std::thread one([&] {
    omp_set_num_threads(1);  // this thread's own setting: its calls would use a team of one
    single_caller = std::this_thread::get_id();
    for (int i = 0; i < 200; ++i) {
      run_on_onednn_thread([&] {
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        ran_single = std::this_thread::get_id();
        inside.fetch_sub(1);
      });
    }
  });
  std::thread other([&] {
    for (int i = 0; i < 200; ++i) {
      run_on_onednn_thread([&] {
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        ran_team.insert(std::this_thread::get_id());
        inside.fetch_sub(1);
      });
    }
  });
  one.join();
  other.join();
  CHECK(ran_single == single_caller);
  REQUIRE(ran_team.size() == 1);
  CHECK(*ran_team.begin() != single_caller);
  CHECK(overlaps.load() == 0);
}

TEST_CASE("onednn thread: a call placed on its caller runs there, single-threaded, in turn",
          "[cpu][onednn]") {
  run_on_onednn_thread([] {});
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::vector<std::thread::id> callers(2), ran(2);
  std::vector<int> threads_inside(2, 0), threads_after(2, 0);
  std::vector<std::thread> workers;
  for (int c = 0; c < 2; ++c) {
    workers.emplace_back([&, c] {
      callers[c] = std::this_thread::get_id();
      for (int i = 0; i < 200; ++i) {
        run_onednn_call(OnednnPlacement::kCaller, [&] {
          if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
          ran[c] = std::this_thread::get_id();
          SingleThreadedOnednn single_threaded;
          threads_inside[c] = omp_get_max_threads();
          inside.fetch_sub(1);
        });
      }
      threads_after[c] = omp_get_max_threads();
    });
  }
  for (std::thread& worker : workers) worker.join();
  for (int c = 0; c < 2; ++c) {
    CHECK(ran[c] == callers[c]);
    CHECK(threads_inside[c] == 1);
    CHECK(threads_after[c] == 2);  // restored: the test runs with OMP_NUM_THREADS=2
  }
  CHECK(overlaps.load() == 0);
}
