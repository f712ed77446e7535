// Device-to-device copy and fill bandwidth of HAL's cpu plugin against glibc
// memcpy / memset on one thread, in the same run, interleaved.
//
//   hal memcpy   hal_memcpy_async(dst, src) + hal_stream_synchronize, each copy
//   libc memcpy  memcpy between two pre-touched host buffers
//   hal memset   hal_memset_async(dst) + hal_stream_synchronize, each fill
//   libc memset  memset of a pre-touched host buffer
//
// The HAL buffers are two HAL_MEMORY_DEVICE allocations on one device, warmed
// (filled and copied once) before timing. Bandwidth is bytes copied (or set)
// per second, 1 GB = 1e9 bytes; a copy's read+write traffic is twice that.
#include <sys/mman.h>

#include <string>
#include <vector>

#include "bench_common.h"

namespace {

constexpr double kGoalRatio = 0.90;

void usage() {
  std::printf(
      "usage: copy_bandwidth [options]\n"
      "\n"
      "Bandwidth of hal_memcpy_async / hal_memset_async (+ hal_stream_synchronize after each)\n"
      "between HAL_MEMORY_DEVICE buffers of the cpu plugin, against glibc memcpy / memset\n"
      "(one thread, pre-touched buffers), interleaved in every repetition.\n"
      "\n"
      "  --reps N          repetitions (default 9)\n"
      "  --sizes LIST      comma-separated sizes with K/M/G suffixes (default 64K,1M,16M,256M)\n"
      "  --bytes-per-sample N  bytes moved per sample; small sizes repeat the operation\n"
      "                    (default 256M)\n"
      "  --plugins LIST    hal_init_options_t.plugins (default \"cpu\")\n"
      "  --thp             madvise(MADV_HUGEPAGE) the host buffers of the libc peer\n"
      "  --json            print the results as JSON instead of the table\n"
      "  --help            this text\n"
      "\n"
      "Reported: GB/s (1e9 bytes copied or set per second), median [min-max], and the\n"
      "ratio hal/libc computed within each repetition. Goal: hal >= %.0f%% of libc.\n",
      kGoalRatio * 100);
}

bool parse_size(const std::string& s, size_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || v == 0) return false;
  unsigned long long mult = 1;
  const std::string suffix = end;
  if (suffix == "K" || suffix == "k" || suffix == "KiB")
    mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB")
    mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB")
    mult = 1ull << 30;
  else if (!suffix.empty())
    return false;
  *out = static_cast<size_t>(v * mult);
  return true;
}

