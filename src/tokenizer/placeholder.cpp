// placeholder until the tokenizer implementation lands
