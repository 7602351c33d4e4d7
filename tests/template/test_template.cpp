// The template engine against Python's Jinja2: every construct snippet of snippets.json (made by
// make_snippets.py with Jinja2 configured as transformers configures it) renders byte-equal, or
// fails where Jinja2 fails; hostile templates end in one TemplateError naming the position,
// quickly and without exhausting memory or the stack.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/error.h"
#include "core/json.h"
#include "template/template.h"

namespace ctune::tmpl {
namespace {

constexpr std::time_t kNow = 1768480496;  // make_snippets.py's NOW

OrderedJson read_fixture(const std::string& name) {
  std::ifstream in(std::string(CTUNE_TEMPLATE_SOURCE_DIR) + "/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return OrderedJson::parse(ss.str());
}

std::string render(const std::string& source, const OrderedJson& vars = OrderedJson::object(), RenderOptions options = {}) {
  options.now = kNow;
  Template t(source);
  return t.render(from_json(vars).dict(), options).text;
}

TEST(Template, SnippetsMatchJinja2) {
  const OrderedJson cases = read_fixture("snippets.json");
  ASSERT_GT(cases.size(), 50u);
  int checked = 0;
  for (const auto& c : cases) {
    const std::string source = c["template"];
    SCOPED_TRACE(source);
    if (c.contains("error")) {
      EXPECT_THROW(render(source, c["vars"]), TemplateError);
    } else {
      std::string got;
      try {
        got = render(source, c["vars"]);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "threw: " << e.what();
        continue;
      }
      EXPECT_EQ(got, c["text"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(cases.size()));
}

TEST(Template, GenerationBlocksGiveByteRanges) {
  Template t("{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}{{ m.content }}|{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}");
  ASSERT_TRUE(t.has_generation());
  OrderedJson vars = {{"messages", OrderedJson::array({{{"role", "user"}, {"content", "hé"}},
                                                        {{"role", "assistant"}, {"content", "yo"}}})}};
  const Rendered r = t.render(from_json(vars).dict());
  EXPECT_EQ(r.text, "<user>hé<assistant>yo|");
  ASSERT_EQ(r.generation.size(), 1u);
  EXPECT_EQ(r.text.substr(r.generation[0].first, r.generation[0].second - r.generation[0].first), "yo|");
}

// Each hostile template fails with one line that names a template position, quickly
// (seconds at most, whatever it tries).
void expect_refused(const std::string& source, const std::string& what) {
  SCOPED_TRACE(what);
  const std::clock_t start = std::clock();
  try {
    render(source);
    ADD_FAILURE() << "rendered without error";
  } catch (const TemplateError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("template line ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // Seconds, not minutes: generous for the sanitizer build, where the iteration bound takes longest.
  // CPU time, which a loaded machine does not stretch as it does wall time (docs/testing.md, "Time").
  EXPECT_LT(static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC, 30.0);
}

TEST(Template, HostileTemplatesAreRefused) {
  expect_refused("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "infinite recursion through a macro");
  expect_refused("{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}",
                 "mutual recursion");
  expect_refused("{% for i in range(1000000000) %}x{% endfor %}", "a loop over a huge range");
  expect_refused("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 "nested loops past the iteration bound");
  expect_refused("{{ 'x' * 100000000 }}", "a 10^8-character string");
  expect_refused("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", "10^8 characters of output");
  expect_refused("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 "a doubling string");
  expect_refused("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
                 "a doubling list");
  // Each value and loop within bounds, but a large value built or scanned on every iteration:
  // hours of work without the render's work limit (found by fuzzing).
  expect_refused("{% for i in range(100000) %}{% set x = [0] * 1000000 %}{% endfor %}", "a 10^6-item list built per iteration");
  const std::string big = "{% set s = 'x' * 30000000 %}{% for i in range(100000) %}";
  expect_refused(big + "{{ s[5] }}{% endfor %}", "a 30 MB string indexed per iteration");
  expect_refused(big + "{% if 'y' in s %}{% endif %}{% endfor %}", "a 30 MB string searched per iteration");
  expect_refused(big + "{{ s[1:2] }}{% endfor %}", "a 30 MB string sliced per iteration");
  expect_refused(big + "{{ s|length }}{% endfor %}", "a 30 MB string measured per iteration");
  expect_refused("{% set l = [0] * 1000000 %}{% for i in range(100000) %}{% for x in l %}{% break %}{% endfor %}{% endfor %}",
                 "a 10^6-item loop started per iteration");
  expect_refused("{{ ''.__class__.__mro__ }}", "attribute access to internals");
  expect_refused("{{ messages.append(1) }}", "mutating an input");
  expect_refused("{% if x %}unclosed", "a block without its end");
  expect_refused("{{ 1 + }}", "a syntax error");
  expect_refused("{% for %}", "a for without a target");
  expect_refused("{{ 'unterminated }}", "an unterminated string");
  expect_refused("{{" + std::string(100000, '(') + "1" + std::string(100000, ')') + "}}", "deep parentheses in a tag");
  std::string deep_ifs;
  for (int i = 0; i < 5000; ++i) deep_ifs += "{% if true %}";
  expect_refused(deep_ifs, "deeply nested blocks");
  // Chains the parser builds in a loop, not by recursion: each made a tree the renderer and the
  // destructor walked one stack frame per level (10^5 levels crashed the process; found by
  // rendering chains longer than the fuzzer's 4 KB inputs).
  const auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  expect_refused("{{ 1" + repeat("|abs", 100000) + " }}", "a chain of 10^5 filters");
  expect_refused("{{ x" + repeat(".a", 100000) + " }}", "a chain of 10^5 attributes");
  expect_refused("{{ x" + repeat("[0]", 100000) + " }}", "a chain of 10^5 subscripts");
  expect_refused("{{ 1" + repeat(" + 1", 100000) + " }}", "a chain of 10^5 additions");
  expect_refused("{{ 2" + repeat(" ** 2", 100000) + " }}", "a chain of 10^5 powers");
  expect_refused("{{ 1" + repeat(" if 1", 100000) + " }}", "a chain of 10^5 conditions");
  expect_refused("{{ " + repeat("not ", 100000) + "1 }}", "10^5 nested nots");
  expect_refused("{{ " + repeat("1 if 0 else ", 60000) + "1 }}", "6 x 10^4 nested else branches");
  // Each bound alone holds, but macro recursion multiplies them: 100 macro levels, each through
  // a 250-level expression or 99 nested blocks, overflowed the stack (found by fuzzing).
  expect_refused("{% macro r(n) %}{% if n > 0 %}{{ r(n - 1)" + repeat(" + 0", 250) + " }}{% endif %}{% endmacro %}{{ r(99) }}",
                 "100 macro levels through a 250-level expression");
  expect_refused("{% macro r(n) %}" + repeat("{% if true %}", 99) + "{{ r(n) }}" + repeat("{% endif %}", 99) +
                     "{% endmacro %}{{ r(0) }}",
                 "100 macro levels through 99 nested blocks");
  // Values nested by a loop: printing, comparing or serialising one recurses per level.
  const std::string nest = "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}";
  expect_refused(nest + "{{ ns.x }}", "printing a list nested 10^5 deep");
  expect_refused(nest + "{{ ns.x|tojson }}", "serialising a list nested 10^5 deep");
  expect_refused(nest + "{{ ns.x == [ns.x] }}", "comparing lists nested 10^5 deep");  // ns.x == ns.x is Python's identity
  expect_refused("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}", "printing a namespace that holds itself");
  expect_refused("{% include 'x' %}", "include (no loader)");
  expect_refused("{{ undefined_thing.attr }}", "an attribute of an undefined value");
  expect_refused("{{ raise_exception('no tools here') }}", "the template's own exception");
}

// A hostile template ends in one error line that names the template position and the bound that
// stopped it (`bound`: words of that bound's message), whatever the time it takes.
void expect_bounded(const std::string& source, const std::string& bound, const RenderOptions& options,
                    const std::string& what) {
  SCOPED_TRACE(what);
  try {
    render(source, OrderedJson::object(), options);
    ADD_FAILURE() << "rendered without error";
  } catch (const TemplateError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("template line ", 0), 0u) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_NE(msg.find(bound), std::string::npos) << msg;
  }
}

// Comparing, ordering, hashing or case-folding a value reads every byte it holds through its items,
// and is charged that: two lists of 100 references to 1 MB strings are 100 MB to compare, not their
// 5 KB of items. Charged by their items, these renders passed a 64 MiB work limit (and at the real
// 1 GiB limit, 10^6 references to a 30 MB string ran for hours: issue 70).
TEST(Template, DeepValuesAreChargedWhatTheyRead) {
  RenderOptions options;
  options.limits.max_work = 64u << 20;
  // a and b are equal but not the same string (no identity shortcut); c differs in its last byte.
  const std::string lists = "{% set a = 'x' * 1000000 %}{% set b = 'x' * 1000000 %}{% set c = 'x' * 999999 ~ 'y' %}"
                            "{% set l = [a, b] * 50 %}{% set m = [b, a] * 50 %}";
  const std::string work = "work exceeds its limit";
  expect_bounded(lists + "{{ l == m }}", work, options, "== of lists of 1 MB strings");
  expect_bounded(lists + "{{ l < m }}", work, options, "< of lists of 1 MB strings");
  expect_bounded(lists + "{{ c in m }}", work, options, "'in' a list of 1 MB strings");
  expect_bounded(lists + "{{ m|select('equalto', c)|list|length }}", work, options, "an equalto test per item");
  expect_bounded(lists + "{{ m.index(c) }}", work, options, "list.index");
  expect_bounded(lists + "{{ m|min|length }}", work, options, "min (each item lower-cased)");
  expect_bounded(lists + "{{ m|max(case_sensitive=true)|length }}", work, options, "max (compared)");
  expect_bounded(lists + "{{ m|sort(case_sensitive=true)|length }}", work, options, "sort (compared)");
  expect_bounded(lists + "{{ m|unique(case_sensitive=true)|list|length }}", work, options, "unique (hashed)");
  expect_bounded(lists + "{{ {'k': l} == {'k': m} }}", work, options, "== of dicts holding them");
}

// unique keeps a set of the keys it has seen, as Jinja2 does: linear. It scanned the kept keys for
// each item, which was quadratic (10^6 items of 10^5 distinct keys: 5 x 10^10 comparisons); with
// comparisons charged, a quadratic unique would pass the work limit here.
TEST(Template, UniqueOfManyDistinctKeysIsLinear) {
  EXPECT_EQ(render("{% set l = range(100000)|map('string')|list %}{{ (l + l)|unique|list|length }}"), "100000");
}

#if defined(__SANITIZE_ADDRESS__)
#define CTUNE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CTUNE_TEST_ASAN 1
#endif
#endif

// Caps this process's address space, for one scope, at what it has mapped now plus `headroom`: an
// operation that builds gigabytes before it checks their size then fails with std::bad_alloc
// instead of taking the machine's memory.
class AddressSpaceCap {
 public:
  explicit AddressSpaceCap(std::size_t headroom) {
    getrlimit(RLIMIT_AS, &saved_);
    std::ifstream statm("/proc/self/statm");
    std::size_t pages = 0;
    statm >> pages;
    rlimit cap = saved_;
    cap.rlim_cur = std::min<rlim_t>(saved_.rlim_cur, pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) + headroom);
    setrlimit(RLIMIT_AS, &cap);
  }
  ~AddressSpaceCap() { setrlimit(RLIMIT_AS, &saved_); }
  AddressSpaceCap(const AddressSpaceCap&) = delete;
  AddressSpaceCap& operator=(const AddressSpaceCap&) = delete;

 private:
  rlimit saved_{};
};

// Every builder that can multiply size checks the output limit (32 MiB) before it builds, or as
// it grows, so each of these ends at the limit within 1 GiB of memory. Each built 30 GB first
// (std::bad_alloc under a limit, the OOM killer without one: issue 70), or split a 30 MB string
// into 3 GB of one-item strings.
TEST(Template, SizeMultiplyingBuildersStopAtTheOutputLimit) {
#ifdef CTUNE_TEST_ASAN
  GTEST_SKIP() << "AddressSanitizer maps more address space than the cap allows";
#endif
  const AddressSpaceCap cap(1ull << 30);
  const RenderOptions options;
  const std::string s = "{% set s = 'x' * 30000000 %}", output = "exceeds the template output limit", items = "items exceeds";
  expect_bounded(s + "{{ ('a\\n' * 1000)|indent(s) }}", output, options, "indent with a 30 MB pad over 1000 lines");
  expect_bounded(s + "{{ [s] * 1000 }}", output, options, "printing 1000 references to a 30 MB string");
  expect_bounded(s + "{{ ([s] * 1000)|string|length }}", output, options, "string of them");
  expect_bounded(s + "{{ {'k': [s] * 1000} }}", output, options, "a dict holding them printed");
  expect_bounded(s + "{{ [[s] * 1000]|join|length }}", output, options, "join of an item holding them");
  expect_bounded(s + "{{ ([s] * 1000)|tojson|length }}", output, options, "tojson of them");
  expect_bounded(s + "{{ ([1] * 1000)|tojson(separators=[s, ': ']) }}", output, options, "tojson with a 30 MB separator");
  expect_bounded(s + "{{ ('a' * 1000)|replace('a', s)|length }}", output, options, "replace filter by a 30 MB string");
  expect_bounded(s + "{{ ('a' * 1000).replace('a', s)|length }}", output, options, "str.replace by a 30 MB string");
  expect_bounded(s + "{{ ('{0}' * 1000).format(s)|length }}", output, options, "str.format of a 30 MB string");
  expect_bounded(s + "{{ [s] * 1000 ~ '' }}", output, options, "~ of a list");
  expect_bounded("{{ ('\\n' * 30000000).splitlines()|length }}", items, options, "splitlines into 3 x 10^7 lines");
  expect_bounded("{{ ('a,' * 15000000).split(',')|length }}", items, options, "split into 1.5 x 10^7 parts");
  expect_bounded("{{ ('a ' * 15000000).split()|length }}", items, options, "split on whitespace");
  expect_bounded("{{ ('x' * 30000000)|list|length }}", items, options, "a 30 MB string as a list");
  // Within the limits they still render, and a string reversed or read at its ends is not split first.
  EXPECT_EQ(render(s + "{{ (s|reverse)|length }} {{ s|first }}{{ s|last }}"), "30000000 xx");
  EXPECT_EQ(render(s + "{{ ('a\\nb'|indent(s[:3]))|length }} {{ ([s[:2]] * 3)|join(s[:1]) }}"), "6 xxxxxxxx");
}

// raise_exception's text is the template's or the data's: the error line shows it with what a
// terminal would obey escaped (an escape sequence, a line break, a right-to-left override) and at
// most about 1 KB of it (a 10 MB message was a 10 MB line).
TEST(Template, ErrorLinesArePrintableAndShort) {
  try {
    render("{{ raise_exception('a\\x1b[2Jb\\nc\\u202ed\\\\' ~ 'e' * 10000000) }}");
    FAIL() << "rendered";
  } catch (const TemplateError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("template line 1, column 4: a\\x1b[2Jb\\nc\\u202ed\\eee", 0), 0u) << msg.substr(0, 100);
    EXPECT_EQ(msg.find_first_of("\x1b\n"), std::string::npos);
    EXPECT_LT(msg.size(), 1100u);
    EXPECT_EQ(msg.substr(msg.size() - 6), "eee...");
  }
}

TEST(Template, DeepValuesAndChainsWithinBoundsRender) {
  // Freeing a list nested 10^6 deep (ten loops of 10^5, within every bound) crashed the process
  // by recursing once per level; values are now freed iteratively.
  EXPECT_EQ(render("{% set ns = namespace(x=[]) %}{% for j in range(10) %}{% for i in range(99999) %}"
                   "{% set ns.x = [ns.x] %}{% endfor %}{% endfor %}{{ ns.x|length }}"),
            "1");
  // A namespace holding itself is a cycle of shared pointers: the render empties its namespaces
  // when it ends, so the sanitizer build's leak check passes.
  EXPECT_EQ(render("{% set ns = namespace(l=[]) %}{% set ns.self = ns %}{% set ns.l = [ns, ns.l] %}{{ ns.self.self is defined }}"),
            "True");
  // Chains as long as Jinja2 takes (it fails near 300 levels, at Python's recursion limit).
  std::string chain = "{{ -3";
  for (int i = 0; i < 200; ++i) chain += "|abs";
  EXPECT_EQ(render(chain + " }}"), "3");
  std::string sum = "{{ 0";
  for (int i = 0; i < 250; ++i) sum += " + 1";
  EXPECT_EQ(render(sum + " }}"), "250");
  EXPECT_NE(render("{% set ns = namespace(x=[]) %}{% for i in range(900) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}")
                .find("[[[[]]]]"),
            std::string::npos);
}

TEST(Template, ErrorsNameLineAndColumn) {
  try {
    render("line one\n{% if true %}\n  {{ 1 + }}\n{% endif %}");
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("template line 3, column"), std::string::npos) << e.what();
  }
  try {
    render("a\nb {{ raise_exception('bad role: ' ~ r) }}", {{"r", "tool"}});
    FAIL();
  } catch (const TemplateError& e) {
    EXPECT_EQ(std::string(e.what()), "template line 2, column 6: bad role: tool");
  }
}

// Using an undefined value raises Jinja2's own message for it (it was quoted a second time:
// "''list object' has no attribute 'startswith'' is undefined").
TEST(Template, UndefinedValuesRaiseJinja2sMessages) {
  const auto message = [](const std::string& source) {
    try {
      render(source);
    } catch (const TemplateError& e) {
      const std::string m = e.what();
      return m.substr(m.find(": ") + 2);
    }
    return std::string("rendered");
  };
  EXPECT_EQ(message("{{ [1].startswith('a') }}"), "'list object' has no attribute 'startswith'");
  EXPECT_EQ(message("{{ x + 1 }}"), "'x' is undefined");
  EXPECT_EQ(message("{{ {}.a.b }}"), "'dict object' has no attribute 'a'");
  EXPECT_EQ(message("{{ ([]|first).x }}"), "No first item, sequence was empty.");
}

// A template is a Python str: what Python's strict UTF-8 decoder refuses is refused here too,
// overlong forms, surrogates and code points past U+10FFFF included (those three were accepted
// until the engine shared core/utf8.h), at the line and column of the first bad byte.
TEST(Template, InvalidUtf8SourceIsRefused) {
  for (const std::string bad : {"\xff\xfe", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    try {
      Template("{{ 1 }}\nok " + bad + " {{ 2 }}");
      ADD_FAILURE() << "invalid UTF-8 accepted: " << bad.size() << " bytes";
    } catch (const TemplateError& e) {
      EXPECT_NE(std::string(e.what()).find("line 2, column 4"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(Template("caf\xc3\xa9 \xf0\x9f\x98\x80 \xef\xbf\xbd"));
}

}  // namespace
}  // namespace ctune::tmpl
