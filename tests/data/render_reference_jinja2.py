#!/usr/bin/env python3
"""Second reference for the chat-template golden test: the same renders as
render_reference.mjs, with Python's Jinja2 set up the way transformers' apply_chat_template sets
it up (sandboxed environment, trim_blocks, lstrip_blocks, loopcontrols, raise_exception). This is
the engine the models' templates were written for; @huggingface/jinja departs from it on a few
string methods (strip/lstrip/rstrip ignore their argument, trim() strips JavaScript's whitespace
set), and the gtest uses this output to tell those engine differences from ctune bugs.
  python3 render_reference_jinja2.py JS_REFERENCE_JSON CONVERSATIONS OUT_JSON
Templates, bos and eos are taken from the JavaScript reference file, so both render the same
inputs. Each result also has "gen_text": the conversation up to its last user message rendered
with add_generation_prompt=True. Needs the jinja2 module; exits with status 77 (skipped) when it
is missing."""
import json
import os
import sys

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("jinja2 is not installed for " + sys.executable + "; skipping the Python reference")
    sys.exit(77)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def main():
    js_path, conversations_path, out = sys.argv[1:4]
    with open(js_path, encoding="utf-8") as f:
        js = json.load(f)
    with open(conversations_path, encoding="utf-8") as f:
        conversations = [json.loads(line) for line in f if line.strip()]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    result = {}
    for name, t in js.items():
        template = env.from_string(t["source"])
        results = []
        for conv in conversations:
            try:
                text = template.render(messages=conv["messages"], bos_token=t["bos"] or "", eos_token=t["eos"] or "",
                                       add_generation_prompt=False)
                result_i = {"text": text}
                # The generation prompt: the conversation up to its last user message, rendered
                # with add_generation_prompt=True (what `ctune generate --chat` feeds the model).
                users = [k for k, m in enumerate(conv["messages"]) if m["role"] == "user"]
                if users:
                    result_i["gen_text"] = template.render(messages=conv["messages"][:users[-1] + 1],
                                                           bos_token=t["bos"] or "", eos_token=t["eos"] or "",
                                                           add_generation_prompt=True)
                results.append(result_i)
            except jinja2.exceptions.TemplateError as e:
                results.append({"error": str(e)})
        result[name] = {"results": results}
        errors = sum(1 for r in results if "error" in r)
        print(f"{name}: {len(results) - errors} rendered, {errors} refused (jinja2 {jinja2.__version__})")
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)
    os.replace(out + ".tmp", out)


main()
