#include "train/forecast/machine.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "core/json.h"
#include "core/log.h"
#include "io/file.h"
#include "ops/compute.h"
#include "ops/tensor_pool.h"
#include "ops/threads.h"
#include "quant/quantized_linear.h"

namespace ctune::train {
namespace fs = std::filesystem;

namespace {

// LibTorch's intra-op threads set for a scope, restored after it (an exception included).
class IntraOpThreads {
 public:
  explicit IntraOpThreads(int threads) : before_(at::get_num_threads()) { ops::use_threads(threads); }
  ~IntraOpThreads() { at::set_num_threads(before_); }
  IntraOpThreads(const IntraOpThreads&) = delete;
  IntraOpThreads& operator=(const IntraOpThreads&) = delete;

 private:
  int before_;
};

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void sync(at::Device device) {
  if (device.is_cuda()) at::zeros({1}, at::TensorOptions().device(device)).item<float>();
}

// The median of `reps` timings of `f` after one untimed run.
template <typename F>
double median_seconds(at::Device device, int reps, F&& f) {
  f();
  sync(device);
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double start = now_s();
    f();
    sync(device);
    t.push_back(now_s() - start);
  }
  std::sort(t.begin(), t.end());
  return std::max(t[t.size() / 2], 1e-9);
}

double gemm_rate(at::Device device, at::ScalarType dtype, std::int64_t m) {
  const std::int64_t k = 2048, n = 2048;
  const auto opts = at::TensorOptions().device(device).dtype(dtype);
  const auto a = at::randn({m, k}, opts), b = at::randn({k, n}, opts);
  // Through the route the model's matmuls take (ops/compute.h: a 16-bit GEMM may run in fp32).
  return 2.0 * m * k * n / median_seconds(device, m >= 2048 ? 3 : 7, [&] { (void)ops::matmul_nn(a, b); });
}

double copy_rate(at::Device device) {
  const std::int64_t n = 16 << 20;  // 64 MB of fp32
  const auto src = at::ones({n}, at::TensorOptions().device(device));
  auto dst = at::empty_like(src);
  return 2.0 * 4 * n / median_seconds(device, 5, [&] { dst.copy_(src); });
}

double dequant_rate(quant::QuantSpec::Kind kind) {
  quant::QuantSpec spec;
  spec.kind = kind;
  const auto w = quant::quantize_weight(at::randn({2048, 2048}), spec);
  return 2048.0 * 2048 / median_seconds(at::kCPU, 3, [&] { (void)w.dequantize(at::kBFloat16); });
}

// The collectives through Gloo; zeros (the planner then counts collectives as free, and says
// so) when this machine refuses the two ranks a socket.
distributed::CollectiveRates collective_rates() {
  // Each rank computes with one thread here (a rank's local sums), as the ranks of a run
  // sharing this machine's cores each do (docs/distributed.md, threads).
  const IntraOpThreads one(1);
  try {
    return distributed::measure_collective_rates();
  } catch (const std::exception& e) {
    spdlog::warn("the collectives could not be measured ({}); plans count them as free", e.what());
    return {};
  }
}

// Seconds per operator of a chain of small ones, forward and backward: what a step pays per
// operator beyond its arithmetic (dominant in tiny models).
double op_overhead() {
  constexpr int kOps = 200;
  auto run = [] {
    auto x = at::ones({8}).set_requires_grad(true);
    auto y = x;
    for (int i = 0; i < kOps / 2; ++i) y = y * 1.0001 + 0.5;
    y.sum().backward();
  };
  return median_seconds(at::kCPU, 5, run) / kOps;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  }
  return "unknown cpu";
}

fs::path cache_file() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const fs::path dir = xdg && *xdg ? fs::path(xdg) / "ctune" : fs::path(home && *home ? home : "/tmp") / ".cache" / "ctune";
  return dir / "machine-rates.json";
}

Json cost_json(const distributed::CollectiveCost& c) { return {{"seconds_per_call", c.seconds_per_call}, {"bytes_per_second", c.bytes_per_second}}; }

distributed::CollectiveCost cost_from(const Json& j) { return {j.at("seconds_per_call"), j.at("bytes_per_second")}; }

