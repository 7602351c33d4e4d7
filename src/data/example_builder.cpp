// Chunked tokenization with located mask boundaries; see example_builder.h.
#include "data/example_builder.h"

#include <algorithm>

#include "core/error.h"

namespace ctune::data {

bool BuildResult::has_target() const {
  return std::any_of(example.labels.begin(), example.labels.end(), [](std::int32_t l) { return l != kIgnoreIndex; });
}

ExampleBuilder::ExampleBuilder(const tok::Tokenizer& tokenizer, bool train_on_input, std::int64_t max_seq_len,
                               bool parse_special_in_content)
    : tok_(tokenizer), train_on_input_(train_on_input), max_seq_len_(max_seq_len), special_as_text_(!parse_special_in_content) {}

// The data's own text: special-token strings in it stay text unless data.parse_special_in_content.
std::vector<std::int32_t> ExampleBuilder::encode(std::string_view text, bool special_as_text) const {
  return tok_.encode(text, /*add_special=*/false, special_as_text);
}

std::int32_t ExampleBuilder::special_id(const std::string& token) const {
  auto it = special_cache_.find(token);
  if (it != special_cache_.end()) return it->second;
  auto id = tok_.token_to_id(token);
  if (!id)
    throw ConfigError("token \"" + token +
                      "\" of the chat format is not in the tokenizer's vocabulary (check data.chat_format and "
                      "data.instruct_template)");
  special_cache_.emplace(token, *id);
  return *id;
}

void ExampleBuilder::encode_chunk(const std::vector<Piece>& pieces, std::size_t begin, std::size_t end,
                                  bool train_all, bool special_as_text, Example& out, std::int64_t& straddles) const {
  std::string text;
  // Segments of equal training flag: (byte offset in text, trained).
  std::vector<std::pair<std::size_t, bool>> segments;
  for (std::size_t k = begin; k < end; ++k) {
    const bool trained = train_all || pieces[k].trained;
    if (segments.empty() || segments.back().second != trained) segments.emplace_back(text.size(), trained);
    text += pieces[k].text;
  }
  if (text.empty()) return;
  const std::vector<std::int32_t> ids = encode(text, special_as_text);
  // Token index where each segment starts.
  std::vector<std::size_t> starts(segments.size() + 1, 0);
  starts.back() = ids.size();
  for (std::size_t s = 1; s < segments.size(); ++s) {
    const std::vector<std::int32_t> prefix = encode(std::string_view(text).substr(0, segments[s].first), special_as_text);
    const auto mismatch = std::mismatch(prefix.begin(), prefix.end(), ids.begin(), ids.end());
    std::size_t at = static_cast<std::size_t>(mismatch.first - prefix.begin());
    if (at != prefix.size()) ++straddles;
    starts[s] = std::max(at, starts[s - 1]);
  }
  for (std::size_t s = 0; s < segments.size(); ++s) {
    for (std::size_t t = starts[s]; t < std::max(starts[s], starts[s + 1]); ++t) {
      out.ids.push_back(ids[t]);
      out.labels.push_back(segments[s].second ? ids[t] : kIgnoreIndex);
    }
  }
}

BuildResult ExampleBuilder::build(const Rendered& rendered) const {
  BuildResult result;
  Example& ex = result.example;
  const std::vector<Piece>& pieces = rendered.pieces();
  std::size_t chunk = 0;
  for (std::size_t k = 0; k <= pieces.size(); ++k) {
    if (k < pieces.size() && !pieces[k].special) continue;
    encode_chunk(pieces, chunk, k, train_on_input_, special_as_text_ && !rendered.parse_special(), ex, result.straddles);
    chunk = k + 1;
    if (k == pieces.size()) break;
    const std::int32_t id = special_id(pieces[k].text);
    ex.ids.push_back(id);
    ex.labels.push_back(train_on_input_ || pieces[k].trained ? id : kIgnoreIndex);
  }
  if (!ex.labels.empty()) ex.labels[0] = kIgnoreIndex;  // nothing precedes the first token
  result.full_length = static_cast<std::int64_t>(ex.ids.size());
  if (max_seq_len_ > 0 && result.full_length > max_seq_len_) {
    result.truncated = true;
    ex.ids.resize(static_cast<std::size_t>(max_seq_len_));
    ex.labels.resize(static_cast<std::size_t>(max_seq_len_));
  }
  return result;
}

}  // namespace ctune::data
