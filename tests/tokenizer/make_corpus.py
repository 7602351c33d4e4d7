#!/usr/bin/env python3
"""Writes corpus.jsonl: the strings every tokenizer golden test encodes (one JSON string a line).

Deterministic (no randomness): hand-written samples per category plus small generated
families (digit runs, whitespace runs, contraction casings, leading-space variants). Run it
after editing and commit both this script and corpus.jsonl:

    /usr/bin/python3 tests/tokenizer/make_corpus.py > tests/tokenizer/corpus.jsonl

Characters are limited to Unicode 14 so that Oniguruma 6.9.8 (Unicode 14 tables), utf8proc
and the JavaScript reference agree on every property; characters newer than that are covered
by the divergence tests instead.
"""
import json
import sys
import unicodedata

ENGLISH = [
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged.",
    "I'm sure you'LL like it; they've said we'd go, and she'S right. DON'T stop!",
    "'s 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D",
    "rock 'n' roll",
    "O'Neil's dog's bone",
    "\"Quoted\" and 'single' and `backticks`",
    "ALL CAPS SENTENCE WITH NUMBERS 123",
    "camelCaseIdentifier and snake_case_identifier and kebab-case-identifier",
    "Mr. Smith went to Washington D.C. on Jan. 5th, 2021.",
    "e.g. i.e. etc. vs. a.m. p.m.",
    "Well... I don't know -- maybe?!",
    "(parentheses) [brackets] {braces} <angles>",
    "semi;colon:colon,comma.period!bang?question",
    "a",
    "A",
    "I",
    "x y z",
    "supercalifragilisticexpialidocious",
    "antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
]

NUMBERS = [
    "3.14159265358979323846",
    "1,000,000",
    "1 000 000",
    "2024-01-31T12:34:56Z",
    "+1 (555) 123-4567",
    "0x1F 0xDEADBEEF 0b1010 0o777",
    "1e-9 6.022e23 -0.5",
    "$19.99 €5,00 ¥1000 £3",
    "50% off, 3/4 cup, 1:2 ratio",
    "v1.2.3-rc.4+build.5",
    "Version 10.0.19041.1234",
    "١٢٣٤٥٦٧٨٩٠",
    "१२३४५६७८९०",
    "一二三四五六七八九十",
    "①②③ ⅰⅱⅲ ⅠⅡⅢ",
    "123abc456def",
    "abc123def456",
]

WHITESPACE = [
    "",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\r\n",
    "\n\n\n",
    " \n ",
    "\t \t",
    "  leading spaces",
    "trailing spaces   ",
    "   both   ",
    "multiple   spaces   between   words",
    "\tTabbed\tcolumns\there",
    "line one\nline two\nline three",
    "windows\r\nline\r\nendings\r\n",
    "mixed \t\n whitespace \r\n\t end",
    "trailing newline\n",
    "\n\nleading newlines",
    "a\u00a0non-breaking\u00a0space",
    "ideographic\u3000space",
    "em\u2003space and thin\u2009space",
    "line\u2028separator and paragraph\u2029separator",
    "next\u0085line",
    "zero\u200bwidth\u200bspace",
    "word\u00adsoft\u00adhyphen",
    "\u000bvertical tab\u000cform feed",
    "    def indented():\n        return 1\n",
]

MULTILINGUAL = [
    "你好，世界！今天天气很好。",
    "我爱北京天安门，天安门上太阳升。",
    "日本語のテキストです。ひらがなとカタカナと漢字。",
    "東京スカイツリーは高さ634メートルです。",
    "ｶﾀｶﾅ ﾊﾝｶｸ and ＦＵＬＬＷＩＤＴＨ ａｂｃ １２３",
    "안녕하세요, 세계! 한국어 문장입니다.",
    unicodedata.normalize("NFD", "한국어 자모 분해"),
    "مرحبا بالعالم! هذه جملة عربية.",
    "بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ",
    "שלום עולם! זה משפט בעברית.",
    "בְּרֵאשִׁית בָּרָא אֱלֹהִים",
    "नमस्ते दुनिया! यह हिंदी का वाक्य है।",
    "क्षत्रिय ज्ञान श्री",
    "สวัสดีชาวโลก นี่คือประโยคภาษาไทย",
    "Привет, мир! Это русское предложение.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Γειά σου Κόσμε! Αυτή είναι μια ελληνική πρόταση.",
    "ΣΊΣΥΦΟΣ σίσυφος ς",
    "Tiếng Việt có dấu: Xin chào thế giới!",
    unicodedata.normalize("NFD", "Tiếng Việt có dấu: Xin chào thế giới!"),
    "İstanbul ıspanak IŞIK ışık",
    "Straße Fußgänger ÄÖÜ äöü ß",
    "Ελληνικά, Русский, עברית, العربية, हिन्दी, ไทย, 中文, 日本語, 한국어",
    "Բարեւ աշխարհ",
    "გამარჯობა მსოფლიო",
    "வணக்கம் உலகம்",
    "ওহে বিশ্ব",
    "ሰላም ለዓለም",
    "Hello мир 世界 مرحبا שלום नमस्ते 🌍",
    "façade naïve coöperate résumé jalapeño",
    "Ångström Øresund Æsir œuvre",
    "ﬁnance ﬂower ﬀ ﬃ",
]

