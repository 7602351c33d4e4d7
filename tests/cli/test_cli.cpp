// The real `ctune` binary, as a user runs it: help on every subcommand, init -> info -> score
// on a fresh random model, score --json against the PyTorch reference, and one clear error
// line with a non-zero exit for every malformed checkpoint and bad argument.
#include <gtest/gtest.h>

#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/json.h"
#include "malformed.h"
#include "margins.h"
#include "run_ctune.h"

namespace fs = std::filesystem;
using ctune::Json;

namespace {

const fs::path kData = CTUNE_TEST_DATA_DIR;
using ctune::testing::ctune;
using ctune::testing::ctune_on_terminal;
using ctune::testing::expect_one_line_failure;
using ctune::testing::slurp;
int lines(const std::string& s) { return ctune::testing::count_lines(s); }

TEST(Cli, HelpOnEverySubcommand) {
  for (const std::string sub : {"", "init", "score", "tokenize", "info"}) {
    auto r = sub.empty() ? ctune({"--help"}) : ctune({sub, "--help"});
    EXPECT_EQ(r.status, 0) << sub << r.err;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << sub;
  }
}

TEST(Cli, InitInfoScoreOnARandomModel) {
  const fs::path dir = kData / "cli-tiny";
  const fs::path config = kData / "cli-tiny-config.json";
  std::ofstream(config) << R"({"model_type": "llama", "vocab_size": 320, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": true,
    "torch_dtype": "float32"})";
  fs::remove_all(dir);
  auto init = ctune({"init", "--config", config.string(), "--out", dir.string(), "--seed", "7", "--tokenizer", "byte",
                     "--dtype", "bf16"});
  ASSERT_EQ(init.status, 0) << init.err;
  EXPECT_TRUE(fs::exists(dir / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "tokenizer.json"));
  EXPECT_EQ(ctune::read_json_file(dir / "config.json")["torch_dtype"], "bfloat16");

  auto info = ctune({"info", dir.string(), "--json"});
  ASSERT_EQ(info.status, 0) << info.err;
  Json j = Json::parse(info.out);
  // 320*64 embeddings (tied) + 2 layers * (attn 64*64*2 + 64*32*2, mlp 3*64*128, norms 2*64) + final norm
  EXPECT_EQ(j["parameters"], 320 * 64 + 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64) + 64);
  EXPECT_EQ(j["dtypes"]["BF16"]["bytes"], 2 * j["parameters"].get<std::int64_t>());

  // Special-token strings in text: their ids by default (as Hugging Face), text with
  // --special-as-text (as training data is tokenized by default).
  auto ids = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"tokenize", "--tokenizer", dir.string(), "--text", "a</s>b", "--json", "--no-special"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = ctune(args);
    EXPECT_EQ(r.status, 0) << r.err;
    return Json::parse(r.out).get<std::vector<int>>();
  };
  EXPECT_EQ(ids({}).size(), 3u);                       // "a", </s>, "b"
  EXPECT_EQ(ids({"--special-as-text"}).size(), 6u);    // a < / s > b, byte by byte

  // --json prints exactly {"nll": [T-1], "argmax": [T]} and nothing else on stdout.
  auto score = ctune({"score", "--model", dir.string(), "--text", "Hello, ctune!", "--json"});
  ASSERT_EQ(score.status, 0) << score.err;
  EXPECT_EQ(lines(score.out), 1);
  EXPECT_EQ(score.out.rfind("{\"nll\":[", 0), 0u) << score.out;
  Json s = Json::parse(score.out);
  ASSERT_EQ(s.size(), 2u);
  const auto T = s["argmax"].size();
  EXPECT_EQ(T, 14u);  // <s> + 13 bytes
  EXPECT_EQ(s["nll"].size(), T - 1);
  for (const auto& v : s["nll"]) EXPECT_TRUE(v.is_number() && v.get<double>() > 0);
  // Same seed, same weights: init is deterministic.
  const fs::path again = kData / "cli-tiny-again";
  fs::remove_all(again);
  ASSERT_EQ(ctune({"init", "--config", config.string(), "--out", again.string(), "--seed", "7", "--dtype", "bf16"}).status, 0);
  EXPECT_EQ(slurp(dir / "model.safetensors"), slurp(again / "model.safetensors"));

  // Refuses to write over a non-empty directory, and leaves it untouched.
  auto clobber = ctune({"init", "--config", config.string(), "--out", dir.string()});
  expect_one_line_failure(clobber, "not empty", "init over existing dir");
  EXPECT_TRUE(fs::exists(dir / "tokenizer.json"));
  // A failure after the weights were written leaves no directory behind.
  const fs::path partial = kData / "cli-partial";
  fs::remove_all(partial);
  const fs::path no_tokenizer = kData / "cli-no-tokenizer";
  fs::create_directories(no_tokenizer);
  auto bad_tok = ctune({"init", "--config", config.string(), "--out", partial.string(), "--tokenizer", no_tokenizer.string()});
  expect_one_line_failure(bad_tok, "no tokenizer.json or tokenizer.model", "init with bad tokenizer");
  EXPECT_FALSE(fs::exists(partial));
  for (const auto& e : fs::directory_iterator(kData))
    EXPECT_EQ(e.path().filename().string().find("cli-partial.partial"), std::string::npos) << e.path();
}

