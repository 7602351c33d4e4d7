#include "infer/sampling.h"

#include <limits>
#include <map>

#include "core/error.h"

namespace ctune::infer {

namespace {
const double kNegInf = -std::numeric_limits<double>::infinity();

// CTRL's penalty, once per distinct token seen: divide positive scores, multiply negative ones.
template <typename T>
void repetition_penalty(T* s, std::int64_t V, const std::vector<std::int64_t>& history, double theta) {
  std::vector<bool> seen(static_cast<std::size_t>(V), false);
  for (auto id : history) {
    if (id < 0 || id >= V || seen[id]) continue;
    seen[id] = true;
    s[id] = s[id] < 0 ? static_cast<T>(s[id] * theta) : static_cast<T>(s[id] / theta);
  }
}

// Bans every token that followed the current last n-1 tokens earlier in the sequence.
template <typename T>
void no_repeat_ngram(T* s, std::int64_t V, const std::vector<std::int64_t>& history, std::int64_t n) {
  const auto len = static_cast<std::int64_t>(history.size());
  if (n <= 0 || len + 1 < n) return;
  for (std::int64_t start = 0; start + n <= len; ++start) {
    bool match = true;
    for (std::int64_t k = 0; k < n - 1 && match; ++k) match = history[start + k] == history[len - (n - 1) + k];
    if (match) {
      const auto banned = history[start + n - 1];
      if (banned >= 0 && banned < V) s[banned] = -std::numeric_limits<T>::infinity();
    }
  }
}

template <typename T>
void penalise(at::Tensor& scores, const std::vector<std::int64_t>& history, const SamplingOptions& o) {
  if (o.repetition_penalty != 1.0) repetition_penalty(scores.data_ptr<T>(), scores.size(0), history, o.repetition_penalty);
  if (o.no_repeat_ngram_size > 0) no_repeat_ngram(scores.data_ptr<T>(), scores.size(0), history, o.no_repeat_ngram_size);
}
}  // namespace

void check_logits(const at::Tensor& logits) {
  if (at::isnan(logits).any().item<bool>() || at::isposinf(logits).any().item<bool>())
    throw FormatError("the model's next-token scores hold NaN or +inf: a weight of the model or its adapter is not finite, "
                      "or the compute dtype overflowed (try --dtype fp32)");
}

at::Tensor process_logits(at::Tensor logits, const std::vector<std::int64_t>& history, const SamplingOptions& o) {
  // float64 stays float64 (beam search over a float64 model compares sums of log-probabilities
  // exactly); everything else is processed in float32.
  auto scores = logits.to(logits.scalar_type() == at::kDouble ? at::kDouble : at::kFloat).contiguous().clone();
  check_logits(scores);
  if (scores.scalar_type() == at::kDouble) {
    penalise<double>(scores, history, o);
  } else {
    penalise<float>(scores, history, o);
  }
  if (!o.do_sample) return scores;
  if (!(o.temperature > 0)) throw ConfigError("temperature must be > 0 when sampling (use greedy decoding instead)");
  scores = scores / o.temperature;
  const auto V = scores.size(0);
  if (o.top_k > 0 && o.top_k < V) {
    // Keep everything at or above the k-th largest score (ties at the threshold survive).
    auto kth = std::get<0>(scores.topk(o.top_k)).min();
    scores = scores.masked_fill(scores < kth, kNegInf);
  }
  if (o.top_p < 1.0) {
    // Ascending sort; drop tokens whose cumulative mass is <= 1 - top_p; keep the best one always.
    auto [sorted, order] = scores.sort(/*dim=*/0, /*descending=*/false);
    auto cumulative = at::softmax(sorted, 0).cumsum(0);
    auto drop = cumulative <= (1.0 - o.top_p);
    drop[V - 1] = false;
    auto remove = at::zeros_like(drop).scatter(0, order, drop);
    scores = scores.masked_fill(remove, kNegInf);
  }
  return scores;
}

std::int64_t choose_token(const at::Tensor& scores, const SamplingOptions& o, at::Generator& gen) {
  if (!o.do_sample) return scores.argmax().item<std::int64_t>();
  auto probs = at::softmax(scores, 0);
  return at::multinomial(probs, 1, false, gen).item<std::int64_t>();
}

std::uint64_t stream_seed(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace ctune::infer