EMOJI = [
    "😀😃😄😁",
    "I love 🍕 and 🍣!",
    "👍👍🏻👍🏼👍🏽👍🏾👍🏿",
    "👨‍👩‍👧‍👦 family",
    "🧑🏿‍💻 technologist",
    "🏳️‍🌈 🏳️‍⚧️ 🏴‍☠️",
    "🇺🇸🇯🇵🇫🇷🇩🇪🇧🇷",
    "1️⃣ 2️⃣ #️⃣ *️⃣",
    "❤️ ♥ ❤ 💔",
    "👩‍❤️‍💋‍👨",
    "🏴󠁧󠁢󠁳󠁣󠁴󠁿 Scotland",
    "emoji👍without🎉spaces",
    "☺︎ ☺️ text vs emoji presentation",
    "🦄🦕🦖🧬🧪",
]

COMBINING = [
    "é",
    "e\u0301",
    "Å A\u030a",
    "ñ n\u0303",
    "a\u0301\u0302\u0303\u0304",
    "\u0301starts with combining",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319a\u0306\u0301l\u0337g\u0336o\u0358",
    unicodedata.normalize("NFD", "Crème brûlée à la française"),
    unicodedata.normalize("NFC", "Crème brûlée à la française"),
    "q\u0307\u0323",
    "\u1e0b\u0323 d\u0323\u0307",
]

CODE = [
    "def hello(name: str) -> str:\n    return f\"Hello, {name}!\"\n",
    "for i in range(10):\n\tprint(i ** 2)",
    "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)",
    "#include <iostream>\nint main() {\n  std::cout << \"hi\" << std::endl;\n  return 0;\n}\n",
    "template <typename T> T max(T a, T b) { return a > b ? a : b; }",
    "auto x = std::make_unique<Foo>(); x->bar(); // comment",
    "{\"name\": \"ctune\", \"version\": 1, \"tags\": [\"a\", \"b\"], \"ok\": true, \"n\": null}",
    "{\n  \"nested\": {\n    \"key\": [1, 2, 3]\n  }\n}",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\"; done",
    "ls -la | grep -v '^d' | awk '{print $9}' > out.txt 2>&1",
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name;",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "const f = (a, b) => a + b; console.log(`sum: ${f(1, 2)}`);",
    "fn main() { let v: Vec<i32> = (0..10).collect(); println!(\"{:?}\", v); }",
    "x += 1; y -= 2; z *= 3; w /= 4; a %= 5; b **= 6; c //= 7",
    "if (a && b || !c) { return a != b && a == c; }",
    "regex: ^[a-zA-Z0-9_.+-]+@[a-zA-Z0-9-]+\\.[a-zA-Z0-9-.]+$",
    "# Markdown Title\n\n- item one\n- item two\n\n```python\nprint(1)\n```",
    "| col1 | col2 |\n|------|------|\n| a    | b    |",
    "C:\\Users\\name\\Documents\\file.txt",
    "/usr/local/lib/python3.11/site-packages/torch/__init__.py",
    "    \n    \n",
    "};\n\n\n}\n",
    "a=1;b=2;;;c=3",
    "/* block */ // line\n-- sql comment\n# hash",
]

SPECIAL = [
    "<|begin_of_text|>Hello",
    "Hello<|eot_id|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>",
    "<|im_start|><|im_start|>",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<think>\nreasoning\n</think>\n\nanswer",
    "<s>hello</s>",
    "<s> hello </s>",
    "a<s>b</s>c",
    "<s><s></s></s>",
    "<unk>",
    "an <unk> token",
    "<|begin_of_text",
    "begin_of_text|>",
    "<<s>>",
    "< s >",
    "<|eot_id|> <|eot_id|>",
    "<|reserved_special_token_5|>",
    "<tool_call>{\"a\": 1}</tool_call>",
]

