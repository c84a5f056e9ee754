// Tiny model configs for tests: real architectures at sizes that train in milliseconds.
#pragma once

namespace rlmesh::model {

// A small Qwen3 (grouped-query attention, q/k norms, tied embeddings) over a vocabulary of 20.
inline constexpr char kTinyQwen3ConfigJson[] =
    R"({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 32, "intermediate_size": 48,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 8, "vocab_size": 20, "max_position_embeddings": 32,
        "tie_word_embeddings": true})";

}  // namespace rlmesh::model
