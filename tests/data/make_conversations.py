#!/usr/bin/env python3
"""Writes conversations.jsonl, the corpus of the chat-template golden test (render_reference.mjs
renders it with the real templates, test_chat_templates.cpp compares). One conversation per line:
{"id": what the case exercises, "messages": [...]}. Every line is rendered with every template;
conversations a template refuses (Llama-2's alternation rule) must be refused by ctune too.
Run: python3 make_conversations.py > conversations.jsonl (no dependencies)."""
import json


def u(c):
    return {"role": "user", "content": c}


def a(c):
    return {"role": "assistant", "content": c}


def s(c):
    return {"role": "system", "content": c}


CASES = [
    ("single turn", [u("What is 2+2?"), a("4")]),
    ("system prompt", [s("You are a terse assistant."), u("Name a color."), a("Blue.")]),
    ("three turns with system", [s("Answer in French."), u("Hello"), a("Bonjour"), u("Thanks"), a("Merci"),
                                  u("Bye"), a("Au revoir")]),
    ("two turns without system", [u("Count to three."), a("1, 2, 3"), u("Now backwards."), a("3, 2, 1")]),
    ("CJK", [s("你是一个有帮助的助手。"), u("你好，世界！今天天气怎么样？"), a("こんにちは。今日は晴れです。안녕하세요!")]),
    ("emoji and ZWJ sequences", [u("Family emoji? 👨‍👩‍👧‍👦"), a("Here: 👋🏽 🇯🇵 ❤️‍🔥 🧑🏿‍💻")]),
    ("combining marks (NFD)", [u("Cafe\u0301 nai\u0308ve"), a("e\u0301 a\u0308 \u0915\u094d\u0937 o\u0302\u0323")]),
    ("leading/trailing spaces and newlines", [u("  hello there  "), a("\n\n  The answer.  \n\n")]),
    ("newlines inside content", [u("line 1\nline 2\n\nline 4"), a("first\nsecond\n\n\nthird")]),
    ("empty assistant content", [u("Say nothing."), a("")]),
    ("whitespace-only assistant content", [u("Whitespace?"), a("   \n \t ")]),
    ("empty user content", [u(""), a("You sent an empty message.")]),
    ("empty system content", [s(""), u("Hi"), a("Hello")]),
    ("CRLF and tabs", [u("a\r\nb\tc"), a("col1\tcol2\r\nv1\tv2")]),
    ("code block", [u("Print hi in Python."), a("```python\nprint('hi')\n```\nDone {\"json\": [1, 2]}")]),
    ("RTL scripts", [u("مرحبا بالعالم"), a("שלום עולם")]),
    ("Unicode spaces at the edges (NBSP, ideographic space)", [u("\u00a0spaced\u3000"), a("\u3000answer\u00a0")]),
    ("five turns", [m for k in range(1, 6) for m in (u(f"Q{k}: what is {k}*{k}?"), a(f"{k * k}"))]),
    ("think block in the last answer", [u("What is 2+2?"), a("<think>\nAdd two and two.\n</think>\n\nThe answer is 4.")]),
    ("think block in an earlier answer", [u("First?"), a("<think>\nreason one\n</think>\n\nAnswer one."), u("Second?"),
                                          a("Answer two.")]),
    ("</think> without <think>", [u("Go"), a("just thinking</think>the answer")]),
    ("several </think>", [u("Go"), a("<think>a</think>b</think>c")]),
    ("reasoning with extra newlines", [u("Go"), a("<think>\n\n\nreasoning\n\n</think>\n\n\nanswer")]),
    ("empty think block given", [u("Go"), a("<think>\n\n</think>\n\nanswer")]),
    ("assistant content starting with a newline before a later turn", [u("One"), a("\nfirst"), u("Two"), a("second")]),
    ("indented code answer", [u("Indent?"), a("    indented line\n    second")]),
    ("tool_response wrapper as the last user message", [u("Look it up."), a("<think>need data</think>Calling."),
                                                        u("<tool_response>42</tool_response>"), a("It is 42.")]),
    ("special-token text inside user content", [u("What does <|im_end|> or <|eot_id|> mean?"), a("They end turns.")]),
    ("user only (nothing to train)", [s("System."), u("Hello?")]),
    # Conversations Llama-2's template refuses (raise_exception); the others render them.
    ("assistant first", [a("I speak first."), u("OK"), a("Fine")]),
    ("two user messages in a row", [u("Part one."), u("Part two."), a("Both parts read.")]),
    ("system in the middle", [s("Sys"), u("Hi"), a("Hello"), s("New rules."), u("Again"), a("Sure")]),
    ("two assistant messages in a row", [u("Go"), a("<think>x</think>step one"), a("step two")]),
]

# Whitespace that Python's str.strip() and JavaScript's trim() disagree on (U+0085, U+001F, U+FEFF)
# and Qwen3's lstrip('\n'), which @huggingface/jinja runs as a full trim: the two Jinja engines
# render these differently; ctune follows Python's Jinja (transformers).
DEVIATIONS = [
    ("engine difference: U+FEFF / U+0085 at the edges", [u("\ufeffquestion\u0085"), a("\u0085answer\ufeff")]),
    ("engine difference: spaces after </think>", [u("Go"), a("<think>r</think>  \n answer")]),
]

for name, messages in CASES + DEVIATIONS:
    print(json.dumps({"id": name, "messages": messages}, ensure_ascii=False))
