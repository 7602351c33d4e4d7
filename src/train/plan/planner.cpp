#include "train/plan/planner.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "core/quant_names.h"
#include "core/recipe_schema.h"
#include "ops/memory.h"
#include "train/method/method.h"

namespace ctune::train {

namespace {


// The values each planned key may take here: the recipe's own when set, else the planner's.
struct Domains {
  std::vector<std::string> precision, method, quantize, checkpointing, strategy;
  std::vector<std::pair<std::int64_t, std::int64_t>> batches;  // (micro-batch, accumulation)
  std::vector<bool> chunked, offload;
};

std::vector<bool> bools(const Recipe& r, const std::string& key) {
  if (r.is_auto(key)) return {false, true};
  return {r.get_bool(key)};
}
std::vector<std::string> strings(const Recipe& r, const std::string& key, std::vector<std::string> planner) {
  if (r.is_auto(key)) return planner;
  return {r.get_string(key)};
}

Domains domains(const Recipe& r, const distributed::World& world) {
  Domains d;
  // fp16 needs loss scaling and on a CPU multiplies in fp32 (docs/memory.md): the planner's
  // mixed precision is bf16.
  d.precision = strings(r, "precision", {"fp32", "bf16"});
  d.method = strings(r, "peft.method", {"none", "lora"});
  if (!r.is_null("peft.init_from")) d.method = {"lora"};
  d.quantize = strings(r, "memory.quantize_base", {kQuantNone, kQuantInt8, kQuantNf4});
  d.checkpointing = strings(r, "memory.activation_checkpointing", {"none", "selective", "every_n:2", "full"});
  d.chunked = bools(r, "memory.chunked_loss");
  std::vector<std::string> strategies = {"no_shard"};
  if (world.size > 1) strategies = {"no_shard", "shard_grad_op", "full_shard"};
  if (world.size > world.local_size) strategies.push_back("hybrid_shard");
  d.strategy = strings(r, "distributed.strategy", strategies);
  d.offload = bools(r, "distributed.cpu_offload");
  if (r.is_auto("training.batch_size")) {
    const auto global = r.get_optional_int("training.global_batch_size");
    if (!global) r.fail("training.batch_size", "auto needs training.global_batch_size: the sequences per optimizer step over all ranks, which the planner keeps");
    if (*global % world.size != 0)
      r.fail("training.global_batch_size", std::to_string(*global) + " sequences do not divide over " + std::to_string(world.size) + " ranks");
    const std::int64_t per_rank = *global / world.size;
    if (r.origin("training.grad_accum") != "default")
      r.fail("training.grad_accum", "follows from training.batch_size: auto (global batch / (micro-batch x ranks)); leave it out");
    for (std::int64_t b = 1; b <= per_rank; ++b)
      if (per_rank % b == 0) d.batches.emplace_back(b, per_rank / b);
  } else {
    d.batches.emplace_back(r.get_int("training.batch_size"), r.get_int("training.grad_accum"));
  }
  return d;
}

// How far along the field's order a plan goes (fewer is better among near-ties): sharding
// first with several devices, then mixed precision, LoRA, checkpointing, a quantised base, offload.
int intrusiveness(const Techniques& t) {
  int level = 0;
  if (t.strategy != "no_shard") level += 1;
  if (t.precision != "fp32") level += 2;
  if (t.method != "none") level += 4;
  if (t.checkpointing != "none") level += 8;
  if (t.quantize_base != kQuantNone) level += 16;
  if (t.cpu_offload) level += 32;
  return level;
}

std::string batch_text(const Techniques& t) { return std::to_string(t.batch_size) + " x " + std::to_string(t.grad_accum); }

// The value a planned key has in `t`, as the recipe would hold it.
std::string value_of(const Techniques& t, const std::string& key) {
  if (key == "precision") return t.precision;
  if (key == "peft.method") return t.method;
  if (key == "memory.quantize_base") return t.quantize_base;
  if (key == "memory.activation_checkpointing") return t.checkpointing;
  if (key == "training.batch_size") return batch_text(t);
  if (key == "memory.chunked_loss") return t.chunked_loss ? "true" : "false";
  if (key == "distributed.strategy") return t.strategy;
  if (key == "distributed.cpu_offload") return t.cpu_offload ? "true" : "false";
  return "";
}

// `t` with `key` back at its schema default (and what depends on it: no quantised base without
// LoRA, no offload without parameter shards; the whole per-rank batch in one micro-batch).
Techniques without(Techniques t, const std::string& key) {
  if (key == "precision") t.precision = "fp32";
  if (key == "peft.method") {
    t.method = "none";
    t.quantize_base = kQuantNone;
  }
  if (key == "memory.quantize_base") t.quantize_base = kQuantNone;
  if (key == "memory.activation_checkpointing") t.checkpointing = "none";
  if (key == "training.batch_size") {
    t.batch_size *= t.grad_accum;
    t.grad_accum = 1;
  }
  if (key == "memory.chunked_loss") t.chunked_loss = true;
  if (key == "distributed.strategy") {
    t.strategy = "no_shard";
    t.cpu_offload = false;
  }
  if (key == "distributed.cpu_offload") t.cpu_offload = false;
  return t;
}

// The overrides of one plan of the recipe its candidates share (plan_techniques): its auto keys
// at values any combination can take.
std::vector<std::string> probe_overrides(const Recipe& recipe, const Domains& d) {
  std::vector<std::string> probe;
  if (recipe.is_auto("precision")) probe.push_back("precision=bf16");
  if (recipe.is_auto("peft.method")) probe.push_back("peft.method=lora");
  if (recipe.is_auto("memory.quantize_base")) probe.push_back("memory.quantize_base=none");
  if (recipe.is_auto("memory.activation_checkpointing")) probe.push_back("memory.activation_checkpointing=none");
  if (recipe.is_auto("training.batch_size")) {
    probe.push_back("training.batch_size=" + std::to_string(d.batches.back().first));
    probe.push_back("training.grad_accum=1");
  }
  if (recipe.is_auto("memory.chunked_loss")) probe.push_back("memory.chunked_loss=true");
  if (recipe.is_auto("distributed.strategy")) probe.push_back("distributed.strategy=no_shard");
  if (recipe.is_auto("distributed.cpu_offload")) probe.push_back("distributed.cpu_offload=false");
  return probe;
}

// The fastest candidate that fits; near-ties to the fewest techniques in the field's order.
std::optional<std::size_t> choose(const std::vector<Candidate>& candidates) {
  std::optional<std::size_t> chosen;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    if (!c.fits) continue;
    if (!chosen) {
      chosen = i;
      continue;
    }
    const Candidate& best = candidates[*chosen];
    if (c.time.tokens_per_second() >= 0.98 * best.time.tokens_per_second() &&
        intrusiveness(c.techniques) < intrusiveness(best.techniques))
      chosen = i;
  }
  return chosen;
}

// Why nothing fits in `budget`: below the model's own weights, or the smallest peak reachable
// and what sets it.
std::string nothing_fits(const std::vector<Candidate>& candidates, const std::vector<std::string>& auto_keys, std::int64_t budget) {
  const auto smallest = std::min_element(candidates.begin(), candidates.end(),
                                         [](const Candidate& a, const Candidate& b) { return a.ledger.peak_bytes < b.ledger.peak_bytes; });
  const auto& lines = smallest->ledger.lines;
  const auto dominant = std::max_element(lines.begin(), lines.end(), [](const LedgerLine& a, const LedgerLine& b) {
    return a.name != "peak" && (b.name == "peak" || a.bytes < b.bytes);
  });
  std::int64_t least_weights = smallest->ledger.peak_bytes;
  for (const auto& c : candidates)
    for (const auto& l : c.ledger.lines)
      if (l.name == "weights") least_weights = std::min(least_weights, l.bytes);
  std::ostringstream s;
  if (budget < least_weights) {
    s << "--budget " << format_mb(budget) << " is below the model's own weights: " << format_mb(least_weights) << " at the least, before anything trains";
  } else {
    s << "nothing fits in " << format_mb(budget) << " per device: the smallest peak reachable is " << format_mb(smallest->ledger.peak_bytes) << " (";
    for (std::size_t k = 0; k < auto_keys.size(); ++k) s << (k ? ", " : "") << auto_keys[k] << " " << value_of(smallest->techniques, auto_keys[k]);
    s << "), and its largest line is `" << dominant->name << "` (" << format_mb(dominant->bytes) << ")";
    // A gather between steps sets the same peak whatever the step's switches.
    if (smallest->ledger.peak_between_steps)
      s << "; that peak is " << smallest->ledger.peak_moment << " (" << format_mb(smallest->ledger.peak_moment_bytes)
        << " beside the shards), which no switch of the step moves";
  }
  return s.str();
}

}  // namespace

