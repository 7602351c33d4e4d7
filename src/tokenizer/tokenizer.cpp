// The Tokenizer base: encode = encode_ordinary + bos/eos.
#include "tokenizer/tokenizer.h"

namespace ctune::tok {

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool special_as_text) const {
  std::vector<std::int32_t> ids = encode_ordinary(text, special_as_text);
  if (!add_special) return ids;
  if (special_.add_bos && special_.bos) ids.insert(ids.begin(), *special_.bos);
  if (special_.add_eos && special_.eos) ids.push_back(*special_.eos);
  return ids;
}

std::string decode_generated(const Tokenizer& tokenizer, const std::vector<std::int64_t>& ids) {
  std::vector<std::int32_t> known;
  for (const auto id : ids)
    if (id >= 0 && id < static_cast<std::int64_t>(tokenizer.vocab_size())) known.push_back(static_cast<std::int32_t>(id));
  return tokenizer.decode(known, true);
}

}  // namespace ctune::tok
