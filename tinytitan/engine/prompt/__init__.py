"""From a ChatRequest to the model's token ids: template messages, raw prompts, reasoning levels, splicing onto cached ids."""
