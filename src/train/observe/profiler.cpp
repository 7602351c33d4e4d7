#include "train/observe/profiler.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/file.h"
#include "ops/attention_tiled.h"
#include "ops/profile_regions.h"

namespace ctune::train {

namespace {

enum Category : int {
  kMatmulForward,
  kMatmulBackward,
  kAttention,
  kNorms,
  kRope,
  kActivation,
  kLoss,
  kRecompute,
  kElementwise,
  kCopies,
  kAllocation,
  kFramework,
  kOptimizer,
  kDequantize,
  kCollectives,
  kData,
  kUntracked,
  kCategories
};

constexpr std::array<const char*, kCategories> kNames = {
    "matmul forward", "matmul backward", "attention", "norms",      "RoPE",         "activation (GLU)",
    "loss",           "recompute",       "element-wise", "copies and casts", "allocation", "views, dispatch, autograd",
    "optimizer",      "dequantise",      "collectives", "data",     "untracked"};

// Regions: what a marked scope or a custom function's backward node makes of everything under it.
enum class Region : std::int8_t { none, attention, norm, rope, activation, loss, optimizer, recompute, dequantize, collective, data };

Region region_of_scope(const char* name) {
  namespace r = ops::region;
  static const std::array<std::pair<const char*, Region>, 10> table = {{{r::kAttention, Region::attention},
                                                                        {r::kNorm, Region::norm},
                                                                        {r::kRope, Region::rope},
                                                                        {r::kActivation, Region::activation},
                                                                        {r::kLoss, Region::loss},
                                                                        {r::kOptimizer, Region::optimizer},
                                                                        {r::kRecompute, Region::recompute},
                                                                        {r::kDequantize, Region::dequantize},
                                                                        {r::kCollective, Region::collective},
                                                                        {r::kData, Region::data}}};
  for (const auto& [n, region] : table)
    if (std::strcmp(n, name) == 0) return region;
  return Region::none;
}

// A custom autograd function's node is named after its C++ type (CppNode<...BlockedAttention>).
Region region_of_node(const char* name) {
  static const std::array<std::pair<const char*, Region>, 6> table = {{{"Attention>", Region::attention},
                                                                       {"RMSNorm", Region::norm},
                                                                       {"Rope", Region::rope},
                                                                       {"GatedActivation", Region::activation},
                                                                       {"CrossEntropy", Region::loss},
                                                                       {"Dequantize", Region::dequantize}}};
  for (const auto& [part, region] : table)
    if (std::strstr(name, part)) return region;
  return Region::none;
}

bool named_one_of(const char* name, std::initializer_list<const char*> names) {
  if (std::strncmp(name, "aten::", 6) != 0) return false;
  for (const char* n : names)
    if (std::strcmp(name + 6, n) == 0) return true;
  return false;
}

// outer: the rank-1 GEMM a one-row linear's weight gradient is (mv's backward, through ger).
// addmm_: the chunked loss accumulates the head's gradient in place. (addmv_ is left out: mv
// runs it inside, and a one-row expert's GEMMs would count twice.)
// ctune::gemm: a GEMM ctune runs in oneDNN itself, recorded with mm's operands.
bool is_gemm(const char* n) {
  return named_one_of(n, {"mm", "addmm", "addmm_", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "outer", "_int_mm"}) ||
         std::strcmp(n, ops::region::kGemm) == 0;
}
bool is_copy(const char* n) {
  return named_one_of(n, {"copy_", "_to_copy", "to", "contiguous", "clone", "cat", "_cat", "stack", "index_select", "gather", "flip"});
}
bool is_allocation(const char* n) {
  return named_one_of(n, {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "zero_", "ones", "ones_like", "full",
                          "full_like", "new_zeros", "new_empty", "new_empty_strided", "resize_", "scalar_tensor", "fill_"});
}
bool is_framework(const char* n) {
  return named_one_of(n, {"view", "reshape", "_reshape_alias", "narrow", "select", "slice", "transpose", "t", "expand", "unsqueeze",
                          "squeeze", "permute", "as_strided", "split", "split_with_sizes", "chunk", "alias", "detach", "linear",
                          "matmul", "_unsafe_view", "unbind", "lift_fresh", "result_type", "item", "_local_scalar_dense",
                          "is_nonzero", "set_", "requires_grad_", "view_as", "expand_as", "numpy_T", "size", "stride"});
}

Category categorise(const char* name, Region region, bool backward, bool node) {
  switch (region) {
    case Region::attention: return kAttention;
    case Region::recompute: return kRecompute;
    default: break;
  }
  if (is_gemm(name)) return backward ? kMatmulBackward : kMatmulForward;
  switch (region) {
    case Region::norm: return kNorms;
    case Region::rope: return kRope;
    case Region::activation: return kActivation;
    case Region::loss: return kLoss;
    case Region::optimizer: return kOptimizer;
    case Region::dequantize: return kDequantize;
    case Region::collective: return kCollectives;
    case Region::data: return kData;
    default: break;
  }
  if (node || is_framework(name)) return kFramework;
  if (is_copy(name)) return kCopies;
  if (is_allocation(name)) return kAllocation;
  return kElementwise;
}

// 2 m n k (times the batch) of a GEMM from its operands' shapes, 2 m n for an outer product
// (the K = 1 GEMM it stands for); 0 when they are not the shapes the operator takes.
double gemm_flops(const char* name, c10::ArrayRef<const c10::IValue> in) {
  auto dims = [&](std::size_t i) -> std::vector<std::int64_t> {
    if (i >= in.size() || !in[i].isTensor()) return {};
    return in[i].toTensor().sizes().vec();
  };
  const std::string_view op(std::strncmp(name, "aten::", 6) == 0 ? name + 6 : "mm");  // ctune::gemm takes mm's operands
  // The two matrix operands: mm, bmm, _int_mm, mv, dot take them first; the add variants second.
  const bool with_input = op == "addmm" || op == "addmm_" || op == "baddbmm" || op == "addbmm" || op == "addmv";
  const auto a = dims(with_input ? 1 : 0), b = dims(with_input ? 2 : 1);
  if (a.empty() || b.empty()) return 0;
  if (a.size() == 2 && b.size() == 2 && a[1] == b[0]) return 2.0 * a[0] * a[1] * b[1];
  if (a.size() == 3 && b.size() == 3 && a[0] == b[0] && a[2] == b[1]) return 2.0 * a[0] * a[1] * a[2] * b[2];
  if (a.size() == 2 && b.size() == 1 && a[1] == b[0]) return 2.0 * a[0] * a[1];
  if (a.size() == 1 && b.size() == 1) return op == "dot" ? (a[0] == b[0] ? 2.0 * a[0] : 0) : 2.0 * a[0] * b[0];
  return 0;
}

using Clock = std::chrono::steady_clock;

struct Frame {
  Clock::time_point start;
  double child_s = 0;
  Region region = Region::none;
  bool backward = false;
  Category category = kElementwise;
  std::int32_t name = -1;  // into State::names, only while tracing
};

struct TraceEvent {
  std::int32_t name;
  Category category;
  double start_us, duration_us;
};

}  // namespace

struct StepProfiler::State {
  std::uint64_t thread = 0;
  at::CallbackHandle handle = 0;
  bool in_step = false;
  std::vector<Frame> stack;
  std::array<double, kCategories> seconds{};
  std::array<double, kCategories> flops{};
  double tiled_flops_at_begin = 0;  // ops::tiled_attention_gemm_flops() when the step began
  std::filesystem::path trace_path;
  std::int64_t first_trace_step = 0, trace_steps = 0, step = 0;
  bool tracing = false;
  Clock::time_point origin = Clock::now();
  // The trace's events and their names, interned. Nothing on the operators' path allocates
  // once these are reserved: small allocations interleaved with the step's large tensors
  // fragment the heap (measured: 1.1 GB more resident with a string per event).
  std::vector<TraceEvent> events;
  std::map<std::string, std::int32_t, std::less<>> name_ids;
  std::vector<const std::string*> names;

