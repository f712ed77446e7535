// Convolution forward, backward data and backward weights at ResNet-50's
// layer shapes through HAL's cpu plugin (the implementation it chooses:
// cpu.onednn) beside oneDNN called directly on the same layouts (plain
// nchw/nhwc activations, oihw/ohwi weights: what HAL is handed; primitives
// made once, outside the timing, as HAL's plans are). The two are timed
// interleaved, one execution each per round, so a busy machine slows both
// alike; milliseconds are the median of the rounds after one warm-up (with
// --best the fastest round: on a machine other work shares, the figure
// closest to what the code costs alone).
// PyTorch CPU, the third peer, is bench/python/conv_torch.py; bench/conv_peers.sh
// runs both and joins the tables.
// Usage: conv_peers [--batch 8] [--reps 5] [--layout nchw|nhwc] [--dtype f32|bf16] [--best]
//                   [--shape TEXT] [--op forward|bwd-data|bwd-weights]
// (--shape: only the shapes whose name contains TEXT; --op: only that op)
// Prints one line per shape and op: "conv <layout> <dtype> <batch> <shape> <op>
// hal_ms onednn_ms".
#include <dnnl.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench_common.h"
#include "hal.h"

namespace {

#define CHECK_HAL(call)                                                  \
  do {                                                                   \
    if (hal_result_t r_ = (call); r_ != HAL_SUCCESS) {                   \
      std::fprintf(stderr, "%s: %s\n", #call, hal_error_last_message()); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

// bench/conv.cpp's six shapes: input channels, spatial size, output channels,
// kernel, stride (padding kernel/2).
struct Shape {
  const char* name;
  int64_t c, hw, k, r, stride;
};

const Shape kShapes[] = {
    {"conv1_7x7s2_3-64_224", 3, 224, 64, 7, 2},  {"res2_1x1_256-64_56", 256, 56, 64, 1, 1},
    {"res2_3x3_64-64_56", 64, 56, 64, 3, 1},     {"res3_3x3_128-128_28", 128, 28, 128, 3, 1},
    {"res4_3x3_256-256_14", 256, 14, 256, 3, 1}, {"res5_1x1_512-2048_7", 512, 7, 2048, 1, 1},
};

struct Options {
  int64_t batch = 8;
  int reps = 5;
  bool nhwc = false;
  bool bf16 = false;
  bool best = false;  // the fastest round instead of the median
  std::string shape;  // only shapes whose name contains it
  std::string op;     // only this op ("forward", "bwd-data", "bwd-weights")
};

// A tensor of dimensions [n, c, h, w] in the layout's memory order.
hal_tensor_desc_t tensor(const Options& o, int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t shape[4] = {n, c, h, w};
  hal_tensor_desc_t t{};
  hal_tensor_desc_contiguous(&t, o.bf16 ? HAL_DTYPE_BF16 : HAL_DTYPE_F32, 4, shape);
  if (o.nhwc) {
    t.strides[1] = 1;
    t.strides[3] = c;
    t.strides[2] = c * w;
    t.strides[0] = c * w * h;
  }
  return t;
}

size_t bytes_of(const hal_tensor_desc_t& t) {
  size_t n = t.dtype == HAL_DTYPE_F32 ? 4 : 2;
  for (uint32_t d = 0; d < t.rank; ++d) n *= static_cast<size_t>(t.shape[d]);
  return n;
}

// One HAL plan with its operands, ready to execute.
struct HalRun {
  hal_op_plan_t plan = nullptr;
  std::vector<void*> buffers;
  std::vector<void*> operands;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::string implementation;
  void execute(hal_stream_t stream) {
    hal_op_exec_args_t args{};
    args.struct_size = sizeof(args);
    args.operand_count = static_cast<uint32_t>(operands.size());
    args.operands = operands.data();
    args.workspace = workspace;
    args.workspace_bytes = workspace_bytes;
    CHECK_HAL(hal_op_execute(plan, &args, stream));
    CHECK_HAL(hal_stream_synchronize(stream));
  }
  ~HalRun() {
    for (void* b : buffers) hal_mem_free(b);
    if (workspace != nullptr) hal_mem_free(workspace);
    hal_op_plan_destroy(plan);
  }
};

void plan_hal(hal_device_t device, hal_stream_t stream, const Options& o, const Shape& s,
              hal_op_kind_t kind, HalRun& run) {
  const int64_t pad = s.r / 2;
  const int64_t out = (s.hw + 2 * pad - s.r) / s.stride + 1;
  hal_op_convolution_desc_t desc{};
  desc.header.struct_size = sizeof(desc);
  desc.header.kind = kind;
  desc.layout = HAL_CHANNELS_FIRST;  // dimensions; the strides say the memory order
  desc.spatial_dims = 2;
  desc.groups = 1;
  for (int d = 0; d < 2; ++d) {
    desc.stride[d] = s.stride;
    desc.dilation[d] = 1;
    desc.pad_begin[d] = desc.pad_end[d] = pad;
  }
  desc.x = tensor(o, o.batch, s.c, s.hw, s.hw);
  desc.y = tensor(o, o.batch, s.k, out, out);
  desc.w = tensor(o, s.k, s.c, s.r, s.r);
  CHECK_HAL(hal_op_plan_create(device, &desc.header, 0, &run.plan));
  hal_op_plan_info_t info{};
  info.struct_size = sizeof(info);
  CHECK_HAL(hal_op_plan_get_info(run.plan, &info));
  run.implementation = info.implementation;
  void *x = nullptr, *w = nullptr, *y = nullptr;
  CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes_of(desc.x), 0, &x));
  CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes_of(desc.w), 0, &w));
  CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, bytes_of(desc.y), 0, &y));
  run.buffers = {x, w, y};
  CHECK_HAL(hal_memset_async(x, 0x3c, bytes_of(desc.x), stream));  // small finite values
  CHECK_HAL(hal_memset_async(w, 0x3c, bytes_of(desc.w), stream));
  CHECK_HAL(hal_memset_async(y, 0x3c, bytes_of(desc.y), stream));
  if (info.workspace_bytes > 0) {
    CHECK_HAL(hal_mem_alloc(device, HAL_MEMORY_DEVICE, info.workspace_bytes, 0, &run.workspace));
    run.workspace_bytes = info.workspace_bytes;
  }
  run.operands = kind == HAL_OP_CONVOLUTION ? std::vector<void*>{x, w, nullptr, nullptr, y}
                 : kind == HAL_OP_CONVOLUTION_BACKWARD_DATA ? std::vector<void*>{y, w, x}
                                                            : std::vector<void*>{x, y, w, nullptr};
}

