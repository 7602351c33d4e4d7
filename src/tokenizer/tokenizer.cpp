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

}  // namespace ctune::tok