  std::int32_t intern(const char* name) {
    auto it = name_ids.find(std::string_view(name));
    if (it == name_ids.end()) {
      it = name_ids.emplace(name, static_cast<std::int32_t>(names.size())).first;
      names.push_back(&it->first);
    }
    return it->second;
  }
};

namespace {

// One profiler listens at a time (RecordFunction callbacks are plain function pointers).
StepProfiler::State* g_state = nullptr;
std::mutex g_install;

// Every operator the training thread starts within a step is pushed, and popped when it ends
// (steps begin and end between operators, so the two always pair up).
bool listening(const StepProfiler::State* s) {
  return s && s->in_step && at::RecordFunction::currentThreadId() == s->thread;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  auto* s = g_state;
  if (!listening(s)) return nullptr;
  const char* name = fn.name();
  const bool node = fn.scope() == at::RecordScope::BACKWARD_FUNCTION;
  Region region = fn.scope() == at::RecordScope::USER_SCOPE ? region_of_scope(name) : node ? region_of_node(name) : Region::none;
  Frame f;
  f.backward = node || (!s->stack.empty() && s->stack.back().backward);
  if (region == Region::none && !s->stack.empty()) region = s->stack.back().region;
  f.region = region;
  f.category = categorise(name, region, f.backward, node);
  if (is_gemm(name)) s->flops[f.category] += gemm_flops(name, fn.inputs());
  if (s->tracing) f.name = s->intern(name);
  f.start = Clock::now();
  s->stack.push_back(f);
  return nullptr;
}

void on_end(const at::RecordFunction&, at::ObserverContext*) {
  auto* s = g_state;
  if (!listening(s) || s->stack.empty()) return;
  const auto now = Clock::now();
  const Frame f = s->stack.back();
  s->stack.pop_back();
  const double total = std::chrono::duration<double>(now - f.start).count();
  s->seconds[f.category] += std::max(0.0, total - f.child_s);
  if (!s->stack.empty()) s->stack.back().child_s += total;
  if (s->tracing) {
    s->events.push_back({f.name, f.category, std::chrono::duration<double, std::micro>(f.start - s->origin).count(), total * 1e6});
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The Chrome trace format's complete events ("ph": "X"), written line by line (no JSON tree of
// a hundred thousand events in memory).
void write_trace(const StepProfiler::State& s) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (std::size_t i = 0; i < s.events.size(); ++i) {
    const auto& e = s.events[i];
    out += fmt::format("{{\"name\": {}, \"cat\": \"{}\", \"ph\": \"X\", \"ts\": {:.3f}, \"dur\": {:.3f}, \"pid\": 0, \"tid\": 0}}{}\n",
                       nlohmann::json(*s.names[static_cast<std::size_t>(e.name)]).dump(), kNames[e.category], e.start_us, e.duration_us,
                       i + 1 < s.events.size() ? "," : "");
  }
  out += "]}\n";
  io::write_file_atomic(s.trace_path, out);
}

}  // namespace

StepProfiler::StepProfiler() = default;

StepProfiler::StepProfiler(std::filesystem::path trace_path, std::int64_t first_trace_step, std::int64_t trace_steps)
    : state_(std::make_unique<State>()) {
  std::lock_guard<std::mutex> lock(g_install);
  if (g_state) throw Error("logging.profile: a step profiler is already running in this process");
  state_->thread = at::RecordFunction::currentThreadId();
  state_->trace_path = std::move(trace_path);
  state_->first_trace_step = first_trace_step;
  state_->trace_steps = trace_steps;
  state_->stack.reserve(256);
  if (trace_steps > 0) state_->events.reserve(static_cast<std::size_t>(trace_steps) * 100000);
  g_state = state_.get();
  state_->handle = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                             .needsInputs(true)  // the GEMMs' shapes
                                             .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                                                      at::RecordScope::USER_SCOPE}));
}