// oneDNN on the same problem: its primitive, its arguments.
struct DnnlRun {
  dnnl::primitive primitive;
  std::unordered_map<int, dnnl::memory> args;
  std::vector<dnnl::memory> keep;
  void execute(dnnl::stream& stream) {
    primitive.execute(stream, args);
    stream.wait();
  }
};

void plan_dnnl(dnnl::engine& engine, const Options& o, const Shape& s, hal_op_kind_t kind,
               DnnlRun& run) {
  using dnnl::memory;
  const int64_t pad = s.r / 2;
  const int64_t out = (s.hw + 2 * pad - s.r) / s.stride + 1;
  const memory::data_type dt = o.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::format_tag act = o.nhwc ? memory::format_tag::nhwc : memory::format_tag::nchw;
  const memory::desc src({o.batch, s.c, s.hw, s.hw}, dt, act);
  const memory::desc dst({o.batch, s.k, out, out}, dt, act);
  const memory::desc weights({s.k, s.c, s.r, s.r}, dt, memory::format_tag::any);
  const memory::dims strides{s.stride, s.stride}, padding{pad, pad};
  auto fill = [&](const memory::desc& d) {
    memory m(d, engine);
    std::memset(m.get_data_handle(), 0x3c, d.get_size());
    run.keep.push_back(m);
    return m;
  };
  const dnnl::primitive_attr attr;
  dnnl::convolution_forward::primitive_desc forward(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                      dnnl::algorithm::convolution_direct, src, weights, dst,
                                      strides, padding, padding),
      engine);
  if (kind == HAL_OP_CONVOLUTION) {
    run.primitive = dnnl::convolution_forward(forward);
    run.args = {{DNNL_ARG_SRC, fill(src)},
                {DNNL_ARG_WEIGHTS, fill(forward.weights_desc())},
                {DNNL_ARG_DST, fill(dst)}};
  } else if (kind == HAL_OP_CONVOLUTION_BACKWARD_DATA) {
    dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, src, weights,
                                              dst, strides, padding, padding),
        engine, forward);
    run.primitive = dnnl::convolution_backward_data(pd);
    run.args = {{DNNL_ARG_DIFF_DST, fill(dst)},
                {DNNL_ARG_WEIGHTS, fill(pd.weights_desc())},
                {DNNL_ARG_DIFF_SRC, fill(src)}};
  } else {
    dnnl::convolution_backward_weights::primitive_desc pd(
        dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, src, weights,
                                                 dst, strides, padding, padding),
        engine, forward);
    run.primitive = dnnl::convolution_backward_weights(pd);
    run.args = {{DNNL_ARG_SRC, fill(src)},
                {DNNL_ARG_DIFF_DST, fill(dst)},
                {DNNL_ARG_DIFF_WEIGHTS, fill(pd.diff_weights_desc())}};
  }
}

