// tokenizer.json `decoder` section: turning token strings back into text (ByteLevel, Sequence,
// Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder). Each decoder rewrites the list of
// token strings in place, as the Rust crate's decode_chain does; the caller concatenates.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace ctune::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Builds the decoder described by `config`; nullptr for JSON null.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& config, const std::string& where);

}  // namespace ctune::tok
