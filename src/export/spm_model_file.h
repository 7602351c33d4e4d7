// A SentencePiece `tokenizer.model` read directly from its protobuf bytes (torch-free, no
// libsentencepiece): the pieces with their scores and types, the trainer's model type and byte
// fallback, and the normalizer flags llama.cpp needs (add_dummy_prefix,
// remove_extra_whitespaces). Only the fields GGUF export needs are decoded; everything else is
// skipped by wire type. Field numbers from sentencepiece_model.proto: ModelProto.pieces = 1
// (SentencePiece: piece = 1, score = 2, type = 3 [default NORMAL]), trainer_spec = 2
// (model_type = 3 [default UNIGRAM], byte_fallback = 35), normalizer_spec = 3
// (add_dummy_prefix = 3, remove_extra_whitespaces = 4, both default true).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ctune::exporter {

struct SpmPiece {
  std::string piece;
  float score = 0.0f;
  std::int32_t type = 1;  // 1 normal, 2 unknown, 3 control, 4 user defined, 5 unused, 6 byte
};

struct SpmModelFile {
  std::vector<SpmPiece> pieces;  // in id order
  std::int32_t model_type = 1;   // 1 unigram, 2 BPE, 3 word, 4 char
  bool byte_fallback = false;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
};

// FormatError (naming the file and byte offset) for bytes that are not a valid message.
SpmModelFile read_spm_model_bytes(const std::string& bytes, const std::string& where);
SpmModelFile read_spm_model_file(const std::filesystem::path& path);

}  // namespace ctune::exporter
