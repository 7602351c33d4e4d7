// Model export: config and tokenizer are read (and refused) before any weight is loaded; then the
// fp32 model (with its adapter), the probe scored on it, the merge, the file, and the check.
#include <optional>

#include <torch/csrc/autograd/grad_mode.h>

#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "export/gguf_export.h"
#include "export/gguf_import.h"
#include "export/gguf_metadata.h"
#include "export/gguf_names.h"
#include "export/gguf_tensors.h"
#include "export/gguf_vocab.h"
#include "model/weights.h"
#include "ops/memory.h"
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
    // Permuted, changed and shifted as they are written, so that no copy outlives its tensor's turn.
    const at::Tensor t = first.detach();
    const char projection = permute ? qk_projection(name) : 0;
    const std::int64_t heads = projection == 'q' ? c.num_attention_heads : c.num_key_value_heads;
    const bool shift = gguf_shifts_norm(c, name);  // 1-D, so stored F32: the shift is exact to fp32 rounding
    const std::vector<model::GgufChange> changes = gguf_changes(c, name);
    const io::GgmlType stored = gguf_storage_type(c, name, t, type);
    fallback += stored != type && t.dim() == 2;
    const at::Tensor shape = apply_changes(at::empty(t.sizes(), t.options().device(at::kMeta)), changes);
    writer.add_tensor(source.gguf, stored, ggml_dims(shape), [t, projection, heads, shift, changes, stored] {
      at::Tensor v = apply_changes(projection ? permute_qk_rows(t, heads) : t, changes);
      return encode_tensor(shift ? v + 1 : v, stored);
    });
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
// along a row on their own. A family's changes (which may move columns, and so Q8_0's blocks)
// are applied before the rounding and undone after it.
void round_like_export(model::CausalLM& lm, io::GgmlType type) {
  at::NoGradGuard no_grad;
  const auto& c = lm->config();
  for (auto& [name, tensor] : model::hf_state_dict(lm)) {
    const io::GgmlType stored = gguf_storage_type(c, name, tensor, type);
    if (stored == io::GgmlType::F32) continue;
    const std::vector<model::GgufChange> changes = gguf_changes(c, name);
    tensor.copy_(undo_changes(round_trip(apply_changes(tensor, changes), stored), changes));
  }
}

// Frees the weights of a model that is not used again: the export's source once the file is
// written and the source's scores are taken, so that the read-back model never coexists with it.
void release_weights(model::CausalLM& lm) {
  for (auto& p : lm->parameters(true)) p.set_data(at::empty({0}, p.options()));
}

// The export holds the model in fp32 (what it stores in another dtype converted), rounds it in
// place for a rounded type (copying what it read in place from the mapped files), and once the
// file is written and that model scored, reads the file back into a second fp32 model for the
// self-check, a tensor at a time. Refused before any of it when the process cannot hold the
// largest of these.
void require_export_fits(const fs::path& dir, const model::ModelConfig& config, io::GgmlType type) {
  const io::CheckpointReader checkpoint(dir);
  const model::LoadFootprint f = model::load_footprint(config, checkpoint, at::kFloat);
  ops::require_host_memory("GGUF " + std::string(gguf_type_label(type)) + " export of " + dir.string(),
                           {f.reserved + f.largest, f.reserved + f.largest},
                           "the model in fp32, " + format_bytes(f.reserved) + ", once: converted, rounded or read back for the self-check, and " +
                               "its largest tensor in transit, " + format_bytes(f.largest));
}

}  // namespace

GgufExportReport export_gguf_model(const GgufExportOptions& o) {
  check_output_path(o.out, o.overwrite);
  const model::ModelConfig config = model::load_model_config(o.model_dir);
  check_exportable(config);
  const GgufVocab vocab = read_gguf_vocab(o.model_dir, config);
  const std::vector<std::int64_t> probe = probe_ids(o.model_dir, config.vocab_size);
  require_export_fits(o.model_dir, config, o.type);

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
  report.check = write_checked(std::move(writer), o.out, o.overwrite, [&](const fs::path& file) {
    // The file is written: the source's weights are free to change, and go once they are scored.
    std::optional<infer::ScoreResult> rounded;
    if (o.type != io::GgmlType::F32) {
      round_like_export(lm, o.type);
      rounded = infer::score_tokens(lm, probe, "self-check probe");
    }
    release_weights(lm);
    auto rebuilt = load_gguf_model(*io::GgufFile::open(file));
    const infer::ScoreResult exported = infer::score_tokens(rebuilt, probe, "self-check probe");
    return check_export(source, exported, o.type, [&] { return *rounded; },
                        [&] { return probe_fp32_noise(rebuilt, probe, exported); }, what);
  });
  std::error_code ec;
  report.bytes = fs::file_size(o.out, ec);
  return report;
}

}  // namespace ctune::exporter
