// `ctune info DIR`: architecture, parameter count, dtypes and bytes of a checkpoint, read from
// config.json and the safetensors headers only (no tensor is loaded).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json.h"
#include "io/hf_checkpoint.h"
#include "model/config.h"
#include "model/parameter_shapes.h"

namespace ctune::cli {

namespace {

struct InfoOptions {
  std::string dir;
  bool json = false;
};

std::string human_bytes(std::uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

int run_info(const InfoOptions& o) {
  auto config = model::load_model_config(o.dir);
  io::CheckpointReader checkpoint(o.dir);
  std::uint64_t params = 0, bytes = 0;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_dtype;  // dtype -> (params, bytes)
  std::size_t mxfp4 = 0;
  for (const auto& [name, ref] : checkpoint.tensors()) {
    // MXFP4 (quant/mxfp4.h): a blocks byte holds two parameters; the scales hold none.
    const bool blocks = name.size() > 7 && name.compare(name.size() - 7, 7, "_blocks") == 0;
    const bool scales = name.size() > 7 && name.compare(name.size() - 7, 7, "_scales") == 0;
    const std::uint64_t n = scales ? 0 : ref.info->numel() * (blocks ? 2 : 1);
    mxfp4 += blocks ? 1 : 0;
    auto& slot = by_dtype[blocks || scales ? "MXFP4" : io::dtype_name(ref.info->dtype)];
    slot.first += n;
    slot.second += ref.info->nbytes();
    params += n;
    bytes += ref.info->nbytes();
  }
  const auto& c = config;
  char rope[128];
  std::snprintf(rope, sizeof(rope), "%s, theta %g", c.rope.type.c_str(), c.rope.theta);
  if (c.rope.type != "default") std::snprintf(rope + std::strlen(rope), sizeof(rope) - std::strlen(rope), ", factor %g", c.rope.factor);
  if (c.rope.partial_rotary_factor != 1.0)
    std::snprintf(rope + std::strlen(rope), sizeof(rope) - std::strlen(rope), ", on %lld of %lld dims per head",
                  (long long)c.rope.rotary_dim(c.head_dim), (long long)c.head_dim);

  if (o.json) {
    Json dtypes = Json::object();
    for (const auto& [name, v] : by_dtype) dtypes[name] = {{"parameters", v.first}, {"bytes", v.second}};
    Json out = {{"model_type", c.model_type},
                {"layers", c.num_hidden_layers},
                {"hidden_size", c.hidden_size},
                {"intermediate_size", c.intermediate_size},
                {"num_attention_heads", c.num_attention_heads},
                {"num_key_value_heads", c.num_key_value_heads},
                {"head_dim", c.head_dim},
                {"vocab_size", c.vocab_size},
                {"tie_word_embeddings", c.tie_word_embeddings},
                {"rope", {{"type", c.rope.type}, {"theta", c.rope.theta}, {"factor", c.rope.factor}}},
                {"parameters", params},
                {"bytes", bytes},
                {"tensors", checkpoint.tensors().size()},
                {"files", checkpoint.files().size()},
                {"dtypes", dtypes}};
    std::cout << out.dump(2) << std::endl;
    return 0;
  }
  std::printf("%-22s %s%s\n", "model_type", c.model_type.c_str(),
              c.wrapper_type.empty() ? "" : (" (the text model of a " + c.wrapper_type + " checkpoint; other parts not loaded)").c_str());
  const std::string intermediate = c.intermediate_size > 0 ? "intermediate " + std::to_string(c.intermediate_size) : "no dense MLP";
  std::printf("%-22s %lld layers, hidden %lld, %s\n", "architecture", (long long)c.num_hidden_layers, (long long)c.hidden_size,
              intermediate.c_str());
  std::printf("%-22s %lld query / %lld key-value heads, head_dim %lld%s%s\n", "attention", (long long)c.num_attention_heads,
              (long long)c.num_key_value_heads, (long long)c.head_dim,
              c.arch.qkv_bias ? ", q/k/v bias" : "", c.arch.qk_norm ? (c.arch.attention_sinks ? ", q/k norm, sinks" : ", q/k norm")
                                                                  : (c.arch.attention_sinks ? ", sinks" : ""));
  if (const auto& l = c.arch.linear; l.any()) {
    const auto n = std::count(l.layers.begin(), l.layers.end(), true);
    std::printf("%-22s %lld of %lld layers: %lld query-key / %lld value heads of %lld / %lld, conv %lld%s\n", "gated deltanet",
                (long long)n, (long long)c.num_hidden_layers, (long long)l.key_heads, (long long)l.value_heads,
                (long long)l.key_dim, (long long)l.value_dim, (long long)l.conv_kernel,
                c.arch.attn_output_gate ? "; attention output gated" : "");
  }
  if (const auto& m = c.arch.moe; m.experts > 0) {
    const auto sparse = std::count(m.sparse_layers.begin(), m.sparse_layers.end(), true);
    std::printf("%-22s %lld on %lld of %lld layers, %lld per token%s, %lld wide%s\n", "experts", (long long)m.experts,
                (long long)sparse, (long long)c.num_hidden_layers, (long long)m.top_k, m.normalize_top_k ? " (renormalised)" : "",
                (long long)m.intermediate,
                m.shared_intermediate > 0 ? ("; a shared expert " + std::to_string(m.shared_intermediate) + " wide, sigmoid-gated").c_str() : "");
  }
  if (const auto window = c.arch.sliding_window()) {
    const auto windowed = std::count_if(c.arch.layer_windows.begin(), c.arch.layer_windows.end(), [](std::int64_t w) { return w > 0; });
    std::printf("%-22s %lld positions on %lld of %lld layers\n", "sliding window", (long long)*window, (long long)windowed,
                (long long)c.num_hidden_layers);
  }
  if (c.arch.attn_softcap > 0 || c.arch.final_softcap > 0) {
    std::printf("%-22s attention %g, logits %g (0: none)\n", "soft-caps", c.arch.attn_softcap, c.arch.final_softcap);
  }
  if (c.arch.norm_offset || c.arch.sandwich_norms) {
    std::printf("%-22s %s%s%s\n", "norms", c.arch.norm_offset ? "(1 + w) scale" : "w scale",
                c.arch.sandwich_norms ? ", 4 per layer (sandwich)" : "", c.arch.embed_scale ? "; embeddings x sqrt(hidden)" : "");
  }
  std::printf("%-22s %lld%s\n", "vocab", (long long)c.vocab_size, c.tie_word_embeddings ? " (tied embeddings)" : "");
  std::printf("%-22s %s\n", "rope", rope);
  std::printf("%-22s %llu (%.3f B)\n", "parameters", (unsigned long long)params, params / 1e9);
  std::printf("%-22s %s in %zu tensors, %zu file%s\n", "weights", human_bytes(bytes).c_str(), checkpoint.tensors().size(),
              checkpoint.files().size(), checkpoint.files().size() == 1 ? "" : "s");
  for (const auto& [name, v] : by_dtype) {
    std::printf("%-22s %llu parameters, %s\n", ("  " + name).c_str(), (unsigned long long)v.first, human_bytes(v.second).c_str());
  }
  if (mxfp4 > 0) std::printf("%-22s %zu MXFP4 tensors, dequantised to the compute dtype at load\n", "quantised", mxfp4);
  const std::int64_t implied = model::parameter_count(model::parameter_shapes(c));
  if (static_cast<std::int64_t>(params) != implied) {
    std::printf("note: config.json implies %lld parameters; the files hold %llu\n", (long long)implied,
                (unsigned long long)params);
  }
  return 0;
}

}  // namespace

CLI::App* add_info_command(CLI::App& app, Action& run) {
  auto opts = std::make_shared<InfoOptions>();
  auto* cmd = app.add_subcommand("info", "Architecture, parameter count, dtypes and weight bytes of a checkpoint");
  cmd->add_option("dir", opts->dir, "Hugging Face model directory")->required();
  cmd->add_flag("--json", opts->json, "Print the same facts as JSON");
  cmd->callback([opts, &run] { run = [opts] { return run_info(*opts); }; });
  return cmd;
}

}  // namespace ctune::cli