TEST(Cli, ScoreJsonMatchesPyTorchReference) {
  for (const std::string name : {"llama_gqa_tied_bf16", "llama_sharded_linear"}) {
    Json ref = ctune::read_json_file(kData / "models" / (name + ".reference.json"));
    std::string ids;
    for (const auto& id : ref["ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<std::int64_t>());
    auto r = ctune({"score", "--model", (kData / "models" / name).string(), "--ids", ids, "--json"});
    ASSERT_EQ(r.status, 0) << r.err;
    Json got = Json::parse(r.out);
    ASSERT_EQ(got["nll"].size(), ref["nll"].size());
    double worst = 0;
    for (std::size_t t = 0; t < ref["nll"].size(); ++t)
      worst = std::max(worst, std::abs(got["nll"][t].get<double>() - ref["nll"][t].get<double>()));
    // The float32 forward against the float64 reference: within kNoiseFactor times the float32
    // noise of these NLLs, which make_reference.py measured (docs/testing.md).
    EXPECT_TRUE(ctune::test::within(name + ": max |dNLL|", worst,
                                    ctune::test::noise_tolerance(ref["nll_fp32_noise"].get<double>())));
    EXPECT_EQ(got["argmax"], ref["argmax"]) << name;
  }
}

TEST(Cli, MalformedCheckpointsGiveOneLineAndExitOne) {
  auto cases = ctune::testing::write_malformed_cases(kData / "malformed-cli");
  ASSERT_GE(cases.size(), 12u);
  // Each run costs ~0.5 s of LibTorch start-up: every case through `info`, a sample through `score`.
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    auto info = ctune({"info", c.dir.string()});
    expect_one_line_failure(info, c.message_part, "info " + c.name);
    EXPECT_NE(info.err.find(c.file_part), std::string::npos) << c.name << ": " << info.err;
    if (i % 5 != 0) continue;
    auto score = ctune({"score", "--model", c.dir.string(), "--ids", "1,2,3", "--json"});
    expect_one_line_failure(score, c.message_part, "score " + c.name);
  }
}

TEST(Cli, BadArgumentsAreRefused) {
  const std::string model = (kData / "models" / "llama_mha_fp32").string();
  expect_one_line_failure(ctune({"score", "--model", model, "--ids", "1,x,3"}), "\"x\" at item 2", "bad ids");
  expect_one_line_failure(ctune({"score", "--model", model, "--ids", "1,2,300"}), "outside the vocabulary",
                          "id out of range");
  expect_one_line_failure(ctune({"score", "--model", model, "--ids", "1,2", "--dtype", "fp8"}), "--dtype",
                          "bad dtype");
  expect_one_line_failure(ctune({"score", "--model", (kData / "nope").string(), "--ids", "1"}), "nope",
                          "missing model");
  expect_one_line_failure(ctune({"--threads", "lots", "info", model}), "--threads", "bad threads");
  // Usage errors: one line, exit 2.
  for (const auto& args : std::vector<std::vector<std::string>>{{"score", "--model", model},
                                                                 {"score", "--model", model, "--text", "a", "--ids", "1"},
                                                                 {"frobnicate"},
                                                                 {"info"}}) {
    auto r = ctune(args);
    EXPECT_EQ(r.status, 2) << args[0] << ": " << r.err;
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_EQ(r.err.rfind("ctune: usage error: ", 0), 0u) << r.err;
  }
}

// generate: a batch of left-padded prompts gives each prompt what it gets alone; --json's
// fields; a stop string cuts the text before it; bad values are refused with one line.
TEST(Cli, GenerateBatchesStopsAndRefuses) {
  const fs::path dir = kData / "cli-generate";
  const fs::path config = kData / "cli-generate-config.json";
  std::ofstream(config) << R"({"model_type": "llama", "vocab_size": 258, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "tie_word_embeddings": false,
    "max_position_embeddings": 256, "torch_dtype": "float32"})";
  fs::remove_all(dir);
  ASSERT_EQ(ctune({"init", "--config", config.string(), "--out", dir.string(), "--seed", "3", "--tokenizer", "byte"}).status, 0);
  const fs::path prompts = kData / "cli-generate-prompts.txt";
  const std::vector<std::string> texts = {"Hi", "The quick brown fox", "Once upon a time, there"};
  {
    std::ofstream f(prompts);
    for (const auto& t : texts) f << t << "\n";
  }
  const std::vector<std::string> common = {"generate", "--model", dir.string(), "--max-new-tokens", "24", "--json"};
  auto with = [&](std::vector<std::string> extra) {
    auto args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return ctune(args);
  };
  const auto batched = with({"--prompt-file", prompts.string(), "--batch-size", "3"});
  ASSERT_EQ(batched.status, 0) << batched.err;
  ASSERT_EQ(lines(batched.out), 3) << batched.out;
  std::istringstream in(batched.out);
  std::vector<Json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(Json::parse(line));
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const Json& r = rows[i];
    EXPECT_EQ(r["prompt"], texts[i]);
    EXPECT_EQ(r["prompt_ids"].size(), texts[i].size() + 1);  // BOS + one id per byte
    EXPECT_EQ(r["batch"], 3);
    EXPECT_LE(r["generated_ids"].size(), 24u);
    EXPECT_TRUE(r["stop_reason"] == "length" || r["stop_reason"] == "eos") << r.dump();
    EXPECT_GT(r["prefill_tokens_per_s"].get<double>(), 0);
    EXPECT_GT(r["peak_memory_bytes"].get<std::int64_t>(), 0);
    const auto alone = with({"--prompt", texts[i]});
    ASSERT_EQ(alone.status, 0) << alone.err;
    EXPECT_EQ(Json::parse(alone.out)["generated_ids"], r["generated_ids"]) << "prompt " << i << " alone vs in a batch";
  }
  // A stop string: the first ASCII letter or digit after the first character of prompt 3's text.
  const std::string text = rows[2]["text"];
  std::size_t at = 1;
  while (at < text.size() && !std::isalnum(static_cast<unsigned char>(text[at]))) ++at;
  ASSERT_LT(at, text.size()) << "no ASCII letter or digit in " << text;
  const std::string stop = text.substr(at, 1);
  const auto stopped = with({"--prompt", texts[2], "--stop", stop});
  ASSERT_EQ(stopped.status, 0) << stopped.err;
  const Json st = Json::parse(stopped.out);
  EXPECT_EQ(st["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(st["stop_reason"], "stop_string");

  // Beam search through the command line (its algorithm is checked against an independent
  // reference in Generate.BeamSearchMatchesIndependentReference): a score, and the same output
  // for a prompt in a batch as alone.
  const auto beams = with({"--prompt-file", prompts.string(), "--batch-size", "3", "--num-beams", "3", "--length-penalty", "0.8"});
  ASSERT_EQ(beams.status, 0) << beams.err;
  ASSERT_EQ(lines(beams.out), 3) << beams.out;
  const Json beam_first = Json::parse(beams.out.substr(0, beams.out.find('\n')));
  EXPECT_TRUE(beam_first.contains("beam_score")) << beam_first.dump();
  const auto beam_alone = with({"--prompt", texts[0], "--num-beams", "3", "--length-penalty", "0.8"});
  ASSERT_EQ(beam_alone.status, 0) << beam_alone.err;
  EXPECT_EQ(Json::parse(beam_alone.out)["generated_ids"], beam_first["generated_ids"]);

  // Quantised bases: int8 and nf4 projections decode what the fp32 model decodes until their
  // rounding tips a near tie (measured: 20 of 24 greedy tokens agree for both on this model).
  const auto fp32 = Json::parse(with({"--prompt", texts[1]}).out)["generated_ids"].get<std::vector<std::int64_t>>();
  for (const std::string q : {"int8", "nf4"}) {
    const auto quantised = with({"--prompt", texts[1], "--quantize", q});
    ASSERT_EQ(quantised.status, 0) << quantised.err;
    const auto ids = Json::parse(quantised.out)["generated_ids"].get<std::vector<std::int64_t>>();
    std::size_t agree = 0;
    while (agree < std::min(ids.size(), fp32.size()) && ids[agree] == fp32[agree]) ++agree;
    EXPECT_GE(agree, 8u) << q << ": greedy tokens agree with fp32's for " << agree << " tokens only";
    EXPECT_NE(quantised.err.find("base quantised to " + q), std::string::npos) << quantised.err;
  }

  const std::vector<std::string> model = {"generate", "--model", dir.string(), "--prompt", "x"};
  auto refused = [&](std::vector<std::string> extra, const std::string& what) {
    auto args = model;
    args.insert(args.end(), extra.begin(), extra.end());
    expect_one_line_failure(ctune(args), what, what);
  };
  refused({"--temperature", "-1"}, "--temperature: expected >= 0");
  refused({"--top-p", "1.5"}, "--top-p: expected a probability in [0, 1]");
  refused({"--top-k", "-2"}, "--top-k");
  refused({"--max-new-tokens", "300"}, "past the model's context of 256");
  refused({"--num-beams", "2", "--stream"}, "--stream with --num-beams > 1");
  refused({"--num-beams", "2", "--temperature", "0.7"}, "beam sampling) is not implemented");
  refused({"--num-beams", "0"}, "--num-beams: expected >= 1");
  expect_one_line_failure(ctune({"generate", "--model", dir.string()}), "give one of --prompt and --prompt-file", "no prompt");
  const auto usage = ctune({"generate", "--model", dir.string(), "--prompt", "x", "--top-k", "many"});
  EXPECT_EQ(usage.status, 2) << usage.err;
  EXPECT_EQ(lines(usage.err), 1) << usage.err;
}

// --chat: a prompt becomes a user turn in the model's chat format plus the assistant header
// (byte tokenizer, no chat template: the plain format, "User: ...\nAssistant:"); a format whose
// markers are not in the vocabulary is refused; on a terminal it is an interactive chat.
TEST(Cli, GenerateChat) {
  const fs::path dir = kData / "cli-chat";
  const fs::path config = kData / "cli-chat-config.json";
  std::ofstream(config) << R"({"model_type": "llama", "vocab_size": 258, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256})";
  fs::remove_all(dir);
  ASSERT_EQ(ctune({"init", "--config", config.string(), "--out", dir.string(), "--seed", "5", "--tokenizer", "byte"}).status, 0);
  const std::vector<std::string> model = {"generate", "--model", dir.string(), "--max-new-tokens", "6", "--json"};
  auto with = [&](std::vector<std::string> extra) {
    auto args = model;
    args.insert(args.end(), extra.begin(), extra.end());
    return ctune(args);
  };
  const auto chat = with({"--chat", "--system", "Be brief.", "--prompt", "Hi"});
  ASSERT_EQ(chat.status, 0) << chat.err;
  const auto plain = with({"--prompt", "System: Be brief.\nUser: Hi\nAssistant:"});
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_EQ(Json::parse(chat.out)["prompt_ids"], Json::parse(plain.out)["prompt_ids"]);
  EXPECT_EQ(Json::parse(chat.out)["generated_ids"], Json::parse(plain.out)["generated_ids"]);
  expect_one_line_failure(with({"--chat", "--chat-format", "chatml", "--prompt", "Hi"}), "<|im_start|>", "chatml markers");
  expect_one_line_failure(with({"--system", "x", "--prompt", "Hi"}), "--system and --chat-format need --chat", "no --chat");

  // Interactive: two turns, then /exit. The second reply follows the whole conversation.
  const auto session = ctune_on_terminal({"generate", "--model", dir.string(), "--max-new-tokens", "4", "--chat"}, "Hi\nAgain\n/exit\n");
  EXPECT_EQ(session.status, 0) << session.out;
  EXPECT_NE(session.out.find("chat (plain format)"), std::string::npos) << session.out;
  std::size_t prompts = 0;
  for (std::size_t at = session.out.find("> "); at != std::string::npos; at = session.out.find("> ", at + 2)) ++prompts;
  EXPECT_GE(prompts, 3u) << "expected a prompt before each of the three lines:\n" << session.out;
}

}  // namespace
