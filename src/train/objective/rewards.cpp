#include "train/objective/rewards.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "core/utf8.h"
#include "tokenizer/regex.h"
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

// Reward patterns are Python `re` patterns run by Oniguruma, every search bounded
// (docs/objectives.md#rewards): std::regex, used before, backtracked without end on a pattern
// from the data such as (.|.)*QQQ and overflowed the stack on long completions.
// 10^7 steps is Oniguruma's own default bound for one start position (about a quarter of a second).
constexpr std::uint64_t kMaxRegexSteps = 10'000'000;

std::unique_ptr<tok::Regex> compile(const std::string& pattern, const std::string& where) {
  return std::make_unique<tok::Regex>(pattern, where, tok::Syntax::python);
}

// A function that scores by a regular expression. A search past the bound scores 0 (neither
// matched nor ruled out), warned once per record and counted in rewards/NAME/errors: the run
// goes on, since a recipe's pattern or a record cannot change on --resume.
class PatternReward : public RewardFunction {
 public:
  using RewardFunction::RewardFunction;
  std::optional<std::int64_t> take_errors() override { return std::exchange(errors_, 0); }

 protected:
  // 1 when `regex` (written as `pattern`) matches in the completion.
  double found(const tok::Regex& regex, const std::string& pattern, const RewardSample& s) {
    // Oniguruma reads UTF-8: a completion cut inside a character is searched repaired (U+FFFD).
    const bool valid = find_invalid_utf8(s.completion) == std::string::npos;
    const std::string repaired = valid ? std::string() : repair_utf8(s.completion);
    const tok::BoundedMatch m = regex.search(valid ? std::string_view(s.completion) : std::string_view(repaired), kMaxRegexSteps);
    if (m.over_bound) {
      ++errors_;
      if (warned_.insert(s.where).second)
        spdlog::warn("reward {}: {}: the pattern \"{}\" needs more than {} backtracking steps on a completion of {} bytes "
                     "(nested repetition, as in (a|a)*b): scored 0 (warned once per record; counted in rewards/{}/errors)",
                     name(), s.where, pattern, kMaxRegexSteps, s.completion.size(), name());
    }
    return m.found ? 1.0 : 0.0;
  }

 private:
  std::int64_t errors_ = 0;
  std::set<std::string> warned_;
};

class FieldRegex : public PatternReward {
 public:
  using PatternReward::PatternReward;
  double score(const RewardSample& s) override {
    const std::string pattern = field_text(s, field());
    std::unique_ptr<tok::Regex> regex;
    try {
      regex = compile(pattern, "reward regex: " + s.where + ": field \"" + field() + "\"");
    } catch (const FormatError& e) {
      throw Error(e.what());  // the data's, found while training: ends the step
    }
    return found(*regex, pattern, s);
  }
};

// The last number written in `text` ("-1,234.5" reads -1234.5), if any. [0-9], not \d: Python's
// \d (Oniguruma's too) matches every Unicode digit, which std::stod cannot read. The pattern
// cannot backtrack past linear time, so its search needs no bound.
std::optional<double> last_number(const std::string& text) {
  static const tok::Regex number(R"([-+]?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|[-+]?\.[0-9]+)", "reward numeric",
                                 tok::Syntax::python);
  std::vector<tok::Span> spans;
  number.find_all(text, spans);
  for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
    std::string digits = text.substr(it->begin, it->end - it->begin);
    digits.erase(std::remove(digits.begin(), digits.end(), ','), digits.end());
    try {
      return std::stod(digits);
    } catch (const std::exception&) {  // out of double's range: the one before counts
    }
  }
  return std::nullopt;
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

class Format : public PatternReward {
 public:
  explicit Format(const RewardSpec& spec) : PatternReward(spec) {
    try {
      compile(spec.pattern, "reward.format.pattern");  // a mistake named in the pattern as written
      whole_ = compile("\\A(?:" + spec.pattern + ")\\Z", "reward.format.pattern");
    } catch (const FormatError& e) {
      throw ConfigError(e.what());
    }
  }
  // The whole completion (Python's re.fullmatch): anchored at both ends, so a shorter
  // alternative cannot stand for the whole.
  double score(const RewardSample& s) override { return found(*whole_, spec_.pattern, s); }

 private:
  std::unique_ptr<tok::Regex> whole_;
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