PlanResult plan_techniques(const Recipe& recipe, const distributed::World& world, std::int64_t budget,
                           const std::function<MachineRates()>& measure_rates, std::optional<std::int64_t> runtime_bytes) {
  PlanResult out;
  out.budget = budget;
  for (const auto& spec : recipe_schema())
    if (spec.planned && recipe.is_auto(spec.key)) out.auto_keys.push_back(spec.key);
  Domains d = domains(recipe, world);

  // One plan of the recipe, its auto keys at values any combination shares (LoRA when the
  // method is the planner's, so that its targets are resolved once): the model, tokenizer and
  // data are read once, and each candidate changes only the techniques (run_plan.h).
  std::vector<std::string> probe = probe_overrides(recipe, d);
  auto with = [&](const std::vector<std::string>& overrides) {
    return recipe.with(overrides);
  };
  RunPlan base;
  try {
    base = plan_run(with(probe), world, PlanScope::shapes);
  } catch (const ConfigError&) {
    if (!recipe.is_auto("peft.method")) throw;
    // LoRA cannot run with this recipe (a quantised reference, say): the method is full.
    std::replace(probe.begin(), probe.end(), std::string("peft.method=lora"), std::string("peft.method=none"));
    base = plan_run(with(probe), world, PlanScope::shapes);
    d.method = {"none"};
  }
  const std::int64_t runtime = runtime_bytes.value_or(ops::memory_now(base.device));
  const std::shared_ptr<const Method> lora = base.method->freezes_base() ? base.method : nullptr;
  const std::shared_ptr<const Method> full = base.method->freezes_base() ? make_method("none") : base.method;
  const bool shared_cores = !base.device.is_cuda();

  // The ledger of every candidate first; the step time once the machine's rates are known.
  auto inputs = [&](const Techniques& t) { return ledger_inputs(base, runtime, t, t.method == "lora" ? lora : full); };
  auto evaluate = [&](const Techniques& t) -> std::optional<Candidate> {
    try {
      Candidate c;
      c.techniques = t;
      c.ledger = estimate_memory(inputs(t));
      c.fits = static_cast<double>(c.ledger.peak_bytes) * (1.0 + kPlanHeadroom) <= static_cast<double>(budget);
      return c;
    } catch (const ConfigError&) {
      return std::nullopt;  // this combination cannot run (full fine-tuning of a bf16 checkpoint in fp32)
    }
  };
  auto time = [&](Candidate& c) { c.time = estimate_step_time(inputs(c.techniques), world, out.rates, shared_cores); };

  for (const auto& precision : d.precision)
    for (const auto& method : d.method)
      for (const auto& quantize : d.quantize) {
        if (quantize != kQuantNone && method != "lora") continue;
        for (const auto& checkpointing : d.checkpointing)
          for (const auto& [micro, accum] : d.batches)
            for (bool chunked : d.chunked)
              for (const auto& strategy : d.strategy)
                for (bool offload : d.offload) {
                  if (offload && strategy != "full_shard" && strategy != "hybrid_shard") continue;
                  Techniques t{precision, method, quantize, checkpointing, micro, accum, chunked, strategy, offload};
                  if (auto c = evaluate(t)) out.candidates.push_back(std::move(*c));
                }
      }
  if (out.candidates.empty()) recipe.fail(out.auto_keys.empty() ? "peft.method" : out.auto_keys.front(), "no combination of the planned keys can run with this recipe");
  const bool any_fits = std::any_of(out.candidates.begin(), out.candidates.end(), [](const Candidate& c) { return c.fits; });
  if (any_fits) {
    out.rates = measure_rates();
    for (auto& c : out.candidates) time(c);
  }
  std::stable_sort(out.candidates.begin(), out.candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.time.tokens_per_second() > b.time.tokens_per_second(); });

  out.chosen = choose(out.candidates);
  if (!out.chosen) {
    out.nothing_fits = nothing_fits(out.candidates, out.auto_keys, budget);
    return out;
  }
  // Why: each switch of the chosen plan against the same plan without it.
  const Candidate& chosen = out.candidates[*out.chosen];
  const Techniques& t = chosen.techniques;
  for (const auto& key : out.auto_keys) {
    const Techniques back = without(t, key);
    if (value_of(back, key) == value_of(t, key)) continue;  // already the default
    SwitchEffect e;
    e.key = key;
    e.value = value_of(t, key);
    e.default_value = value_of(back, key);
    if (auto c = evaluate(back)) {
      time(*c);
      e.peak_without = c->ledger.peak_bytes;
      e.tokens_per_s_without = c->time.tokens_per_second();
      for (const auto& line : chosen.ledger.lines) {
        if (line.name == "peak") continue;
        for (const auto& other : c->ledger.lines) {
          if (other.name != line.name) continue;
          const std::int64_t saved = other.bytes - line.bytes;
          if (std::llabs(saved) >= 100000) e.moved.emplace_back(line.name, saved);
        }
      }
      std::sort(e.moved.begin(), e.moved.end(), [](const auto& a, const auto& b) { return std::llabs(a.second) > std::llabs(b.second); });
    }
    out.why.push_back(std::move(e));
  }
  std::vector<std::string> overrides;
  for (const auto& o : t.overrides()) {
    const std::string key = o.substr(0, o.find('='));
    if (recipe.is_auto(key) || (key == "training.grad_accum" && recipe.is_auto("training.batch_size"))) overrides.push_back(o);
  }
  out.resolved = with(overrides);
  return out;
}

