"""Plain data that ``fedbench plan``'s options name (no torch: building the CLI parser, and
``fedbench list`` from its cache, must not import it): the named model shapes and the
precisions device throughputs are given for."""

from __future__ import annotations

#: precisions a device class gives a throughput for (``tflops`` in the device catalogue)
PRECISIONS = ("fp32", "bf16")

#: name -> (model_type, config fields, source). The fields not given are the transformers
#: config class's defaults, which for BertConfig and ViTConfig *are* the named models.
SHAPES: dict[str, tuple[str, dict, str]] = {
    "bert-base-uncased": ("bert", {}, "transformers BertConfig() defaults = bert-base-uncased's config.json "
                                      "(hidden 768, 12 layers, 12 heads, ffn 3072, vocab 30522)"),
    "vit-b16": ("vit", {}, "transformers ViTConfig() defaults = google/vit-base-patch16-224's config.json "
                           "(hidden 768, 12 layers, 12 heads, ffn 3072, 224 px, patch 16)"),
    "opt-1.3b": ("opt", {"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 32,
                         "ffn_dim": 8192, "vocab_size": 50272, "max_position_embeddings": 2048,
                         "word_embed_proj_dim": 2048, "do_layer_norm_before": True},
                 "facebook/opt-1.3b config.json (hidden 2048, 24 layers, 32 heads, ffn 8192, vocab 50272)"),
    "llama-3.2-1b": ("llama", {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
                               "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
                               "vocab_size": 128256, "max_position_embeddings": 131072, "rope_theta": 500000.0,
                               "tie_word_embeddings": True},
                     "meta-llama/Llama-3.2-1B config.json (hidden 2048, 16 layers, 32 heads, 8 KV heads, "
                     "ffn 8192, vocab 128256, tied embeddings)"),
}
