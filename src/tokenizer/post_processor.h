// tokenizer.json `post_processor` section, reduced to what encoding a single sequence needs:
// the ids added before and after it when special tokens are requested (TemplateProcessing's
// `single` template, BertProcessing/RobertaProcessing's cls/sep, Sequence of those; ByteLevel
// adds nothing). Pair templates are not used by ctune.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace ctune::tok {

struct SequenceTemplate {
  std::vector<std::int32_t> prefix;  // ids before the text
  std::vector<std::int32_t> suffix;  // ids after the text
};

// UnsupportedError for an unknown "type", FormatError for malformed templates.
SequenceTemplate read_post_processor(const nlohmann::json& config, const std::string& where);

}  // namespace ctune::tok