std::string describe_techniques(const Techniques& t, const std::vector<std::string>& keys) {
  std::string text;
  for (const auto& key : keys) text += (text.empty() ? "" : ", ") + value_of(t, key);
  return text;
}

std::string PlanResult::table(std::size_t max_rows) const {
  std::ostringstream s;
  std::size_t fitting = 0;
  for (const auto& c : candidates) fitting += c.fits ? 1 : 0;
  s << candidates.size() << " candidates, " << fitting << " fit in " << format_mb(budget) << " per device with "
    << static_cast<int>(kPlanHeadroom * 100) << "% headroom; fastest first";
  if (candidates.size() > max_rows) s << " (the " << max_rows << " fastest that fit, then the nearest that do not)";
  s << ":\n";
  // A column per planned key, as wide as its name or its widest value.
  std::vector<std::size_t> width;
  for (const auto& key : auto_keys) {
    std::size_t w = key.size() - key.rfind('.') - 1;
    for (const auto& c : candidates) w = std::max(w, value_of(c.techniques, key).size());
    width.push_back(w + 2);
  }
  auto cell = [](const std::string& text, std::size_t w) { return text + std::string(w > text.size() ? w - text.size() : 0, ' '); };
  s << "    ";
  for (std::size_t k = 0; k < auto_keys.size(); ++k) s << cell(auto_keys[k].substr(auto_keys[k].rfind('.') + 1), width[k]);
  s << "      peak MB   tokens/s  fits\n";
  std::vector<std::size_t> rows;
  for (std::size_t i = 0; i < candidates.size() && rows.size() < max_rows; ++i)
    if (candidates[i].fits) rows.push_back(i);
  std::vector<std::size_t> over;
  for (std::size_t i = 0; i < candidates.size(); ++i)
    if (!candidates[i].fits) over.push_back(i);
  std::sort(over.begin(), over.end(), [&](std::size_t a, std::size_t b) { return candidates[a].ledger.peak_bytes < candidates[b].ledger.peak_bytes; });
  for (std::size_t k = 0; k < over.size() && k < 4; ++k) rows.push_back(over[k]);
  if (chosen && std::find(rows.begin(), rows.end(), *chosen) == rows.end()) rows.insert(rows.begin(), *chosen);
  for (std::size_t i : rows) {
    const Candidate& c = candidates[i];
    s << (chosen && *chosen == i ? " -> " : "    ");
    for (std::size_t k = 0; k < auto_keys.size(); ++k) s << cell(value_of(c.techniques, auto_keys[k]), width[k]);
    char tail[96];
    std::snprintf(tail, sizeof tail, "%11.1f %10.0f  %s\n", static_cast<double>(c.ledger.peak_bytes) / 1e6, c.time.tokens_per_second(),
                  c.fits ? "yes" : "no");
    s << tail;
  }
  return s.str();
}

