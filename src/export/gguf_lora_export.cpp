// LoRA adapter export (docs/formats.md#gguf-lora-adapters): general.type "adapter", adapter.type "lora",
// adapter.lora.alpha, and per adapted weight <gguf name>.lora_a (PyTorch [r, in], ne [in, r]) and
// <gguf name>.lora_b ([out, r], ne [r, out]; rows permuted like the weight for llama q/k, and
// reordered like the weight's rows (B) or columns (A) where the family's GGUF form does); a
// sparse layer's experts' pairs stacked like their weights ([experts, r, in], [experts, out, r]).
// llama.cpp scales by alpha / rank; alpha is written as scale * rank so rsLoRA's alpha / sqrt(r)
// comes out right too.
#include <torch/csrc/autograd/grad_mode.h>

#include "core/error.h"
#include "core/log.h"
#include "export/gguf_export.h"
#include "export/gguf_import.h"
#include "export/gguf_names.h"
#include "export/gguf_tensors.h"
#include "model/weights.h"
#include "peft/adapter_io.h"
#include "peft/lora.h"

namespace ctune::exporter {
namespace fs = std::filesystem;

namespace {

constexpr const char* kASuffix = ".lora_A.weight";

struct LoraPair {
  std::string module;  // model.layers.0.self_attn.q_proj
  at::Tensor a, b;     // [r, in], [out, r]
};

std::vector<LoraPair> lora_pairs(model::CausalLM& lm) {
  std::map<std::string, at::Tensor> params;
  for (auto& item : lm->named_parameters(true)) params.emplace(item.key(), item.value());
  std::vector<LoraPair> out;
  for (const auto& [key, value] : params) {
    const std::string suffix = kASuffix;
    if (key.size() <= suffix.size() || key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    LoraPair p;
    p.module = key.substr(0, key.size() - suffix.size());
    p.a = value.detach();
    auto b = params.find(p.module + ".lora_B.weight");
    if (b == params.end()) throw ShapeError(p.module + ": LoRA A without B");
    p.b = b->second.detach();
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

GgufExportReport export_gguf_lora(const GgufExportOptions& o) {
  if (o.adapter_dir.empty()) throw ConfigError("--format gguf-lora: --adapter DIR is required");
  if (o.type == io::GgmlType::Q8_0)
    throw ConfigError("--type q8_0: LoRA tensors are rank-long rows, too short for Q8_0 blocks (use f32, f16 or bf16)");
  check_output_path(o.out, o.overwrite);
  const model::ModelConfig config = model::load_model_config(o.model_dir);
  const std::string arch = gguf_architecture(config);
  const peft::LoraOptions lora = peft::read_adapter_config(o.adapter_dir);
  if (!lora.modules_to_save.empty()) {
    throw UnsupportedError(o.adapter_dir.string() + ": the adapter trained the routers (modules_to_save), which a GGUF LoRA adapter " +
                           "cannot carry; export the merged model instead (--format gguf with --adapter)");
  }
  const std::vector<std::int64_t> probe = probe_ids(o.model_dir, config.vocab_size);

  auto lm = model::load_causal_lm(o.model_dir, at::kFloat);
  peft::load_adapter(lm, o.adapter_dir);
  const infer::ScoreResult source = infer::score_tokens(lm, probe, "self-check probe");

  io::GgufWriter writer;
  const std::string name = fs::absolute(o.adapter_dir).lexically_normal().filename().string();
  writer.set("general.architecture", io::GgufValue::string(arch));
  writer.set("general.type", io::GgufValue::string("adapter"));
  writer.set("general.name", io::GgufValue::string(name.empty() ? "adapter" : name));
  writer.set("adapter.type", io::GgufValue::string("lora"));
  writer.set("adapter.lora.alpha", io::GgufValue::f32(static_cast<float>(peft::lora_scale(lora) * lora.rank)));
  std::vector<std::pair<std::string, at::Tensor>> as, bs;  // keyed by the adapted weight's name
  for (LoraPair& p : lora_pairs(lm)) {
    if (const char proj = qk_projection(p.module + ".weight"); proj && gguf_permutes_qk(config))
      p.b = permute_qk_rows(p.b, proj == 'q' ? config.num_attention_heads : config.num_key_value_heads);
    const LoraChanges changes = lora_changes(gguf_changes(config, p.module + ".weight"), p.module + ".weight");
    p.a = apply_changes(p.a, changes.a);
    p.b = apply_changes(p.b, changes.b);
    as.emplace_back(p.module + ".weight", p.a);
    bs.emplace_back(p.module + ".weight", p.b);
  }
  // A sparse layer's experts are one stacked weight in llama.cpp, so their adapters are one
  // stacked pair too: lora_a [experts, r, in], lora_b [experts, out, r].
  const std::vector<GgufSource> a_sources = gguf_sources(config, as), b_sources = gguf_sources(config, bs);
  for (std::size_t i = 0; i < a_sources.size(); ++i) {
    const at::Tensor a = a_sources[i].value(), b = b_sources[i].value();
    const io::GgmlType type = o.type;
    const std::string& base = a_sources[i].gguf;
    writer.add_tensor(base + ".lora_a", type, ggml_dims(a), [a, type] { return encode_tensor(a, type); });
    writer.add_tensor(base + ".lora_b", type, ggml_dims(b), [b, type] { return encode_tensor(b, type); });
  }
  if (writer.tensor_count() == 0) throw ConfigError(o.adapter_dir.string() + ": the adapter has no LoRA layers");

  GgufExportReport report;
  report.architecture = arch;
  report.tensors = writer.tensor_count();
  const std::string what = "GGUF LoRA export of " + o.adapter_dir.string();
  report.check = write_checked(std::move(writer), o.out, o.overwrite, [&](const fs::path& file) {
    auto gguf = io::GgufFile::open(file);
    auto base_model = model::load_causal_lm(o.model_dir, at::kFloat);
    const std::size_t layers = apply_gguf_lora(base_model, *gguf);
    spdlog::debug("self-check: GGUF adapter applied to {} layers", layers);
    const infer::ScoreResult exported = infer::score_tokens(base_model, probe, "self-check probe");
    return check_export(source, exported, o.type, [&] {
      at::NoGradGuard no_grad;  // F16/BF16: the adapter with A and B rounded as stored
      for (LoraPair& p : lora_pairs(lm)) {
        p.a.copy_(round_trip(p.a, o.type));
        p.b.copy_(round_trip(p.b, o.type));
      }
      return infer::score_tokens(lm, probe, "self-check probe");
    }, [&] { return probe_fp32_noise(base_model, probe, exported); }, what);
  });
  std::error_code ec;
  report.bytes = fs::file_size(o.out, ec);
  return report;
}

}  // namespace ctune::exporter
