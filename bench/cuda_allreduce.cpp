// Allreduce bus bandwidth of the cuda plugin's collectives (NCCL underneath)
// beside NCCL called directly on the same GPUs, interleaved in every
// repetition, nccl-tests style: f32 sum, out of place, one rank per GPU
// present in this process; algbw = S / t, busbw = algbw * 2(n-1)/n (0 on one
// GPU: nothing crosses a link, so the figures to read there are the times).
// Then alltoallv of S bytes per rank, S/n to each peer, beside a group of
// ncclSend/ncclRecv per peer (busbw = algbw * (n-1)/n): the difference is
// the plugin's count exchange and its host wait (SPEC §10.7).
//
// The raw side opens libcuda.so.1 and libnccl.so.2 the way the plugin does
// (dlopen; cuGetProcAddress_v2), makes its communicators with
// ncclCommInitAll and calls ncclAllReduce on its own streams, so the
// difference is HAL's. Nothing here asserts on time.
#include <cuda.h>
#include <dlfcn.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "bench_common.h"

namespace {

struct RawCuda {
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&::cuCtxSetCurrent) set_current = nullptr;
  decltype(&::cuMemAlloc) alloc = nullptr;
  decltype(&::cuStreamCreate) stream_create = nullptr;
  decltype(&::cuStreamSynchronize) stream_sync = nullptr;

  bool open(std::string& why) {
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      why = dlerror();
      return false;
    }
    auto get_proc =
        reinterpret_cast<decltype(&::cuGetProcAddress)>(dlsym(library, "cuGetProcAddress_v2"));
    if (get_proc == nullptr) {
      why = "no cuGetProcAddress_v2";
      return false;
    }
    bool ok = true;
    auto resolve = [&](const char* name, auto& slot) {
      void* pointer = nullptr;
      CUdriverProcAddressQueryResult status{};
      if (get_proc(name, &pointer, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
              CUDA_SUCCESS ||
          pointer == nullptr) {
        why = std::string("cannot resolve ") + name;
        ok = false;
      }
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(pointer);
    };
    resolve("cuInit", init);
    resolve("cuDeviceGet", device_get);
    resolve("cuDevicePrimaryCtxRetain", retain);
    resolve("cuCtxSetCurrent", set_current);
    resolve("cuMemAlloc", alloc);
    resolve("cuStreamCreate", stream_create);
    resolve("cuStreamSynchronize", stream_sync);
    return ok && init(0) == CUDA_SUCCESS;
  }
};

struct RawNccl {
  decltype(&::ncclCommInitAll) init_all = nullptr;
  decltype(&::ncclAllReduce) allreduce = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclSend) send = nullptr;  // the alltoallv rows
  decltype(&::ncclRecv) recv = nullptr;

  bool open(std::string& why) {
    void* library = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      why = dlerror();
      return false;
    }
    init_all = reinterpret_cast<decltype(init_all)>(dlsym(library, "ncclCommInitAll"));
    allreduce = reinterpret_cast<decltype(allreduce)>(dlsym(library, "ncclAllReduce"));
    group_start = reinterpret_cast<decltype(group_start)>(dlsym(library, "ncclGroupStart"));
    group_end = reinterpret_cast<decltype(group_end)>(dlsym(library, "ncclGroupEnd"));
    send = reinterpret_cast<decltype(send)>(dlsym(library, "ncclSend"));
    recv = reinterpret_cast<decltype(recv)>(dlsym(library, "ncclRecv"));
    const bool complete = init_all && allreduce && group_start && group_end && send && recv;
    if (!complete) why = "an NCCL entry is missing";
    return complete;
  }
};

// Seconds to microseconds, for printing.
bench::Stats in_us(const bench::Stats& s) {
  return {s.median * 1e6, s.min * 1e6, s.max * 1e6, s.n};
}