StepProfiler::~StepProfiler() {
  if (!state_) return;
  std::lock_guard<std::mutex> lock(g_install);
  at::removeCallback(state_->handle);
  g_state = nullptr;
}

void StepProfiler::begin_step(std::int64_t step) {
  if (!state_) return;
  State& s = *state_;
  s.seconds.fill(0);
  s.flops.fill(0);
  s.tiled_flops_at_begin = ops::tiled_attention_gemm_flops();
  s.stack.clear();
  s.step = step;
  s.tracing = !s.trace_path.empty() && step >= s.first_trace_step && step < s.first_trace_step + s.trace_steps;
  s.in_step = true;
}

StepProfile StepProfiler::end_step(double wall_s, std::int64_t input_tokens) {
  if (!state_) return {};
  tokens_.push_back(static_cast<double>(input_tokens));
  State& s = *state_;
  s.in_step = false;
  double covered = 0;
  for (double v : s.seconds) covered += v;
  s.seconds[kUntracked] = std::max(0.0, wall_s - covered);
  s.flops[kAttention] += ops::tiled_attention_gemm_flops() - s.tiled_flops_at_begin;
  StepProfile out;
  for (int c = 0; c < kCategories; ++c) {
    if (s.seconds[c] > 0) out.seconds.emplace_back(kNames[c], s.seconds[c]);
    out.gemm_flops += s.flops[c];
  }
  out.projection_gemm_flops = s.flops[kMatmulForward] + s.flops[kMatmulBackward];
  steps_.push_back(out);
  if (s.tracing && s.step == s.first_trace_step + s.trace_steps - 1) {
    write_trace(s);
    s.events.clear();
  }
  s.tracing = false;
  return out;
}

