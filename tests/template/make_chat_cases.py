#!/usr/bin/env python3
"""Writes chat_cases.jsonl, the conversations of the chat-template golden tests: every case is
rendered with every template of render_jinja2.py (Python's Jinja2, configured as transformers'
apply_chat_template configures it) and render_hf_jinja.mjs (@huggingface/jinja), and ctune's C++
engine must reproduce the Jinja2 renders byte for byte.
  python3 make_chat_cases.py > chat_cases.jsonl      (no dependencies; output is deterministic)
One JSON object per line:
  {"id": str, "messages": [...], "tools": [OpenAI function schemas] (optional),
   "kwargs": {extra template variables, e.g. {"enable_thinking": false}} (optional)}
Messages use the shapes transformers users pass: OpenAI-style "tool_calls" (arguments mostly a
dict, sometimes a JSON string), "tool" messages, content as a list of typed parts, reasoning_content,
inline <think> blocks, and ctune's per-message "train": false. Some shapes are refused by some real
templates (raise_exception, or a Python TypeError such as DeepSeek-V3 concatenating dict
arguments); the references record those errors and the C++ engine must fail on the same renders."""
import json


def u(c, **kw):
    return {"role": "user", "content": c, **kw}


def a(c, **kw):
    return {"role": "assistant", "content": c, **kw}


def s(c):
    return {"role": "system", "content": c}


def tool(c, **kw):
    return {"role": "tool", "content": c, **kw}


def call(name, arguments, call_id=None):
    """One OpenAI tool call; arguments a dict (transformers' documented form) or a JSON string."""
    c = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        c["id"] = call_id
    return c


def text(t):
    return {"type": "text", "text": t}


IMAGE = {"type": "image"}

# Tool schemas as transformers' get_json_schema() produces them (OpenAI form). Unicode, quotes,
# nested objects, enums and numbers make the templates' `tools | tojson` output non-trivial.
WEATHER = {"type": "function", "function": {
    "name": "get_weather",
    "description": "Get the current weather at a location (°C or °F).",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string", "description": "City name, e.g. \"Zürich\" or 東京"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}},
        "required": ["location"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search",
    "description": "Search the web & return the top results.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "description": "The query"},
        "max_results": {"type": "integer", "description": "At most this many results", "default": 5},
        "filters": {"type": "object", "description": "Optional filters",
                    "properties": {"lang": {"type": "string"}, "safe": {"type": "boolean"}}}},
        "required": ["query"]}}}
CALC = {"type": "function", "function": {
    "name": "calculator",
    "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {
        "expression": {"type": "string", "description": "e.g. 2 * (3 + 4)"}}, "required": ["expression"]}}}

LONG = " ".join(f"Paragraph {k}: the quick brown fox jumps over the lazy dog; naïve café, 東京, ✓." for k in range(60))
LONG_CODE = "\n".join(f"def f{k}(x):\n    return x * {k}  # {'#' * (k % 7)}\n" for k in range(40))