URLS_MATH_MISC = [
    "https://www.example.com/path/to/page?query=1&lang=en#section",
    "http://localhost:8080/api/v1/users/42",
    "mailto:someone@example.org",
    "ftp://files.example.net/pub/file-1.2.3.tar.gz",
    "user@example.com, first.last+tag@sub.domain.co.uk",
    "∑_{i=1}^{n} x_i² ≤ ∞",
    "∀x ∈ ℝ, ∃y ∈ ℕ: x < y",
    "½ ⅓ ¼ ¾ ⅛",
    "x₁ + x₂ = y³",
    "𝔽𝕆𝕆 𝒳𝒴𝒵 𝐁𝐨𝐥𝐝",
    "α β γ δ ε → ⇒ ⟹ ≠ ≈ ≡ ±",
    "∫₀^∞ e^{-x²} dx = √π/2",
    "E = mc²",
    "©®™ §¶ †‡ •·…",
    "©2024 ACME™",
    "→←↑↓↔ ★☆ ✓✗ ♠♣♥♦",
    "«guillemets» „Anführungszeichen“ “curly” ‘quotes’",
    "— en–dash em—dash ‐ hyphen",
    "\ufffd replacement char",
    "\U0010fffd\U000f0000 private use planes",
    "\ue000\uf8ff private use",
    "\uffff\ufffe noncharacters",
    "\x00null\x01control\x7fdel",
    "\x1b[31mred\x1b[0m",
    "\u200d lone zwj \u200c zwnj",
    "\u2060word\u2060joiner",
    "\ufeffBOM at start",
    "\u202eright-to-left override\u202c",
    "𠀀𠀁𠀂 CJK extension B",
    "𓀀𓀁 hieroglyphs 𐍈 gothic",
    "ab" * 150,
    "a" * 300,
    "ha" * 5 + "!" * 20 + "?" * 20,
    "......" * 10,
    "-" * 80,
    "=" * 40 + "\n" + "#" * 40,
    "The end.",
]

LONG = [
    ("Natural language processing (NLP) is an interdisciplinary subfield of computer science and "
     "linguistics. It is primarily concerned with giving computers the ability to support and "
     "manipulate human language. It involves processing natural language datasets, such as text "
     "corpora or speech corpora, using either rule-based or probabilistic machine learning "
     "approaches. The goal is a computer capable of understanding the contents of documents, "
     "including the contextual nuances of the language within them. ") * 3,
    "自然语言处理是计算机科学领域与人工智能领域中的一个重要方向。它研究能实现人与计算机之间用自然语言进行有效通信的各种理论和方法。" * 4,
    "Обработка естественного языка — общее направление искусственного интеллекта и математической лингвистики. " * 4,
    "\n".join(f"line {i}: value={i * i}" for i in range(40)),
]


def generated():
    out = []
    # Digit runs of every length up to 40 (Llama-3 groups by three, Qwen splits digits).
    digits = "12345678901234567890123456789012345678901234567890"
    out += [digits[:n] for n in range(1, 41)]
    out += ["x" + digits[:n] + "y" for n in (4, 7, 10)]
    # Whitespace runs before words and punctuation.
    runs = [" ", "  ", "   ", "\t", "\n", "\r\n", " \n", "\n ", "\t\t", "\n\n"]
    for r in runs:
        out += [f"word{r}word", f"word{r}.", f"{r}word", f"word{r}"]
    # Contractions in several casings and positions.
    for c in ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d"):
        out += [f"it{c} fine", f"IT{c.upper()} FINE", f"x {c}"]
    # Leading-space variants of a few samples from each family.
    for s in ENGLISH[:6] + MULTILINGUAL[:6] + EMOJI[:4] + CODE[:3] + SPECIAL[:4]:
        out.append(" " + s)
    return out


def main():
    corpus = ENGLISH + NUMBERS + WHITESPACE + MULTILINGUAL + EMOJI + COMBINING + CODE + SPECIAL
    corpus += URLS_MATH_MISC + LONG + generated()
    seen, unique = set(), []
    for s in corpus:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    for s in unique:
        sys.stdout.write(json.dumps(s, ensure_ascii=True) + "\n")
    print(f"{len(unique)} strings", file=sys.stderr)


if __name__ == "__main__":
    main()