void StepProfiler::finish() {
  if (!state_ || state_->events.empty()) return;
  write_trace(*state_);
  state_->events.clear();
}

std::string StepProfiler::table() const {
  if (steps_.empty()) return "";
  const std::size_t first = steps_.size() > 1 ? 1 : 0;
  const double tokens_per_step = median(std::vector<double>(tokens_.begin() + static_cast<std::ptrdiff_t>(first), tokens_.end()));
  std::vector<std::pair<std::string, double>> rows;
  double total = 0;
  for (const char* name : kNames) {
    std::vector<double> per_step;
    for (std::size_t i = first; i < steps_.size(); ++i) {
      double v = 0;
      for (const auto& [n, sec] : steps_[i].seconds)
        if (n == name) v = sec;
      per_step.push_back(v);
    }
    const double m = median(per_step);
    if (m <= 0) continue;
    rows.emplace_back(name, m);
    total += m;
  }
  std::string out = fmt::format("step profile: median of {} steps{}, {:.0f} input tokens per step\n", steps_.size() - first,
                                first ? " (the first left out)" : "", tokens_per_step);
  out += fmt::format("  {:<28} {:>10} {:>7} {:>12}\n", "category", "ms/step", "share", "us/token");
  for (const auto& [name, sec] : rows) {
    out += fmt::format("  {:<28} {:>10.1f} {:>6.1f}% {:>12.2f}\n", name, sec * 1e3, 100.0 * sec / std::max(1e-12, total),
                       sec * 1e6 / std::max(1.0, tokens_per_step));
  }
  out += fmt::format("  {:<28} {:>10.1f} {:>6.1f}% {:>12.2f}", "sum of medians", total * 1e3, 100.0,
                     total * 1e6 / std::max(1.0, tokens_per_step));
  std::vector<double> flops, projection;
  for (std::size_t i = first; i < steps_.size(); ++i) {
    flops.push_back(steps_[i].gemm_flops);
    projection.push_back(steps_[i].projection_gemm_flops);
  }
  out += fmt::format("\n  GEMMs executed: {:.3f} GFLOP/step ({:.2f} MFLOP/token), of which projections, experts and head {:.3f}",
                     median(flops) * 1e-9, median(flops) * 1e-6 / std::max(1.0, tokens_per_step), median(projection) * 1e-9);
  return out;
}

}  // namespace ctune::train