bool check(hal_result_t result, const char* what) {
  if (result == HAL_SUCCESS) return true;
  std::fprintf(stderr, "error: %s: %s: %s\n", what, hal_result_string(result),
               hal_error_last_message());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  if (args.flag("--help")) {
    std::printf(
        "usage: cuda_allreduce [--reps N] [--max-bytes N]\n"
        "HAL's cuda plugin (NCCL underneath) vs NCCL called directly: allreduce f32 sum,\n"
        "then alltoallv (vs ncclSend/ncclRecv), over every GPU in this process,\n"
        "1 MiB .. max-bytes; median [min-max].\n");
    return 0;
  }
  const int reps = static_cast<int>(args.integer("--reps", 7));
  const auto max_bytes = static_cast<size_t>(args.integer("--max-bytes", size_t{1} << 30));
  args.finish();

  hal_init_options_t options = HAL_INIT_OPTIONS_INIT;
  options.plugins = "cuda";
  if (!check(hal_init(&options), "hal_init")) return 1;
  uint32_t n = 0;
  hal_device_count(&n);
  if (n == 0) {
    std::fprintf(stderr, "error: the cuda plugin has no device (see halinfo)\n");
    return 1;
  }
  std::vector<hal_device_t> devices(n);
  std::vector<hal_stream_t> streams(n);
  std::vector<void*> send(n), recv(n);
  for (uint32_t i = 0; i < n; ++i) {
    hal_device_get(i, &devices[i]);
    hal_device_properties_t properties{};
    properties.struct_size = sizeof(properties);
    hal_device_get_properties(devices[i], &properties);
    if ((properties.capabilities & HAL_DEVICE_CAP_COLLECTIVES) == 0) {
      std::fprintf(stderr, "error: cuda device %u has no collectives of its own (no NCCL?)\n", i);
      return 1;
    }
    if (!check(hal_stream_create(devices[i], 0, &streams[i]), "hal_stream_create") ||
        !check(hal_mem_alloc(devices[i], HAL_MEMORY_DEVICE, max_bytes, 0, &send[i]),
               "hal_mem_alloc") ||
        !check(hal_mem_alloc(devices[i], HAL_MEMORY_DEVICE, max_bytes, 0, &recv[i]),
               "hal_mem_alloc") ||
        !check(hal_memset_async(send[i], 0, max_bytes, streams[i]), "hal_memset_async")) {
      return 1;
    }
  }
  std::vector<hal_comm_t> comms(n);
  if (!check(hal_comm_init_all(n, devices.data(), nullptr, comms.data()), "hal_comm_init_all")) {
    return 1;
  }

  std::string why;
  RawCuda cu;
  RawNccl nccl;
  std::vector<ncclComm_t> raw_comms(n);
  std::vector<CUstream> raw_streams(n);
  std::vector<CUdeviceptr> raw_send(n), raw_recv(n);
  bool raw = cu.open(why) && nccl.open(why);
  for (uint32_t i = 0; raw && i < n; ++i) {
    CUdevice device = 0;
    CUcontext context = nullptr;
    raw = cu.device_get(&device, static_cast<int>(i)) == CUDA_SUCCESS &&
          cu.retain(&context, device) == CUDA_SUCCESS && cu.set_current(context) == CUDA_SUCCESS &&
          cu.stream_create(&raw_streams[i], CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS &&
          cu.alloc(&raw_send[i], max_bytes) == CUDA_SUCCESS &&
          cu.alloc(&raw_recv[i], max_bytes) == CUDA_SUCCESS;
    if (!raw) why = "CUDA setup of the raw side failed";
  }
  std::vector<int> ordinals(n);
  for (uint32_t i = 0; i < n; ++i) ordinals[i] = static_cast<int>(i);
  if (raw && nccl.init_all(raw_comms.data(), static_cast<int>(n), ordinals.data()) != ncclSuccess) {
    raw = false;
    why = "ncclCommInitAll failed";
  }
  if (!raw) std::printf("# raw NCCL side unavailable: %s\n", why.c_str());

  for (const bool uneven : {false, true}) {
    std::printf("# %s, %u GPU(s) in one process: HAL cuda plugin vs NCCL direct\n",
                uneven ? "alltoallv f32, S/n to each peer" : "allreduce f32 sum", n);
    std::printf("%12s %26s %14s %26s %14s %8s\n", "bytes", "hal_us", "hal_busbw", "nccl_us",
                "nccl_busbw", "ratio");
    const double bus_factor = uneven ? (n - 1.0) / n : 2.0 * (n - 1) / n;
    for (size_t bytes = size_t{1} << 20; bytes <= max_bytes; bytes *= 4) {
      const size_t count = bytes / 4;
      const size_t block = count / n;  // alltoallv: elements to each peer
      const std::vector<size_t> blocks(n, block);
      // One round on every rank, HAL's side.
      auto hal_round = [&](uint32_t i) {
        return uneven ? hal_alltoallv(send[i], blocks.data(), nullptr, recv[i], blocks.data(),
                                      nullptr, HAL_DTYPE_F32, comms[i], streams[i])
                      : hal_allreduce(send[i], recv[i], count, HAL_DTYPE_F32, HAL_REDUCE_SUM,
                                      comms[i], streams[i]);
      };
      auto raw_round = [&](uint32_t i) {
        if (!uneven) {
          nccl.allreduce(reinterpret_cast<void*>(raw_send[i]), reinterpret_cast<void*>(raw_recv[i]),
                         count, ncclFloat32, ncclSum, raw_comms[i], raw_streams[i]);
          return;
        }
        for (uint32_t p = 0; p < n; ++p) {
          const CUdeviceptr at = p * block * 4;
          nccl.send(reinterpret_cast<void*>(raw_send[i] + at), block, ncclFloat32,
                    static_cast<int>(p), raw_comms[i], raw_streams[i]);
          nccl.recv(reinterpret_cast<void*>(raw_recv[i] + at), block, ncclFloat32,
                    static_cast<int>(p), raw_comms[i], raw_streams[i]);
        }
      };
      const int calls = bytes <= (size_t{16} << 20) ? 20 : 5;
      std::vector<double> hal_times, raw_times;
      for (int rep = 0; rep < reps; ++rep) {
        double t0 = bench::now_s();
        for (int c = 0; c < calls; ++c) {
          // One group: hal_group_end runs each rank's alltoallv on a thread
          // of its own, as each waits for its peers' counts.
          hal_group_start();
          for (uint32_t i = 0; i < n; ++i) {
            if (!check(hal_round(i), uneven ? "hal_alltoallv" : "hal_allreduce")) return 1;
          }
          if (!check(hal_group_end(), "hal_group_end")) return 1;
        }
        for (uint32_t i = 0; i < n; ++i) {
          if (!check(hal_stream_synchronize(streams[i]), "hal_stream_synchronize")) return 1;
        }
        hal_times.push_back((bench::now_s() - t0) / calls);
        if (!raw) continue;
        t0 = bench::now_s();
        for (int c = 0; c < calls; ++c) {
          nccl.group_start();
          for (uint32_t i = 0; i < n; ++i) raw_round(i);
          nccl.group_end();
        }
        for (uint32_t i = 0; i < n; ++i) cu.stream_sync(raw_streams[i]);
        raw_times.push_back((bench::now_s() - t0) / calls);
      }
      const bench::Stats hal = bench::summarize(hal_times);
      const double hal_busbw = bytes / hal.median / 1e9 * bus_factor;
      if (raw) {
        const bench::Stats direct = bench::summarize(raw_times);
        const double raw_busbw = bytes / direct.median / 1e9 * bus_factor;
        std::printf("%12zu %26s %14.2f %26s %14.2f %7.3fx\n", bytes,
                    bench::fmt_stats(in_us(hal)).c_str(), hal_busbw,
                    bench::fmt_stats(in_us(direct)).c_str(), raw_busbw, direct.median / hal.median);
      } else {
        std::printf("%12zu %26s %14.2f %26s %14s %8s\n", bytes,
                    bench::fmt_stats(in_us(hal)).c_str(), hal_busbw, "-", "-", "-");
      }
    }
  }
  for (hal_comm_t comm : comms) hal_comm_destroy(comm);
  for (uint32_t i = 0; i < n; ++i) {
    hal_mem_free(send[i]);
    hal_mem_free(recv[i]);
    hal_stream_destroy(streams[i]);
  }
  hal_shutdown();
  return 0;
}
