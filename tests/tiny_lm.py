"""A tiny randomly initialised causal LM with a locally built tokenizer (no download), for trainer tests."""

from __future__ import annotations

from pathlib import Path

WORDS = ("Question Answer : . , ? + - * = the The answer is has gets more How many apples Tom Mia left in total "
         "Solve math problem Reason briefly step by then end with where N final number").split()


def build_tiny_lm(folder: Path, seed: int = 0) -> Path:
    """Write a 2-layer Llama (hidden 16) and a word-level tokenizer with the few-shot chat template."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from agora.models.convert import FEWSHOT_CHAT_TEMPLATE

    specials = ["<unk>", "<pad>", "<bos>", "<eos>"]
    vocab = {t: i for i, t in enumerate(specials + list(dict.fromkeys(WORDS)) + [str(n) for n in range(100)])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation()])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", pad_token="<pad>",
                                        bos_token="<bos>", eos_token="<eos>")
    tokenizer.chat_template = FEWSHOT_CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                         pad_token_id=1, bos_token_id=2, eos_token_id=3, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
