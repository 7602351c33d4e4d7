#include "train/objective/shared_prompt.h"

#include <algorithm>
#include <stdexcept>

#include "core/error.h"
#include "ops/attention.h"
#include "ops/device.h"

namespace ctune::train {

double layout_cost(const model::ModelConfig& c, RowShape shape) {
  const double H = static_cast<double>(c.hidden_size), d = static_cast<double>(c.head_dim);
  const double nh = static_cast<double>(c.num_attention_heads), nkv = static_cast<double>(c.num_key_value_heads);
  const double I = static_cast<double>(c.arch.moe.experts > 0 ? c.arch.moe.token_width() : c.intermediate_size);
  const double per_token = H * (nh + 2 * nkv) * d + nh * d * H + 3 * H * I;  // q, k, v, o, the MLP
  const double per_pair = 2 * nh * d;                                        // q kᵀ and p v
  double pairs = 0;
  for (std::int64_t q0 = 0; q0 < shape.length; q0 += ops::kBlockQueries) {
    const auto m = std::min(ops::kBlockQueries, shape.length - q0);
    pairs += static_cast<double>(m) * static_cast<double>(q0 + m);
  }
  return static_cast<double>(shape.rows) * (static_cast<double>(shape.length) * per_token + pairs * per_pair);
}

RowShape shared_shape(const std::vector<std::int64_t>& prompt_lengths, const std::vector<std::int64_t>& completion_lengths,
                      std::int64_t group) {
  RowShape s{static_cast<std::int64_t>(prompt_lengths.size()), 1};
  for (std::size_t g = 0; g < prompt_lengths.size(); ++g) {
    std::int64_t length = prompt_lengths[g] - 1;
    for (std::int64_t i = 0; i < group; ++i) length += completion_lengths[g * static_cast<std::size_t>(group) + static_cast<std::size_t>(i)] + 1;
    s.length = std::max(s.length, length);
  }
  return s;
}

void check_share_prompt(const std::string& mode, const model::ModelConfig& config) {
  // A DeltaNet's state runs through a row in order: a completion cannot continue a prompt
  // copy that other completions follow (docs/families.md#gated-deltanet).
  if (config.arch.linear.any() && mode == "always")
    throw ConfigError("objective.share_prompt: \"always\" is not possible for model_type " + config.model_type +
                      ", whose Gated DeltaNet layers read each row in order (expected auto or never)");
}

bool share_prompts_here(const std::string& mode, const model::ModelConfig& config, RowShape separate, RowShape shared) {
  check_share_prompt(mode, config);
  if (config.arch.linear.any()) return false;
  if (mode == "always") return true;
  if (mode == "never") return false;
  return layout_cost(config, shared) < layout_cost(config, separate);
}

TensorBatch share_prompts(const TensorBatch& b, const std::vector<std::int64_t>& prompt_lengths, std::int64_t group, std::int64_t pad_id) {
  const auto rows = b.input_ids.size(0), T = b.input_ids.size(1);
  if (group < 1 || rows % group != 0 || static_cast<std::int64_t>(prompt_lengths.size()) != rows / group)
    throw std::logic_error("share_prompts: rows are not whole groups with one prompt length each");
  const auto ids = b.input_ids.cpu().contiguous(), labels = b.labels.cpu().contiguous(), positions = b.position_ids.cpu().contiguous();
  const auto segments = b.segment_ids.cpu().to(at::kInt).contiguous();
  const auto* I = ids.data_ptr<std::int64_t>();
  const auto* L = labels.data_ptr<std::int64_t>();
  const auto* P = positions.data_ptr<std::int64_t>();
  const auto* S = segments.data_ptr<std::int32_t>();

  std::vector<std::int64_t> used(static_cast<std::size_t>(rows), 0), completions;  // real tokens per row; completion lengths
  for (std::int64_t r = 0; r < rows; ++r) {
    while (used[static_cast<std::size_t>(r)] < T && S[r * T + used[static_cast<std::size_t>(r)]] != 0) ++used[static_cast<std::size_t>(r)];
    const std::int64_t p = prompt_lengths[static_cast<std::size_t>(r / group)], r0 = r - r % group;
    if (p < 1 || p > used[static_cast<std::size_t>(r)]) throw std::logic_error("share_prompts: a prompt longer than its row, or empty");
    for (std::int64_t t = 0; t < p; ++t)
      if (I[r * T + t] != I[r0 * T + t] || P[r * T + t] != P[r0 * T + t] || L[r * T + t] != data::kIgnoreIndex)
        throw std::logic_error("share_prompts: a group's rows do not share their prompt, or it holds a target");
    completions.push_back(used[static_cast<std::size_t>(r)] - p);
  }
  const RowShape shape = shared_shape(prompt_lengths, completions, group);

  const auto n = static_cast<std::size_t>(shape.rows * shape.length);
  std::vector<std::int64_t> in(n, pad_id), lab(n, data::kIgnoreIndex), pos(n, 0), seq(n, 0);
  std::vector<std::int32_t> seg(n, 0), prefix(n, 0);
  for (std::int64_t g = 0; g < shape.rows; ++g) {
    const std::int64_t r0 = g * group, p = prompt_lengths[static_cast<std::size_t>(g)];
    auto at = static_cast<std::size_t>(g * shape.length);
    auto put = [&](std::int64_t r, std::int64_t t, std::int32_t segment, std::int32_t continues) {
      in[at] = I[r * T + t], lab[at] = L[r * T + t], pos[at] = P[r * T + t], seg[at] = segment, prefix[at] = continues, seq[at] = r;
      ++at;
    };
    for (std::int64_t t = 0; t + 1 < p; ++t) put(r0, t, 1, 0);
    for (std::int64_t i = 0; i < group; ++i)
      for (std::int64_t t = p - 1; t < used[static_cast<std::size_t>(r0 + i)]; ++t) put(r0 + i, t, static_cast<std::int32_t>(2 + i), 1);
  }

  const std::vector<std::int64_t> dims = {shape.rows, shape.length};
  const auto device = b.input_ids.device();
  TensorBatch out = b;  // advantages, kept log-probabilities (same target order), examples, counts
  out.input_ids = ops::to_device(at::tensor(in, at::kLong).view(dims), device);
  out.labels = ops::to_device(at::tensor(lab, at::kLong).view(dims), device);
  out.position_ids = ops::to_device(at::tensor(pos, at::kLong).view(dims), device);
  out.segment_ids = ops::to_device(at::tensor(seg, at::kInt).view(dims), device);
  out.prefix_ids = ops::to_device(at::tensor(prefix, at::kInt).view(dims), device);
  out.sequence_ids = ops::to_device(at::tensor(seq, at::kLong).view(dims), device);
  out.rows_per_group = 1;
  return out;
}

}  // namespace ctune::train
