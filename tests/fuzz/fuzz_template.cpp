// libFuzzer target: any bytes as a chat template, parsed and rendered with a fixed conversation
// under tight limits. A TemplateError is the expected way to refuse; anything else escaping the
// engine (std::out_of_range from a number literal, bad_variant_access, an ASan/UBSan report, a
// hang past -timeout) is a bug, and so is the renderer's own "engine bug" safety net firing.
// Run with scripts/fuzz.sh template (docs/testing.md#fuzzing).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/error.h"
#include "template/template.h"

namespace {

using namespace ctune::tmpl;

Dict conversation() {
  auto messages = std::make_shared<List>();
  for (const auto& [role, content] : {std::pair{"system", "Be brief."}, {"user", "Hi {{x}} <b>"}, {"assistant", "Hello!"}, {"user", "2+2?"}}) {
    auto m = std::make_shared<Dict>();
    m->set("role", Value(role));
    m->set("content", Value(content));
    messages->push_back(Value(m));
  }
  Dict d;
  d.set("messages", Value(messages));
  d.set("bos_token", Value("<s>"));
  d.set("eos_token", Value("</s>"));
  d.set("add_generation_prompt", Value(true));
  d.set("tools", Value(std::make_shared<List>()));
  return d;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Dict vars = conversation();
  try {
    const Template t(std::string(reinterpret_cast<const char*>(data), size));
    RenderOptions o;
    o.limits.max_output_bytes = 1u << 20;  // small limits keep each input fast
    o.limits.max_iterations = 100000;
    o.now = 0;
    (void)t.render(vars, o);
  } catch (const ctune::TemplateError& e) {
    // The net's words, unless the template wrote them itself (libFuzzer learns compared strings).
    const std::string source(reinterpret_cast<const char*>(data), size);
    if (std::string(e.what()).find("engine bug") != std::string::npos && source.find("engine") == std::string::npos) __builtin_trap();
  }
  return 0;
}
