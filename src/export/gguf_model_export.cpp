// Model export: config and tokenizer are read (and refused) before any weight is loaded; then the
// fp32 model (with its adapter), the probe scored on it, the merge, the file, and the check.
#include <torch/csrc/autograd/grad_mode.h>

#include "core/error.h"
#include "core/log.h"
#include "export/gguf_export.h"
#include "export/gguf_import.h"
#include "export/gguf_metadata.h"
#include "export/gguf_names.h"
#include "export/gguf_tensors.h"
#include "export/gguf_vocab.h"
#include "model/weights.h"
#include "peft/adapter_io.h"
#include "peft/lora.h"

namespace ctune::exporter {
namespace fs = std::filesystem;

io::GgmlType parse_gguf_type(const std::string& name, const std::string& where) {
  if (name == "f32" || name == "fp32") return io::GgmlType::F32;
  if (name == "f16" || name == "fp16") return io::GgmlType::F16;
  if (name == "bf16") return io::GgmlType::BF16;
  if (name == "q8_0") return io::GgmlType::Q8_0;
  throw ConfigError(where + ": expected f32, f16, bf16 or q8_0, found \"" + name + "\"");
}

const char* gguf_type_label(io::GgmlType type) {
  switch (type) {
    case io::GgmlType::F16: return "f16";
    case io::GgmlType::BF16: return "bf16";
    case io::GgmlType::Q8_0: return "q8_0";
    default: return "f32";
  }
}

namespace {

// Adds every model tensor (each sparse layer's experts stacked per projection; rope_freqs for
// llama3 scaling, the longrope factors) to `writer`. The tensors are captured by value: they
// share storage with the model, which outlives the write.
void add_model_tensors(io::GgufWriter& writer, model::CausalLM& lm, io::GgmlType type) {
  const auto& c = lm->config();
  const bool permute = gguf_permutes_qk(c);
  std::size_t fallback = 0;
  for (const GgufSource& source : gguf_sources(c, model::hf_state_dict(lm))) {
    const auto& [name, first] = source.parts.front();
    if (source.stacked) {  // stacked when written, so that only one stack is in memory at a time
      const std::vector<std::int64_t> dims = {first.size(1), first.size(0), static_cast<std::int64_t>(source.parts.size())};
      const io::GgmlType stored = storage_type(first, type);
      fallback += stored != type;
      writer.add_tensor(source.gguf, stored, dims, [source, stored] { return encode_tensor(source.value().detach(), stored); });
      continue;
    }
    at::Tensor t = first.detach();
    if (const char p = qk_projection(name); p && permute)
      t = permute_qk_rows(t, p == 'q' ? c.num_attention_heads : c.num_key_value_heads);
    if (gguf_shifts_norm(c, name)) t = t + 1;  // 1-D, so stored F32: the shift is exact to fp32 rounding
    const io::GgmlType stored = storage_type(t, type);
    fallback += stored != type && t.dim() == 2;
    writer.add_tensor(source.gguf, stored, ggml_dims(t), [t, stored] { return encode_tensor(t, stored); });
  }
  if (fallback) spdlog::info("{} weights with rows not a multiple of 32 stored as F16 instead of Q8_0", fallback);
  std::vector<std::pair<std::string, at::Tensor>> rope;
  if (c.rope.type == "llama3") rope.emplace_back(kRopeFreqsName, llama3_rope_factors(c));
  if (c.rope.type == "longrope") rope = longrope_factor_tensors(c.rope);
  for (const auto& [name, factors] : rope) {
    writer.add_tensor(name, io::GgmlType::F32, ggml_dims(factors),
                      [factors = factors] { return encode_tensor(factors, io::GgmlType::F32); });
  }
}

// Replaces every weight of `lm` by the values its stored form reads back as: the model a rounded
// export must reproduce exactly. Done on the unpermuted weights, which gives the same values:
// the Q/K permutation moves whole rows, and F16/BF16 round each value and Q8_0 each block of 32
// along a row on their own.
void round_like_export(model::CausalLM& lm, io::GgmlType type) {
  at::NoGradGuard no_grad;
  for (auto& [name, tensor] : model::hf_state_dict(lm)) {
    const io::GgmlType stored = storage_type(tensor, type);
    if (stored != io::GgmlType::F32) tensor.copy_(round_trip(tensor, stored));
  }
}

}  // namespace

GgufExportReport export_gguf_model(const GgufExportOptions& o) {
  check_output_path(o.out, o.overwrite);
  const model::ModelConfig config = model::load_model_config(o.model_dir);
  check_exportable(config);
  const GgufVocab vocab = read_gguf_vocab(o.model_dir, config);
  const std::vector<std::int64_t> probe = probe_ids(o.model_dir, config.vocab_size);

  auto lm = model::load_causal_lm(o.model_dir, at::kFloat);
  if (!o.adapter_dir.empty()) peft::load_adapter(lm, o.adapter_dir);
  const infer::ScoreResult source = infer::score_tokens(lm, probe, "self-check probe");
  if (!o.adapter_dir.empty()) {
    const std::size_t merged = peft::merge_lora(lm);
    spdlog::info("merged the LoRA adapter of {} into {} layers (fp32)", o.adapter_dir.string(), merged);
  }

  io::GgufWriter writer;
  const std::string name = fs::absolute(o.model_dir).lexically_normal().filename().string();
  write_model_metadata(writer, config, llama_cpp_loadable_name(name.empty() ? "model" : name, vocab), o.type);
  write_vocab_metadata(writer, vocab);
  add_model_tensors(writer, lm, o.type);

  GgufExportReport report;
  report.architecture = gguf_architecture(config);
  report.tensors = writer.tensor_count();
  const std::string what = "GGUF " + std::string(gguf_type_label(o.type)) + " export of " + o.model_dir.string();
  report.check = write_checked(writer, o.out, o.overwrite, [&](const fs::path& file) {
    auto rebuilt = load_gguf_model(*io::GgufFile::open(file));
    const infer::ScoreResult exported = infer::score_tokens(rebuilt, probe, "self-check probe");
    return check_export(source, exported, o.type, [&] {
      round_like_export(lm, o.type);  // the file is written: lm's weights are free to change
      return infer::score_tokens(lm, probe, "self-check probe");
    }, what);
  });
  std::error_code ec;
  report.bytes = fs::file_size(o.out, ec);
  return report;
}

}  // namespace ctune::exporter
