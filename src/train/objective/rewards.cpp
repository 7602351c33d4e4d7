#include "train/objective/rewards.h"

#include <cmath>
#include <regex>

#include "core/error.h"
#include "train/objective/reward_command.h"

namespace ctune::train {
namespace {

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

// The field as text: a string as it is, a number as JSON writes it.
std::string field_text(const RewardSample& s, const std::string& field) {
  const auto& v = s.fields.at(field);  // present: check_fields ran
  return v.is_string() ? v.get<std::string>() : v.dump();
}

class Exact : public RewardFunction {
 public:
  using RewardFunction::RewardFunction;
  double score(const RewardSample& s) override { return trim(s.completion) == trim(field_text(s, field())) ? 1.0 : 0.0; }
};

class Contains : public RewardFunction {
 public:
  using RewardFunction::RewardFunction;
  double score(const RewardSample& s) override {
    const std::string want = field_text(s, field());
    return !want.empty() && s.completion.find(want) != std::string::npos ? 1.0 : 0.0;
  }
};

class FieldRegex : public RewardFunction {
 public:
  using RewardFunction::RewardFunction;
  double score(const RewardSample& s) override {
    const std::string pattern = field_text(s, field());
    try {
      return std::regex_search(s.completion, std::regex(pattern)) ? 1.0 : 0.0;
    } catch (const std::regex_error& e) {
      throw Error("reward regex: " + s.where + ": field \"" + field() + "\" is not a regular expression (" + e.what() + "): " + pattern);
    }
  }
};

// The last number written in `text` ("-1,234.5" reads -1234.5), if any.
std::optional<double> last_number(const std::string& text) {
  static const std::regex number(R"([-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+)");
  std::optional<double> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number); it != std::sregex_iterator(); ++it) {
    std::string digits = it->str();
    digits.erase(std::remove(digits.begin(), digits.end(), ','), digits.end());
    try {
      out = std::stod(digits);
    } catch (const std::exception&) {
    }
  }
  return out;
}

class Numeric : public RewardFunction {
 public:
  using RewardFunction::RewardFunction;
  double score(const RewardSample& s) override {
    const auto& v = s.fields.at(field());
    const std::optional<double> want = v.is_number() ? std::optional<double>(v.get<double>()) : last_number(v.get<std::string>());
    if (!want) throw Error("reward numeric: " + s.where + ": field \"" + field() + "\" holds no number: " + v.dump());
    const auto got = last_number(s.completion);
    return got && std::abs(*got - *want) <= spec_.tolerance ? 1.0 : 0.0;
  }
};

class Format : public RewardFunction {
 public:
  explicit Format(const RewardSpec& spec) : RewardFunction(spec) {
    try {
      pattern_ = std::regex(spec.pattern);
    } catch (const std::regex_error& e) {
      throw ConfigError("reward.format.pattern: not a regular expression (" + std::string(e.what()) + "): " + spec.pattern);
    }
  }
  double score(const RewardSample& s) override { return std::regex_match(s.completion, pattern_) ? 1.0 : 0.0; }

 private:
  std::regex pattern_;
};

class Length : public RewardFunction {
 public:
  using RewardFunction::RewardFunction;
  double score(const RewardSample& s) override {
    const auto L = static_cast<double>(s.completion_tokens), max = static_cast<double>(spec_.max_tokens),
               cache = static_cast<double>(spec_.cache);
    if (L <= max - cache) return 0.0;
    if (L <= max) return (max - cache - L) / std::max(1.0, cache);
    return -1.0;
  }
};

bool reads_field(const std::string& name) { return name == "exact" || name == "contains" || name == "regex" || name == "numeric"; }

}  // namespace

const std::vector<std::string>& reward_names() {
  static const std::vector<std::string> names = {"exact", "contains", "regex", "numeric", "format", "length"};
  return names;
}

std::vector<std::unique_ptr<RewardFunction>> make_rewards(const std::vector<RewardSpec>& specs, std::int64_t max_new_tokens) {
  std::vector<std::unique_ptr<RewardFunction>> out;
  for (RewardSpec spec : specs) {
    const std::string key = "reward." + spec.name;
    if (reads_field(spec.name) && spec.field.empty()) throw ConfigError(key + ".field: missing (the record field it compares with)");
    if (spec.name == "exact") {
      out.push_back(std::make_unique<Exact>(spec));
    } else if (spec.name == "contains") {
      out.push_back(std::make_unique<Contains>(spec));
    } else if (spec.name == "regex") {
      out.push_back(std::make_unique<FieldRegex>(spec));
    } else if (spec.name == "numeric") {
      if (!(spec.tolerance >= 0)) throw ConfigError(key + ".tolerance: expected >= 0, found " + std::to_string(spec.tolerance));
      out.push_back(std::make_unique<Numeric>(spec));
    } else if (spec.name == "format") {
      if (spec.pattern.empty()) throw ConfigError(key + ".pattern: missing (the regular expression a completion must match whole)");
      out.push_back(std::make_unique<Format>(spec));
    } else if (spec.name == "command") {
      out.push_back(std::make_unique<CommandReward>(spec));
    } else if (spec.name == "length") {
      if (spec.max_tokens <= 0) spec.max_tokens = max_new_tokens;
      if (spec.cache < 0 || spec.cache > spec.max_tokens)
        throw ConfigError(key + ".cache: expected 0.." + std::to_string(spec.max_tokens) + " (max_tokens), found " + std::to_string(spec.cache));
      out.push_back(std::make_unique<Length>(spec));
    } else {
      std::string names;
      for (const auto& n : reward_names()) names += (names.empty() ? "" : ", ") + n;
      throw ConfigError("reward." + spec.name + ": no such reward function (built in: " + names + ")");
    }
  }
  return out;
}

void check_fields(const std::vector<std::unique_ptr<RewardFunction>>& rewards, const std::vector<OrderedJson>& records,
                  const std::string& split) {
  for (const auto& r : rewards) {
    if (r->field().empty()) continue;
    for (std::size_t i = 0; i < records.size(); ++i) {
      const auto it = records[i].find(r->field());
      const std::string where = split + " record " + std::to_string(i + 1);
      if (it == records[i].end())
        throw ConfigError("reward." + r->name() + ".field: " + where + " has no field \"" + r->field() + "\"");
      if (!it->is_string() && !it->is_number())
        throw ConfigError("reward." + r->name() + ".field: " + where + ": field \"" + r->field() + "\" expected a string or a number, found " +
                          json_type_name(*it));
    }
  }
}

}  // namespace ctune::train
