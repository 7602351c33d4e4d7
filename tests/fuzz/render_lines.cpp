// The template engine as a line filter, for the differential run against Jinja2
// (jinja2_diff.py): each stdin line {"template", "vars"} gives one stdout line, {"text"} or
// {"error"} (a TemplateError, the engine's refusal) or {"crash"} (anything else escaping it).
#include <iostream>
#include <string>

#include "core/error.h"
#include "core/json.h"
#include "template/template.h"

int main() {
  using namespace ctune::tmpl;
  std::string line;
  while (std::getline(std::cin, line)) {
    const auto in = ctune::OrderedJson::parse(line);
    ctune::OrderedJson out;
    try {
      const Template t(in.at("template").get<std::string>());
      RenderOptions o;
      o.now = in.value("now", std::int64_t{0});
      out["text"] = t.render(from_json(in.at("vars")).dict(), o).text;
    } catch (const ctune::TemplateError& e) {
      out["error"] = e.what();
    } catch (const std::exception& e) {
      out["crash"] = e.what();
    }
    std::cout << out.dump() << '\n' << std::flush;
  }
}