namespace {

// The step-time model's lines by name (seconds), for a benchmark to set beside a profile.
Json step_lines_json(const StepTime& t) {
  Json j = Json::object();
  for (const auto& l : t.lines) j[l.name] = l.seconds;
  return j;
}

}  // namespace

Json PlanResult::to_json() const {
  Json j = {{"budget_bytes", budget}, {"auto_keys", auto_keys}, {"headroom", kPlanHeadroom}};
  j["candidates"] = Json::array();
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    Json overrides = Json::array();
    for (const auto& o : c.techniques.overrides()) overrides.push_back(o);
    j["candidates"].push_back({{"overrides", overrides}, {"describe", describe_techniques(c.techniques, auto_keys)},
                               {"peak_bytes", c.ledger.peak_bytes}, {"tokens_per_s", c.time.tokens_per_second()},
                               {"step_seconds", step_lines_json(c.time)}, {"fits", c.fits}, {"chosen", chosen && *chosen == i}});
  }
  if (!chosen) j["nothing_fits"] = nothing_fits;
  j["why"] = Json::array();
  for (const auto& e : why)
    j["why"].push_back({{"key", e.key}, {"value", e.value}, {"default", e.default_value}, {"peak_without_bytes", e.peak_without},
                        {"tokens_per_s_without", e.tokens_per_s_without}});
  return j;
}