CASES = [
    # --- plain shapes -------------------------------------------------------------------------
    ("single turn", [u("What is 2+2?"), a("4")]),
    ("system and single turn", [s("You are a terse assistant."), u("Name a color."), a("Blue.")]),
    ("three turns with system", [s("Answer in French."), u("Hello"), a("Bonjour"), u("Thanks"), a("Merci"),
                                 u("Bye"), a("Au revoir")]),
    ("eight turns", [m for k in range(1, 9) for m in (u(f"Q{k}: what is {k} squared?"), a(f"{k * k}"))]),
    ("ends with user, no system", [u("Tell me a joke.")]),
    ("ends with user after history", [s("Be brief."), u("Hi"), a("Hello!"), u("How are you?")]),
    ("system only", [s("You are a helpful assistant.")]),
    ("empty conversation", []),
    # --- text content ---------------------------------------------------------------------------
    ("CJK", [s("你是一个有帮助的助手。"), u("你好，世界！今天天气怎么样？"), a("こんにちは。今日は晴れです。안녕하세요!")]),
    ("emoji and ZWJ sequences", [u("Family emoji? 👨‍👩‍👧‍👦"), a("Here: 👋🏽 🇯🇵 ❤️‍🔥 🧑🏿‍💻 𝔘𝔫𝔦")]),
    ("combining marks", [u("Cafe\u0301 nai\u0308ve"), a("e\u0301 a\u0308 \u0915\u094d\u0937 o\u0302\u0323")]),
    ("RTL scripts", [u("مرحبا بالعالم"), a("שלום עולם \u200fRTL mark")]),
    ("empty assistant content", [u("Say nothing."), a("")]),
    ("empty user content", [u(""), a("You sent an empty message.")]),
    ("empty system content", [s(""), u("Hi"), a("Hello")]),
    ("whitespace-only assistant content", [u("Whitespace?"), a("   \n \t ")]),
    ("newline-only assistant content", [u("Newlines?"), a("\n\n")]),
    ("leading and trailing whitespace", [s("  sys  \n"), u("  hello there  "), a("\n\n  The answer.  \n\n")]),
    ("newlines inside content", [u("line 1\nline 2\n\nline 4"), a("first\nsecond\n\n\nthird")]),
    ("CRLF and tabs", [u("a\r\nb\tc"), a("col1\tcol2\r\nv1\tv2")]),
    ("quotes and backslashes", [u("He said \"hi\" and 'bye' \\ C:\\path\\to\\file \\n"),
                                a("Use \"\\\\\" to escape a backslash, and '\\'' for a quote.")]),
    ("content that looks like Jinja", [u("Render {{ x }} and {% if y %}z{% endif %} {# not a comment #}"),
                                       a("{{ messages }} {%- raw -%} {{- '-}}' -}} %} }} {{")]),
    ("HTML-like content", [u("<b>bold</b> & <script>alert('x')</script>"), a("&lt;escaped&gt; &amp; <br/>")]),
    ("special-token text in content", [u("What do <|im_end|>, <|eot_id|>, <end_of_turn> and </s> mean?"),
                                       a("They end turns: <|im_start|>assistant")]),
    ("numbers as text", [u("42"), a("3.14"), u("-0"), a("1e3")]),
    ("Unicode whitespace at the edges", [u("\u00a0spaced\u3000"), a("\u3000answer\u00a0\u2003")]),
    ("U+FEFF, U+0085 and U+001F at the edges", [u("\ufeffquestion\u0085"), a("\u001fanswer\ufeff")]),
    ("long content", [s("Summarize."), u(LONG), a(LONG[:2500])]),
    ("long code answer", [u("Write forty functions."), a("```python\n" + LONG_CODE + "```")]),
    ("extra message keys", [u("Hi, I am Ann.", name="ann"), a("Hello Ann.", name="bot")]),
    # --- role order the alternation-checking templates refuse ------------------------------------
    ("assistant first", [a("I speak first."), u("OK"), a("Fine")]),
    ("two user messages in a row", [u("Part one."), u("Part two."), a("Both parts read.")]),
    ("two assistant messages in a row", [u("Go"), a("step one"), a("step two")]),
    ("system in the middle", [s("Sys"), u("Hi"), a("Hello"), s("New rules."), u("Again"), a("Sure")]),
    ("unknown role", [u("Hi"), {"role": "narrator", "content": "Meanwhile..."}, a("Hello")]),
    # --- content as a list of typed parts --------------------------------------------------------
    ("user text part", [u([text("Describe this.")]), a("It is text.")]),
    ("several text parts", [u([text("First part."), text(" Second part.")]), a([text("Answer part one."),
                                                                                 text("Answer part two.")])]),
    ("image and text parts", [u([IMAGE, text("What is in this picture?")]), a("A cat on a mat.")]),
    ("two images", [s([text("You see images.")]), u([text("Compare "), IMAGE, text(" and "), IMAGE]),
                    a("The second is brighter.")]),
    ("assistant parts then user", [u("Hi"), a([text("Hello! ")]), u([text("Bye")])]),
    # --- reasoning ------------------------------------------------------------------------------
    ("reasoning_content on the last answer", [u("What is 6*7?"),
                                              a("42", reasoning_content="6*7 = 42, easy.")]),
    ("reasoning_content on an earlier answer", [u("First?"), a("One.", reasoning_content="think one"),
                                                u("Second?"), a("Two.", reasoning_content="think two")]),
    ("empty reasoning_content", [u("Quick?"), a("Yes.", reasoning_content="")]),
    ("inline think in the last answer", [u("What is 2+2?"),
                                         a("<think>\nAdd two and two.\n</think>\n\nThe answer is 4.")]),
    ("inline think in an earlier answer", [u("First?"), a("<think>\nreason one\n</think>\n\nAnswer one."),
                                           u("Second?"), a("Answer two.")]),
    ("</think> without <think>", [u("Go"), a("just thinking</think>the answer")]),
    ("reasoning then a question", [u("Plan a trip."), a("Done.", reasoning_content="Paris or Rome?"),
                                   u("Rome, then?")]),
    # --- tools ----------------------------------------------------------------------------------
    ("tools offered, not used", [u("Hello?"), a("Hi! How can I help?")], [WEATHER, SEARCH]),
    ("tool call, result, answer", [
        u("What's the weather in Paris?"),
        a("", tool_calls=[call("get_weather", {"location": "Paris", "unit": "celsius"}, "call_1")]),
        tool("{\"temperature\": 21.5, \"sky\": \"clear\"}", tool_call_id="call_1", name="get_weather"),
        a("It is 21.5 °C and clear in Paris.")], [WEATHER]),
    ("tool call with null content", [
        u("Weather in Zürich?"),
        a(None, tool_calls=[call("get_weather", {"location": "Zürich"})]),
        tool("18 °C, rain"),
        a("18 °C with rain.")], [WEATHER]),
    ("tool call with text before it", [
        u("Search for jinja docs."),
        a("Let me search that.", tool_calls=[call("search", {"query": "jinja docs", "max_results": 3})]),
        tool("1. jinja.palletsprojects.com"),
        a("Found: jinja.palletsprojects.com")], [SEARCH]),
    ("two parallel tool calls", [
        u("Weather in Tokyo and Oslo?"),
        a("", tool_calls=[call("get_weather", {"location": "東京"}, "a"), call("get_weather", {"location": "Oslo"}, "b")]),
        tool("25 °C", tool_call_id="a", name="get_weather"),
        tool("-3 °C", tool_call_id="b", name="get_weather"),
        a("Tokyo 25 °C, Oslo -3 °C.")], [WEATHER]),
    ("tool call arguments as a JSON string", [
        u("Compute 2*(3+4)."),
        a(None, tool_calls=[call("calculator", "{\"expression\": \"2*(3+4)\"}")]),
        tool("14"),
        a("14")], [CALC]),
    ("two string-argument tool calls", [
        u("Compute 1+1 and 2+2."),
        a(None, tool_calls=[call("calculator", "{\"expression\": \"1+1\"}"),
                            call("calculator", "{\"expression\": \"2+2\"}")]),
        tool("2"), tool("4"),
        a("2 and 4.")], [CALC]),
    ("nested tool arguments", [
        u("Search safely in German."),
        a("", tool_calls=[call("search", {"query": "Straßenbahn \"Linie 4\"", "max_results": 10,
                                          "filters": {"lang": "de", "safe": True, "tags": ["a", "ü", None],
                                                      "score": 0.25, "neg": -7}})]),
        tool("[]"),
        a("Nothing found.")], [SEARCH]),
    ("empty tool arguments", [
        u("Call it."), a("", tool_calls=[call("calculator", {})]), tool("error: no expression"),
        a("It needs an expression.")], [CALC]),
    ("conversation ends with a tool call", [
        u("Weather in Rome?"), a("", tool_calls=[call("get_weather", {"location": "Rome"})])], [WEATHER]),
    ("conversation ends with a tool result", [
        u("Weather in Rome?"), a("", tool_calls=[call("get_weather", {"location": "Rome"})]),
        tool("30 °C")], [WEATHER]),
    ("tool result as parts", [
        u("Weather in Lima?"), a("", tool_calls=[call("get_weather", {"location": "Lima"})]),
        tool([text("19 °C")]), a("19 °C in Lima.")], [WEATHER]),
    ("tool call with reasoning", [
        s("Use tools when needed."),
        u("Is it warmer in Cairo or Madrid?"),
        a("", reasoning_content="I need both temperatures.",
          tool_calls=[call("get_weather", {"location": "Cairo"}), call("get_weather", {"location": "Madrid"})]),
        tool("35 °C"), tool("28 °C"),
        a("Cairo is warmer.", reasoning_content="35 > 28.")], [WEATHER, CALC]),
    ("multi-step tools, eight messages", [
        s("You are an agent."),
        u("Find the weather in the capital of Japan, then convert to Fahrenheit."),
        a("<think>Capital of Japan is Tokyo.</think>Checking Tokyo.",
          tool_calls=[call("get_weather", {"location": "Tokyo", "unit": "celsius"})]),
        tool("20 °C", name="get_weather"),
        a("", tool_calls=[call("calculator", {"expression": "20 * 9 / 5 + 32"})]),
        tool("68.0", name="calculator"),
        a("It is 20 °C (68 °F) in Tokyo."),
        u("Thanks!")], [WEATHER, CALC, SEARCH]),
    # --- per-message training flag (ctune) --------------------------------------------------------
    ("train false on an answer", [u("Hi"), a("bad answer", train=False), u("Again"), a("good answer")]),
    ("train false on the last answer", [s("Sys"), u("Q"), a("A", train=False)]),
    ("train false on a tool-call answer", [
        u("Weather?"), a("", tool_calls=[call("get_weather", {"location": "Bern"})], train=False),
        tool("12 °C"), a("12 °C in Bern.")], [WEATHER]),
    ("train true explicitly", [u("Hi"), a("Hello", train=True)]),
]