std::string size_name(size_t bytes) {
  if (bytes % (1u << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.empty() ? "unknown" : line;
}

// KiB of the mapping that contains |p| backed by transparent huge pages
// (AnonHugePages in /proc/self/smaps), or -1 when unknown.
long long huge_page_kib(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = addr >= lo && addr < hi;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::atoll(line.c_str() + 14);
  }
  return -1;
}

std::string huge_pages_note(const void* a, const void* b) {
  return std::to_string(huge_page_kib(a) / 1024) + " + " + std::to_string(huge_page_kib(b) / 1024) +
         " MiB";
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  if (args.flag("--help") || args.flag("-h")) {
    usage();
    return 0;
  }
  const long long reps = args.integer("--reps", 9);
  const std::string sizes_arg = args.str("--sizes", "64K,1M,16M,256M");
  const std::string per_sample_arg = args.str("--bytes-per-sample", "256M");
  const std::string plugins = args.str("--plugins", "cpu");
  const bool thp = args.flag("--thp");
  const bool json = args.flag("--json");
  args.finish();

  std::vector<size_t> sizes;
  for (size_t pos = 0; pos <= sizes_arg.size();) {
    const size_t comma = std::min(sizes_arg.find(',', pos), sizes_arg.size());
    size_t sz = 0;
    if (!parse_size(sizes_arg.substr(pos, comma - pos), &sz)) {
      std::fprintf(stderr, "error: bad --sizes '%s'\n", sizes_arg.c_str());
      return 2;
    }
    sizes.push_back(sz);
    pos = comma + 1;
  }
  size_t per_sample = 0;
  if (!parse_size(per_sample_arg, &per_sample)) {
    std::fprintf(stderr, "error: bad --bytes-per-sample '%s'\n", per_sample_arg.c_str());
    return 2;
  }
  const size_t max_size = *std::max_element(sizes.begin(), sizes.end());

  bench::NoiseMeter noise;

  // ---- HAL buffers ----
  hal_device_properties_t props{};
  hal_device_t device = bench::hal_open_device(plugins, "cpu", 0, &props);
  hal_stream_t stream = nullptr;
  BENCH_HAL_CHECK(hal_stream_create(device, 0, &stream));
  void* hsrc = nullptr;
  void* hdst = nullptr;
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, max_size, 0, &hsrc));
  BENCH_HAL_CHECK(hal_mem_alloc(device, HAL_MEMORY_DEVICE, max_size, 0, &hdst));
  BENCH_HAL_CHECK(hal_memset_async(hsrc, 0x5a, max_size, stream));
  BENCH_HAL_CHECK(hal_memset_async(hdst, 0x00, max_size, stream));
  BENCH_HAL_CHECK(hal_memcpy_async(hdst, hsrc, max_size, stream));
  BENCH_HAL_CHECK(hal_stream_synchronize(stream));

  // Check the result once where device memory is readable by the host.
  std::string verified = "not checked (device lacks HAL_DEVICE_CAP_UNIFIED_ADDRESSING)";
  if (props.capabilities & HAL_DEVICE_CAP_UNIFIED_ADDRESSING) {
    const auto* d = static_cast<const unsigned char*>(hdst);
    size_t bad = 0;
    for (size_t i = 0; i < max_size; ++i) bad += d[i] != 0x5a;
    BENCH_HAL_CHECK(hal_memset_async(hdst, 0xa5, max_size, stream));
    BENCH_HAL_CHECK(hal_stream_synchronize(stream));
    size_t bad_set = 0;
    for (size_t i = 0; i < max_size; ++i) bad_set += d[i] != 0xa5;
    if (bad || bad_set) {
      verified = "WRONG: " + std::to_string(bad) + " bytes differ after hal_memcpy_async, " +
                 std::to_string(bad_set) + " after hal_memset_async";
      std::fprintf(stderr, "warning: HAL results are wrong: %s\n", verified.c_str());
    } else {
      verified = "ok (" + size_name(max_size) + " copied and set, checked byte by byte)";
    }
  }

  // ---- libc buffers ----
  const size_t host_bytes = (max_size + 4095) / 4096 * 4096;
  auto* csrc = static_cast<unsigned char*>(std::aligned_alloc(4096, host_bytes));
  auto* cdst = static_cast<unsigned char*>(std::aligned_alloc(4096, host_bytes));
  if (!csrc || !cdst) {
    std::fprintf(stderr, "error: cannot allocate 2 x %zu host bytes\n", host_bytes);
    return 1;
  }
  if (thp) {
    madvise(csrc, host_bytes, MADV_HUGEPAGE);
    madvise(cdst, host_bytes, MADV_HUGEPAGE);
  }
  std::memset(csrc, 0x5a, host_bytes);
  std::memset(cdst, 0x00, host_bytes);
  std::memcpy(cdst, csrc, host_bytes);

  // ---- variants ----
  enum { kHalCopy, kLibcCopy, kHalSet, kLibcSet, kVariants };
  const char* names[kVariants] = {"hal memcpy", "libc memcpy", "hal memset", "libc memset"};
  // GB/s of one sample of |iters| operations of |size| bytes.
  auto run = [&](int variant, size_t size, size_t iters) {
    const double t0 = bench::now_s();
    for (size_t i = 0; i < iters; ++i) {
      switch (variant) {
        case kHalCopy:
          BENCH_HAL_CHECK(hal_memcpy_async(hdst, hsrc, size, stream));
          BENCH_HAL_CHECK(hal_stream_synchronize(stream));
          break;
        case kLibcCopy:
          std::memcpy(cdst, csrc, size);
          bench::clobber_memory();
          break;
        case kHalSet:
          BENCH_HAL_CHECK(hal_memset_async(hdst, static_cast<uint8_t>(i), size, stream));
          BENCH_HAL_CHECK(hal_stream_synchronize(stream));
          break;
        case kLibcSet:
          std::memset(cdst, static_cast<int>(i & 0xff), size);
          bench::clobber_memory();
          break;
      }
    }
    const double dt = bench::now_s() - t0;
    bench::do_not_optimize(cdst[0]);
    return static_cast<double>(size) * static_cast<double>(iters) / dt / 1e9;
  };

  struct Cell {
    std::vector<double> gbs[kVariants];
    std::vector<double> copy_ratio, set_ratio;
  };
  std::vector<Cell> cells(sizes.size());
  std::vector<size_t> iters(sizes.size());
  for (size_t s = 0; s < sizes.size(); ++s) {
    iters[s] = std::max<size_t>(1, per_sample / sizes[s]);
    for (int v = 0; v < kVariants; ++v) run(v, sizes[s], std::max<size_t>(1, iters[s] / 4));
  }
  for (long long r = 0; r < reps; ++r) {
    for (size_t s = 0; s < sizes.size(); ++s) {
      double g[kVariants];
      for (int k = 0; k < kVariants; ++k) {
        const int v = static_cast<int>((k + r) % kVariants);
        g[v] = run(v, sizes[s], iters[s]);
        cells[s].gbs[v].push_back(g[v]);
      }
      cells[s].copy_ratio.push_back(g[kHalCopy] / g[kLibcCopy]);
      cells[s].set_ratio.push_back(g[kHalSet] / g[kLibcSet]);
    }
  }
  const double other = noise.other_vcpus();
  // THP backing of the buffers (src + dst) after the run: it changes large-copy bandwidth a lot.
  const std::string hal_huge = huge_pages_note(hsrc, hdst);
  const std::string libc_huge = huge_pages_note(csrc, cdst);

  const std::string thp_mode = read_first_line("/sys/kernel/mm/transparent_hugepage/enabled");
  if (json) {
    bench::Json j("copy_bandwidth");
    j.note("device", props.name);
    j.note_number("compute_units", props.compute_units);
    j.note("verified", verified);
    j.note("thp_sysfs", thp_mode);
    j.note("host_buffers_madvise_hugepage", thp ? "yes" : "no");
    j.note("hal_buffers_anon_huge_pages", hal_huge);
    j.note("libc_buffers_anon_huge_pages", libc_huge);
    j.note_number("reps", static_cast<double>(reps));
    j.note_number("noise_other_vcpus", other);
    for (size_t s = 0; s < sizes.size(); ++s) {
      const std::string sz = size_name(sizes[s]);
      for (int v = 0; v < kVariants; ++v)
        j.result(std::string(names[v]) + " " + sz, "GB/s", bench::summarize(cells[s].gbs[v]));
      j.result("memcpy ratio hal/libc " + sz, "ratio", bench::summarize(cells[s].copy_ratio));
      j.result("memset ratio hal/libc " + sz, "ratio", bench::summarize(cells[s].set_ratio));
    }
    j.print();
  } else {
    bench::print_machine_line();
    std::printf("# device: %s, %u compute units (the plugin may split a copy across them)\n",
                props.name, props.compute_units);
    std::printf("# HAL results: %s\n", verified.c_str());
    std::printf("# THP (sysfs): %s; libc buffers %s\n", thp_mode.c_str(),
                thp ? "madvise(MADV_HUGEPAGE)" : "plain aligned_alloc");
    std::printf("# backed by huge pages (AnonHugePages, src + dst): hal %s, libc %s\n",
                hal_huge.c_str(), libc_huge.c_str());
    std::printf(
        "# %lld reps, interleaved; GB/s = 1e9 bytes copied or set per second, "
        "one thread on the libc side\n",
        reps);
    bench::Table t({"size", "op", "ops/sample", "hal GB/s", "libc GB/s", "hal/libc %", "goal"});
    for (size_t s = 0; s < sizes.size(); ++s) {
      for (int op = 0; op < 2; ++op) {
        const int hv = op == 0 ? kHalCopy : kHalSet;
        const int lv = op == 0 ? kLibcCopy : kLibcSet;
        bench::Stats ratio = bench::summarize(op == 0 ? cells[s].copy_ratio : cells[s].set_ratio);
        ratio.median *= 100;
        ratio.min *= 100;
        ratio.max *= 100;
        const std::string goal = std::string(">= ") + bench::fmt(kGoalRatio * 100, 0) + "% (" +
                                 (ratio.median >= kGoalRatio * 100 ? "met" : "missed") + ")";
        t.row({size_name(sizes[s]), op == 0 ? "memcpy" : "memset", std::to_string(iters[s]),
               bench::fmt_stats(bench::summarize(cells[s].gbs[hv])),
               bench::fmt_stats(bench::summarize(cells[s].gbs[lv])), bench::fmt_stats(ratio, 1),
               goal});
      }
    }
    t.print();
    std::printf("# hal/libc %% is computed within each repetition; median [min-max]\n");
    std::printf("# noise: other processes used %.2f vCPU during the run\n", other);
  }

  std::free(csrc);
  std::free(cdst);
  BENCH_HAL_CHECK(hal_mem_free(hsrc));
  BENCH_HAL_CHECK(hal_mem_free(hdst));
  BENCH_HAL_CHECK(hal_stream_destroy(stream));
  BENCH_HAL_CHECK(hal_shutdown());
  return 0;
}