std::string PlanResult::explanation() const {
  std::ostringstream s;
  if (!chosen) return nothing_fits + "\n";
  const Candidate& c = candidates[*chosen];
  s << "plan: ";
  for (std::size_t k = 0; k < auto_keys.size(); ++k) s << (k ? ", " : "") << auto_keys[k] << " " << value_of(c.techniques, auto_keys[k]);
  char line[160];
  std::snprintf(line, sizeof line, "\n  predicted peak %s of %s per device, %.0f tokens/s (step %.2f s)\n", format_mb(c.ledger.peak_bytes).c_str(),
                format_mb(budget).c_str(), c.time.tokens_per_second(), c.time.step_seconds);
  s << line;
  std::istringstream lines(c.time.to_text());
  for (std::string l; std::getline(lines, l);) s << "    " << l << "\n";
  for (const auto& e : why) {
    s << "  " << e.key << " " << e.value << " (not " << e.default_value << "): ";
    if (e.peak_without == 0) {
      s << "the plan cannot run without it\n";
      continue;
    }
    std::snprintf(line, sizeof line, "peak %s -> %s, %.0f -> %.0f tokens/s", format_mb(e.peak_without).c_str(), format_mb(c.ledger.peak_bytes).c_str(),
                  e.tokens_per_s_without, c.time.tokens_per_second());
    s << line;
    for (std::size_t k = 0; k < e.moved.size() && k < 4; ++k)
      s << (k ? ", " : "; ") << e.moved[k].first << " " << (e.moved[k].second > 0 ? "-" : "+") << format_mb(std::llabs(e.moved[k].second));
    s << (e.peak_without > budget ? " (without it, over budget)" : "") << "\n";
  }
  return s.str();
}

}  // namespace ctune::train