# Extra template variables (apply_chat_template's **kwargs). Qwen3's template reads
# enable_thinking; the construct templates read it too. Qwen3.8's also reads preserve_thinking
# (earlier answers keep their <think> block unless it is false) and reasoning_effort (xhigh by
# default, medium, low; anything else refused).
KWARG_CASES = [
    ("enable_thinking false", [u("Solve 12*12.")], None, {"enable_thinking": False}),
    ("enable_thinking false after history", [u("Hi"), a("Hello", reasoning_content="greet"), u("12*12?")], None,
     {"enable_thinking": False}),
    ("enable_thinking true", [u("Solve 12*12."), a("144")], None, {"enable_thinking": True}),
    ("kwargs with tools", [u("Weather in Kyiv?")], [WEATHER], {"enable_thinking": False}),
    ("preserve_thinking false", [u("First?"), a("One.", reasoning_content="think one"), u("Second?"),
                                 a("Two.", reasoning_content="think two")], None, {"preserve_thinking": False}),
    ("preserve_thinking true", [u("First?"), a("One.", reasoning_content="think one"), u("Second?"),
                                a("Two.", reasoning_content="think two")], None, {"preserve_thinking": True}),
    ("reasoning_effort low with system", [s("Be brief."), u("Why is the sky blue?"),
                                          a("Rayleigh scattering.", reasoning_content="short")], None,
     {"reasoning_effort": "low"}),
    ("reasoning_effort medium", [u("Why is the sky blue?"), a("Rayleigh scattering.")], None,
     {"reasoning_effort": "medium"}),
    ("reasoning_effort high", [u("Why?")], None, {"reasoning_effort": "high"}),
]


def main():
    seen = set()
    rows = []
    for entry in CASES:
        name, messages = entry[0], entry[1]
        row = {"id": name, "messages": messages}
        if len(entry) > 2:
            row["tools"] = entry[2]
        rows.append(row)
    for name, messages, tools, kwargs in KWARG_CASES:
        row = {"id": name, "messages": messages}
        if tools is not None:
            row["tools"] = tools
        row["kwargs"] = kwargs
        rows.append(row)
    for row in rows:
        assert row["id"] not in seen, row["id"]
        seen.add(row["id"])
        print(json.dumps(row, ensure_ascii=False))


main()