const char* kind_label(hal_op_kind_t kind) {
  return kind == HAL_OP_CONVOLUTION                 ? "forward"
         : kind == HAL_OP_CONVOLUTION_BACKWARD_DATA ? "bwd-data"
                                                    : "bwd-weights";
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--batch") {
      o.batch = std::atoll(next().c_str());
    } else if (arg == "--reps") {
      o.reps = std::atoi(next().c_str());
    } else if (arg == "--layout") {
      o.nhwc = next() == "nhwc";
    } else if (arg == "--dtype") {
      o.bf16 = next() == "bf16";
    } else if (arg == "--best") {
      o.best = true;
    } else if (arg == "--shape") {
      o.shape = next();
    } else if (arg == "--op") {
      o.op = next();
    } else {
      std::fprintf(stderr,
                   "usage: conv_peers [--batch N] [--reps R] [--layout nchw|nhwc] "
                   "[--dtype f32|bf16] [--best] [--shape TEXT] "
                   "[--op forward|bwd-data|bwd-weights]\n");
      return 2;
    }
  }
  setenv("HAL_PLUGINS", "cpu", 0);
  CHECK_HAL(hal_init(nullptr));
  bench::print_machine_line();
  hal_device_t device = nullptr;
  CHECK_HAL(hal_device_get(0, &device));
  hal_stream_t stream = nullptr;
  CHECK_HAL(hal_stream_create(device, 0, &stream));
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream dstream(engine);
  const char* layout = o.nhwc ? "nhwc" : "nchw";
  const char* dtype = o.bf16 ? "bf16" : "f32";
  std::printf("# batch %lld %s %s, %s ms of %d interleaved rounds after a warm-up\n",
              static_cast<long long>(o.batch), layout, dtype, o.best ? "fastest" : "median",
              o.reps);
  std::printf("# conv layout dtype batch shape op hal_ms onednn_ms hal_implementation\n");
  for (const Shape& s : kShapes) {
    if (std::string(s.name).find(o.shape) == std::string::npos) continue;
    for (hal_op_kind_t kind : {HAL_OP_CONVOLUTION, HAL_OP_CONVOLUTION_BACKWARD_DATA,
                               HAL_OP_CONVOLUTION_BACKWARD_WEIGHTS}) {
      if (!o.op.empty() && o.op != kind_label(kind)) continue;
      HalRun hal;
      plan_hal(device, stream, o, s, kind, hal);
      DnnlRun dnnl_run;
      plan_dnnl(engine, o, s, kind, dnnl_run);
      std::vector<double> hal_ms, dnnl_ms;
      for (int rep = 0; rep <= o.reps; ++rep) {
        double start = bench::now_s();
        hal.execute(stream);
        const double t_hal = (bench::now_s() - start) * 1e3;
        start = bench::now_s();
        dnnl_run.execute(dstream);
        const double t_dnnl = (bench::now_s() - start) * 1e3;
        if (rep > 0) {
          hal_ms.push_back(t_hal);
          dnnl_ms.push_back(t_dnnl);
        }
      }
      const bench::Stats hal_stats = bench::summarize(hal_ms);
      const bench::Stats dnnl_stats = bench::summarize(dnnl_ms);
      std::printf("conv %s %s %lld %s %s %.3f %.3f %s\n", layout, dtype,
                  static_cast<long long>(o.batch), s.name, kind_label(kind),
                  o.best ? hal_stats.min : hal_stats.median,
                  o.best ? dnnl_stats.min : dnnl_stats.median, hal.implementation.c_str());
      std::fflush(stdout);
    }
  }
  hal_stream_destroy(stream);
  hal_shutdown();
  return 0;
}
