// `ctune export --model DIR [--adapter DIR] --format gguf|gguf-lora --out FILE [--type T]`:
// a model (adapter merged in fp32 first) or a LoRA adapter as GGUF for llama.cpp. Every export
// ends with the self-check (the file read back, rebuilt and scored against the source); the
// output appears only once it has passed.
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "export/gguf_export.h"

namespace ctune::cli {

namespace {

struct ExportCliOptions {
  std::string model_dir, adapter, out, format = "gguf", type = "f32";
  bool overwrite = false;
};

int run_export(const ExportCliOptions& o) {
  exporter::GgufExportOptions options;
  options.model_dir = o.model_dir;
  options.adapter_dir = o.adapter;
  options.out = o.out;
  options.overwrite = o.overwrite;
  options.type = exporter::parse_gguf_type(o.type, "--type");
  std::error_code ec;
  if (!std::filesystem::is_directory(options.model_dir, ec))
    throw IoError(o.model_dir + ": model directory not found");
  if (!o.adapter.empty() && !std::filesystem::is_directory(options.adapter_dir, ec))
    throw IoError(o.adapter + ": adapter directory not found");

  exporter::GgufExportReport report;
  if (o.format == "gguf") {
    report = exporter::export_gguf_model(options);
  } else if (o.format == "gguf-lora") {
    if (o.adapter.empty()) throw ConfigError("--format gguf-lora: --adapter DIR is required");
    report = exporter::export_gguf_lora(options);
  } else {
    throw ConfigError("--format: expected gguf or gguf-lora, found \"" + o.format + "\"");
  }
  std::printf("wrote %s (%s, %s, %zu tensors, %ju bytes)\n", o.out.c_str(), report.architecture.c_str(),
              exporter::gguf_type_label(options.type), report.tensors, report.bytes);
  const exporter::CheckResult& c = report.check;
  std::printf("self-check: max |dNLL| %.3g over %zu probe tokens (tolerance %.3g) against %s, greedy agrees at %zu/%zu\n",
              c.max_diff, c.positions, c.tolerance,
              c.vs_source ? "the source rounded the same way in memory" : "the source", c.argmax_agree, c.positions + 1);
  if (c.vs_source) {
    std::printf("rounding to %s: max |dNLL| %.3g against the unrounded source, greedy agrees at %zu/%zu (information)\n",
                exporter::gguf_type_label(options.type), c.vs_source->max_diff, c.vs_source->argmax_agree,
                c.vs_source->positions + 1);
  }
  return 0;
}

}  // namespace

CLI::App* add_export_command(CLI::App& app, Action& run) {
  auto o = std::make_shared<ExportCliOptions>();
  auto* cmd = app.add_subcommand("export", "Export a model or a LoRA adapter as GGUF (llama.cpp), self-checked");
  cmd->add_option("--model", o->model_dir, "Hugging Face model directory (the base, for gguf-lora)")->required();
  cmd->add_option("--adapter", o->adapter, "PEFT LoRA adapter: merged in fp32 (gguf), or the adapter to export (gguf-lora)");
  cmd->add_option("--format", o->format, "gguf (a model) or gguf-lora (a LoRA adapter)");
  cmd->add_option("--out", o->out, "The .gguf file to write (atomically, after the self-check)")->required();
  cmd->add_option("--type", o->type, "Storage of 2-D weights: f32, f16, bf16 or q8_0 (norms and biases stay f32)");
  cmd->add_flag("--overwrite", o->overwrite, "Replace an existing output file");
  cmd->callback([o, &run] { run = [o] { return run_export(*o); }; });
  return cmd;
}

}  // namespace ctune::cli
