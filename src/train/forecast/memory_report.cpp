#include "train/forecast/memory_report.h"

#include <unordered_set>

#include <spdlog/spdlog.h>

#include "ops/memory.h"
#include "ops/tensor_pool.h"

namespace ctune::train {

void StateMeter::sample() {
  std::unordered_set<const void*> seen;
  std::int64_t bytes = 0;
  auto count = [&](const at::Tensor& t) {
    if (!t.defined() || !t.has_storage()) return;
    const auto* storage = t.storage().unsafeGetStorageImpl();
    if (seen.insert(storage).second) bytes += static_cast<std::int64_t>(storage->nbytes());
  };
  for (const auto& p : model_->parameters()) {
    count(p);
    count(p.grad());
  }
  for (const auto& g : optimizer_.groups()) {
    for (const auto& p : g.params) {
      count(p);
      count(p.grad());
    }
  }
  peak_ = std::max(peak_, bytes + optimizer_.state_bytes());
}

Json report_memory(const Ledger& ledger, std::int64_t start_bytes, const StateMeter& meter, const at::Device& device) {
  const auto measured = ops::peak_memory(device);
  const double ratio = static_cast<double>(measured) / static_cast<double>(std::max<std::int64_t>(1, ledger.peak_bytes));
  spdlog::info("memory: predicted peak {:.1f} MB, measured {:.1f} MB (measured/predicted {:.3f})",
               static_cast<double>(ledger.peak_bytes) / 1e6, static_cast<double>(measured) / 1e6, ratio);
  spdlog::info("memory: parameters + gradients + optimizer state peaked at {:.1f} MB measured, {:.1f} MB predicted",
               static_cast<double>(meter.peak()) / 1e6, static_cast<double>(ledger.state_bytes) / 1e6);
  const auto pool = ops::tensor_pool_stats();
  spdlog::info("memory: tensor pool: {} requests in place, {:.1f} MB mapped fresh, {:.1f} MB returned; live peak {:.1f} MB, held peak {:.1f} MB",
               pool.in_place, static_cast<double>(pool.fresh_bytes) / 1e6, static_cast<double>(pool.released_bytes) / 1e6,
               static_cast<double>(pool.peak_live_bytes) / 1e6, static_cast<double>(pool.peak_held_bytes) / 1e6);
  Json line = {{"memory", ledger.to_json()}};
  line["memory"]["measured_peak_bytes"] = measured;
  line["memory"]["measured_start_bytes"] = start_bytes;  // resident when training began
  line["memory"]["measured_state_bytes"] = meter.peak();
  return line;
}

void write_memory_record(Json record, const Ledger& ledger, std::int64_t run_peak, bool distributed, MetricsLog& metrics) {
  spdlog::info("memory: the whole run (the final checkpoint and the result included) peaked at {:.1f} MB{}, predicted {:.1f} MB "
               "(measured/predicted {:.3f})",
               static_cast<double>(run_peak) / 1e6, distributed ? " on its largest rank" : "", static_cast<double>(ledger.peak_bytes) / 1e6,
               static_cast<double>(run_peak) / static_cast<double>(std::max<std::int64_t>(1, ledger.peak_bytes)));
  record["memory"]["measured_run_peak_bytes"] = run_peak;
  metrics.write_line(record.dump());
}

}  // namespace ctune::train