Json to_json(const MachineRates& r) {
  return {{"gemm_fp32", r.gemm_fp32},           {"gemm_bf16", r.gemm_bf16},     {"gemm_fp32_small", r.gemm_fp32_small},
          {"gemm_bf16_small", r.gemm_bf16_small}, {"memory_bandwidth", r.memory_bandwidth}, {"dequant_int8", r.dequant_int8},
          {"dequant_nf4", r.dequant_nf4},       {"op_seconds", r.op_seconds},
          {"all_gather", cost_json(r.collectives.all_gather)}, {"reduce_scatter", cost_json(r.collectives.reduce_scatter)},
          {"all_reduce", cost_json(r.collectives.all_reduce)}};
}

MachineRates measure(at::Device device, const std::string& key) {
  // As a run allocates (memory.allocator: fast): a fresh page costs a fault, about 15 us on a
  // virtual machine, which a warm step never pays and glibc's unmapped large blocks always do.
  // Only while measuring: `train --fit` chooses its allocator afterwards.
  const ops::TensorPoolScope pool;
  MachineRates r;
  r.key = key;
  spdlog::info("measuring this machine's rates once (GEMMs, copies, dequantisation, collectives), cached in {}", cache_file().string());
  r.gemm_fp32 = gemm_rate(device, at::kFloat, 2048);
  r.gemm_bf16 = gemm_rate(device, at::kBFloat16, 2048);
  r.gemm_fp32_small = gemm_rate(device, at::kFloat, 256);
  r.gemm_bf16_small = gemm_rate(device, at::kBFloat16, 256);
  r.memory_bandwidth = copy_rate(device);
  r.dequant_int8 = dequant_rate(quant::QuantSpec::Int8);
  r.dequant_nf4 = dequant_rate(quant::QuantSpec::Nf4);
  r.collectives = collective_rates();
  r.op_seconds = op_overhead();
  return r;
}

}  // namespace

double MachineRates::gemm(at::ScalarType dtype, std::int64_t m) const {
  const bool bf = dtype == at::kBFloat16;
  const double big = bf ? gemm_bf16 : gemm_fp32, small = bf ? gemm_bf16_small : gemm_fp32_small;
  if (m >= 2048) return big;
  if (m <= 256) return small * static_cast<double>(std::max<std::int64_t>(m, 16)) / 256.0;  // too few rows to fill the kernel
  const double f = std::log(static_cast<double>(m) / 256.0) / std::log(8.0);
  return small + f * (big - small);
}

MachineRates machine_rates(at::Device device, int threads, bool remeasure) {
  // The route of bf16 GEMMs is part of what was measured: a rate cached before ctune took the
  // fp32 route on this CPU does not answer for it.
  const std::string key = cpu_model() + " | " + device.str() + " | " + std::to_string(threads) + " threads" +
                          (ops::gemm_in_fp32(at::kBFloat16, device) ? " | bf16 GEMMs in fp32" : "");
  const fs::path file = cache_file();
  Json cache = Json::object();
  if (fs::exists(file)) {
    try {
      cache = read_json_file(file);
    } catch (const std::exception& e) {
      spdlog::warn("{}: unreadable ({}), measuring again", file.string(), e.what());
      cache = Json::object();
    }
  }
  if (!remeasure && cache.is_object() && cache.contains(key)) {
    const Json& j = cache[key];
    MachineRates r;
    r.key = key;
    try {
      r.gemm_fp32 = j.at("gemm_fp32");
      r.gemm_bf16 = j.at("gemm_bf16");
      r.gemm_fp32_small = j.at("gemm_fp32_small");
      r.gemm_bf16_small = j.at("gemm_bf16_small");
      r.memory_bandwidth = j.at("memory_bandwidth");
      r.dequant_int8 = j.at("dequant_int8");
      r.dequant_nf4 = j.at("dequant_nf4");
      r.collectives = {cost_from(j.at("all_gather")), cost_from(j.at("reduce_scatter")), cost_from(j.at("all_reduce"))};
      r.op_seconds = j.at("op_seconds");
      if (r.gemm_fp32 > 0 && r.gemm_bf16 > 0 && r.memory_bandwidth > 0) return r;
    } catch (const std::exception&) {
    }
  }
  const MachineRates r = [&] {
    const IntraOpThreads measured_with(threads);
    return measure(device, key);
  }();
  if (!cache.is_object()) cache = Json::object();
  cache[key] = to_json(r);
  try {
    fs::create_directories(file.parent_path());
    io::write_file_atomic(file, cache.dump(1));
  } catch (const std::exception& e) {
    spdlog::warn("{}: the machine's rates could not be cached ({}); measured again next time", file.string(), e.what());
  }
  return r;
}

}  // namespace ctune::train
