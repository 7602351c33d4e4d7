#include "malformed.h"

#include <cstdint>
#include <fstream>

namespace ctune::testing {
namespace fs = std::filesystem;

namespace {

std::string u64_le(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors image from a header text and `data_bytes` bytes of payload.
std::string image(const std::string& header, std::size_t data_bytes) {
  return u64_le(header.size()) + header + std::string(data_bytes, '\x01');
}

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

std::string tiny_config_json() {
  return R"({"model_type": "llama", "vocab_size": 16, "hidden_size": 8, "intermediate_size": 16,
             "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1})";
}

std::string valid_safetensors_bytes() {
  // 24 bytes for a (F32 [2,3]) then 16 for b (F32 [4]).
  std::string h = R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"b":{"dtype":"F32","shape":[4],"data_offsets":[24,40]}})";
  h.append((8 - h.size() % 8) % 8, ' ');
  return image(h, 40);
}

std::vector<MalformedCase> write_malformed_cases(const fs::path& root) {
  fs::remove_all(root);
  std::vector<MalformedCase> cases;
  const std::string st = "model.safetensors";
  auto add = [&](const std::string& name, Expect kind, const std::string& part, const std::string& file,
                 const std::vector<std::pair<std::string, std::string>>& files, bool with_config = true) {
    fs::path dir = root / name;
    fs::create_directories(dir);
    if (with_config) write(dir / "config.json", tiny_config_json());
    for (const auto& [f, bytes] : files) write(dir / f, bytes);
    cases.push_back({name, dir, kind, part, file});
  };
  const std::string good = valid_safetensors_bytes();
  const std::string a24 = R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";

  // safetensors files
  add("empty_file", Expect::Format, "too short", st, {{st, ""}});
  add("truncated_in_length", Expect::Format, "too short", st, {{st, good.substr(0, 5)}});
  add("header_past_end", Expect::Format, "runs past the end", st, {{st, u64_le(4096) + "{}"}});
  add("header_len_2_pow_63", Expect::Format, "exceeds the limit", st, {{st, u64_le(1ull << 63) + "{}      "}});
  add("invalid_json_header", Expect::Format, "not valid JSON", st, {{st, image("{\"a\":{\"dtype\":", 0)}});
  add("header_not_object", Expect::Format, "must be a JSON object", st, {{st, image("[1,2,3]", 0)}});
  // A number beyond double's range is JSON the parser refuses with its own out_of_range error,
  // which escaped unlocated before (found by fuzzing).
  add("header_number_overflow", Expect::Format, "not valid JSON (number overflow", st,
      {{st, image(R"({"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,24]}})", 24)}});
  add("truncated_data", Expect::Format, "truncated", st, {{st, good.substr(0, good.size() - 7)}});
  add("trailing_bytes", Expect::Format, "trailing bytes", st, {{st, good + "xyz"}});
  add("overlapping_offsets", Expect::Format, "overlaps", st,
      {{st, image("{" + a24 + R"(,"b":{"dtype":"F32","shape":[4],"data_offsets":[20,36]}})", 36)}});
  add("gapped_offsets", Expect::Format, "leaves a gap", st,
      {{st, image("{" + a24 + R"(,"b":{"dtype":"F32","shape":[4],"data_offsets":[32,48]}})", 48)}});
  add("first_offset_not_zero", Expect::Format, "leaves a gap", st,
      {{st, image(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]}})", 32)}});
  add("wrong_byte_count", Expect::Format, "byte count mismatch", st,
      {{st, image(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20)}});
  add("unknown_dtype", Expect::Format, "unknown dtype \"F12\"", st,
      {{st, image(R"({"a":{"dtype":"F12","shape":[2,3],"data_offsets":[0,24]}})", 24)}});
  add("duplicate_tensor", Expect::Format, "appears twice", st,
      {{st, image("{" + a24 + "," + a24 + "}", 24)}});
  add("shape_overflow", Expect::Format, "overflows", st,
      {{st, image(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8)}});
  add("negative_shape", Expect::Format, "non-negative integers", st,
      {{st, image(R"({"a":{"dtype":"F32","shape":[-2,3],"data_offsets":[0,24]}})", 24)}});
  add("offsets_reversed", Expect::Format, "is before begin", st,
      {{st, image(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[24,0]}})", 24)}});
  add("metadata_not_string", Expect::Format, "__metadata__ value", st,
      {{st, image(R"({"__metadata__":{"format":1},)" + a24 + "}", 24)}});

  // sharded index
  const std::string idx = "model.safetensors.index.json";
  const std::string shard = "model-00001-of-00001.safetensors";
  add("index_dotdot_path", Expect::Format, "points outside the checkpoint directory", idx,
      {{idx, R"({"metadata":{},"weight_map":{"a":"../outside.safetensors"}})"}});
  add("index_absolute_path", Expect::Format, "points outside the checkpoint directory", idx,
      {{idx, R"({"metadata":{},"weight_map":{"a":"/etc/passwd"}})"}});
  add("index_missing_shard", Expect::Io, "is missing", idx,
      {{idx, R"({"metadata":{},"weight_map":{"a":")" + shard + R"("}})"}});
  add("index_invalid_json", Expect::Format, "invalid JSON", idx, {{idx, R"({"weight_map": {"a": )"}});
  add("index_no_weight_map", Expect::Format, "weight_map", idx, {{idx, R"({"metadata":{}})"}});
  add("index_tensor_not_in_shard", Expect::Format, "does not contain it", idx,
      {{idx, R"({"weight_map":{"a":")" + shard + R"(","zzz":")" + shard + R"("}})"}, {shard, good}});
  add("index_bad_shard_inside", Expect::Format, "byte count mismatch", shard,
      {{idx, R"({"weight_map":{"a":")" + shard + R"("}})"},
       {shard, image(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20)}});
  add("no_weights", Expect::Io, "no model.safetensors", "no_weights", {});

  // Nesting attacks: a million levels would overflow the stack of any recursive reader.
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  add("header_nested_1e6", Expect::Format, "nested deeper than", st,
      {{st, image("{\"a\":" + deep + "}", 0)}});
  add("index_nested_1e6", Expect::Format, "nested deeper than", idx, {{idx, "{\"weight_map\":" + deep + "}"}});

  // config.json
  auto config_case = [&](const std::string& name, Expect kind, const std::string& part, const std::string& json) {
    add(name, kind, part, "config.json", {{"config.json", json}, {st, good}}, false);
  };
  config_case("config_zero_heads", Expect::Config, "\"num_attention_heads\" must be positive, found 0",
              R"({"model_type":"llama","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":0})");
  config_case("config_heads_not_dividing_hidden", Expect::Config, "not divisible by num_attention_heads",
              R"({"model_type":"llama","vocab_size":16,"hidden_size":10,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":4})");
  config_case("config_kv_heads_not_dividing", Expect::Config, "must be a multiple of num_key_value_heads",
              R"({"model_type":"llama","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":3})");
  config_case("config_qwen3_bad_layer_type", Expect::Unsupported, "layer_types entry \"chunked_attention\" is not supported",
              R"({"model_type":"qwen3","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,"num_attention_heads":2,"layer_types":["full_attention","chunked_attention"]})");
  config_case("config_qwen3_layer_types_length", Expect::Config, "\"layer_types\" must list one entry per layer (2)",
              R"({"model_type":"qwen3","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,"num_attention_heads":2,"layer_types":["full_attention"]})");
  config_case("config_smollm3_no_rope_short", Expect::Config, "\"no_rope_layers\" must list at least one 0/1 entry per layer (2)",
              R"({"model_type":"smollm3","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,"num_attention_heads":2,"no_rope_layers":[1]})");
  config_case("config_gemma2_bad_activation", Expect::Unsupported, "hidden_activation \"relu\" is not supported",
              R"({"model_type":"gemma2","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,"num_attention_heads":2,"hidden_activation":"relu"})");
  config_case("config_gemma2_negative_cap", Expect::Config, "\"attn_logit_softcapping\" must be positive or null, found -1.0",
              R"({"model_type":"gemma2","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,"num_attention_heads":2,"attn_logit_softcapping":-1.0})");
  config_case("config_gemma3_bad_pattern", Expect::Config, "sliding_window_pattern must be positive, found 0",
              R"({"model_type":"gemma3_text","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,"num_attention_heads":2,"sliding_window_pattern":0})");
  config_case("config_gemma3_bidirectional", Expect::Unsupported, "use_bidirectional_attention true",
              R"({"model_type":"gemma3_text","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,"num_attention_heads":2,"use_bidirectional_attention":true})");
  config_case("config_gemma3_local_rope_type", Expect::Unsupported, "rope type \"yarn\" is not supported",
              R"({"model_type":"gemma3_text","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,"num_attention_heads":2,"rope_parameters":{"sliding_attention":{"rope_type":"yarn","factor":2.0}}})");
  const std::string moe = R"("vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":2,"num_attention_heads":2)";
  config_case("config_moe_top_k_past_experts", Expect::Config, "\"num_experts_per_tok\" must be between 1 and num_experts (4), found 5",
              R"({"model_type":"qwen3_moe",)" + moe + R"(,"num_experts":4,"num_experts_per_tok":5})");
  config_case("config_moe_jitter", Expect::Unsupported, "\"router_jitter_noise\" 0.010000 is not supported",
              R"({"model_type":"mixtral",)" + moe + R"(,"router_jitter_noise":0.01})");
  config_case("config_moe_mlp_only_layer", Expect::Config, "\"mlp_only_layers\" entries must be layer indices 0..1, found 7",
              R"({"model_type":"qwen3_moe",)" + moe + R"(,"num_experts":4,"num_experts_per_tok":2,"mlp_only_layers":[7]})");
  config_case("config_moe_sparse_step", Expect::Config, "\"decoder_sparse_step\" must be >= 1, found 0",
              R"({"model_type":"qwen3_moe",)" + moe + R"(,"num_experts":4,"num_experts_per_tok":2,"decoder_sparse_step":0})");
  config_case("config_moe_expert_count", Expect::Config, "\"num_local_experts\" must be between 0 and 1024, found 100000",
              R"({"model_type":"mixtral",)" + moe + R"(,"num_local_experts":100000})");
  // Issue 70's 552 bytes: 16384 tiny experts on each of 1024 layers passed every bound, and
  // `ctune estimate` died by SIGSEGV at 5.3 GB building their modules.
  config_case("config_moe_16384_experts_1024_layers", Expect::Config, "\"num_experts\" must be between 0 and 1024, found 16384",
              R"({"model_type":"qwen3_moe","vocab_size":2,"hidden_size":2,"intermediate_size":1,"moe_intermediate_size":1,)"
              R"("num_hidden_layers":1024,"num_attention_heads":1,"num_experts":16384,"num_experts_per_tok":1})");
  // Each bound alone is met (1024 experts, 1024 layers); together they are 2^20 expert modules.
  config_case("config_moe_module_count", Expect::Config,
              "1024 experts on each of 1024 sparse layers are 1048576 expert modules, past any real model (at most 65536)",
              R"({"model_type":"qwen3_moe","vocab_size":2,"hidden_size":2,"intermediate_size":1,"moe_intermediate_size":1,)"
              R"("num_hidden_layers":1024,"num_attention_heads":1,"num_experts":1024,"num_experts_per_tok":1})");
  config_case("config_gemma3_wrapper_text_config", Expect::Config, "\"text_config\" must be an object, found",
              R"({"model_type":"gemma3","text_config":[1,2]})");
  config_case("config_gemma3_wrapper_text_type", Expect::Unsupported, "text_config model_type \"llama\" is not supported (expected gemma3_text)",
              R"({"model_type":"gemma3","text_config":{"model_type":"llama"}})");
  config_case("config_phi3_longrope_length", Expect::Config, "longrope short_factor and long_factor must have one entry per rotated pair (1), found 2 and 3",
              R"({"model_type":"phi3","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"partial_rotary_factor":0.5,"rope_scaling":{"type":"longrope","short_factor":[1,1],"long_factor":[1,2,3]}})");
  // Rope values each type derives, infinite in the float32 math (transformers raises for the first).
  const std::string phi3 = R"("model_type":"phi3","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":4096)";
  config_case("config_phi3_longrope_original_one", Expect::Config,
              "\"original_max_position_embeddings\" 1 makes longrope's attention factor sqrt(1 + ln(factor 4096.0) / ln(original)) inf, past float32's range",
              "{" + phi3 + R"(,"original_max_position_embeddings":1,"rope_scaling":{"type":"longrope","short_factor":[1,1],"long_factor":[1,2]}})");
  config_case("config_phi3_longrope_attention_factor", Expect::Config,
              "\"attention_factor\" 1e+300 makes the scale of cos and sin 1e+300, past float32's range",
              "{" + phi3 + R"(,"rope_scaling":{"type":"longrope","short_factor":[1,1],"long_factor":[1,2],"attention_factor":1e300}})");
  config_case("config_phi3_longrope_short_factor", Expect::Config, "\"short_factor\" 1e-300 makes the scaled frequency inv_freq / short_factor",
              "{" + phi3 + R"(,"rope_scaling":{"type":"longrope","short_factor":[1,1e-300],"long_factor":[1,2]}})");
  const std::string llama = R"("model_type":"llama","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2)";
  config_case("config_linear_rope_factor", Expect::Config, "\"factor\" 1e-300 makes the scaled frequency inv_freq / factor 9.999999999999999e+299, past float32's range",
              "{" + llama + R"(,"rope_scaling":{"rope_type":"linear","factor":1e-300}})");
  config_case("config_llama3_rope_low_freq_factor", Expect::Config,
              "\"low_freq_factor\" 1e-300 makes the wavelength original_max_position_embeddings / low_freq_factor",
              "{" + llama + R"(,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1e-300,"high_freq_factor":4.0,"original_max_position_embeddings":8192}})");
  config_case("config_rope_theta_tiny", Expect::Config, "\"rope_theta\" 1e-300 makes the fastest rotary frequency",
              "{" + llama + R"(,"rope_theta":1e-300})");
  config_case("config_phi3_dropout", Expect::Unsupported, "resid_pdrop 0.100000 is not supported",
              R"({"model_type":"phi3","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"resid_pdrop":0.1})");
  config_case("config_llama_partial_rotary", Expect::Unsupported, "partial_rotary_factor 0.500000 is not supported for model_type llama",
              R"({"model_type":"llama","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"partial_rotary_factor":0.5})");
  config_case("config_unknown_model_type", Expect::Unsupported, "model_type \"gpt2\" is not supported",
              R"({"model_type":"gpt2","vocab_size":16})");
  config_case("config_unsupported_rope", Expect::Unsupported, "rope type \"yarn\" is not supported",
              R"({"model_type":"llama","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"rope_scaling":{"rope_type":"yarn","factor":4.0}})");
  config_case("config_wrong_type", Expect::Format, "key \"hidden_size\" expected an integer, found a string",
              R"({"model_type":"llama","vocab_size":16,"hidden_size":"8","intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2})");
  // An integral float beyond int64 was cast to an integer (undefined behaviour; found by fuzzing).
  config_case("config_integral_float_beyond_64_bits", Expect::Format, "key \"hidden_size\" expected an integer, found a number",
              R"({"model_type":"llama","vocab_size":16,"hidden_size":1e30,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2})");
  config_case("config_invalid_json", Expect::Format, "invalid JSON", R"({"model_type": "llama",)");
  config_case("config_number_overflow", Expect::Format, "invalid JSON (number overflow",
              R"({"model_type":"llama","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"rms_norm_eps":1e400})");
  config_case("config_missing_key", Expect::Config, "missing required key \"intermediate_size\"",
              R"({"model_type":"llama","vocab_size":16,"hidden_size":8,"num_hidden_layers":1,"num_attention_heads":2})");
  config_case("config_llama3_rope_incomplete", Expect::Config, "requires low_freq_factor",
              R"({"model_type":"llama","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"rope_scaling":{"rope_type":"llama3","factor":8.0}})");
  add("config_missing", Expect::Io, "cannot open", "config.json", {{st, good}}, false);
  config_case("config_nested_1e6", Expect::Format, "nested deeper than",
              R"({"model_type":"llama","rope_scaling":)" + deep + "}");
  config_case("config_absurd_size", Expect::Config, "past any real model",
              R"({"model_type":"llama","vocab_size":16,"hidden_size":1099511627776,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2})");
  config_case("config_absurd_product", Expect::Config, "billion parameters",
              R"({"model_type":"llama","vocab_size":262144,"hidden_size":16777216,"intermediate_size":16777216,"num_hidden_layers":1024,"num_attention_heads":2})");
  // Tiny layers, 2^24 of them: 369 M parameters, but `init` held 22 GB of modules after two minutes.
  config_case("config_absurd_layers", Expect::Config, "\"num_hidden_layers\" is 16777216, past any real model (at most 1024)",
              R"({"model_type":"llama","vocab_size":2,"hidden_size":2,"intermediate_size":1,"num_hidden_layers":16777216,"num_attention_heads":1})");
  config_case("config_max_positions_zero", Expect::Config, "\"max_position_embeddings\" must be positive, found 0",
              R"({"model_type":"llama","vocab_size":16,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2,"max_position_embeddings":0})");
  return cases;
}

}  // namespace ctune::testing
