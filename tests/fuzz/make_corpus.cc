// Writes the seed corpora of the fuzz targets, tests/fuzz/corpus/<parser>/: small valid files
// of each format (from the repository's own configs, recipes and the tiny tokenizer) and the
// inputs that crashed or exhausted a parser before: JSON and YAML nested 100k levels deep
// (SIGSEGV), vocabulary ids of 2147483647 and 2000000000 (bad_alloc, 20.9 GB), safetensors
// header lengths of 2^63, offsets beyond the file and shapes whose byte count overflows, a
// config.json with 2^31-1 layers or a rope_scaling that read freed memory, a number beyond
// double in a dataset row, and ${...} references that expand a 4 KB YAML file to terabytes.
// Deterministic: the same files on every run, so the committed corpus can be rewritten and diffed.
//
//   fuzz_make_corpus SOURCE_DIR     rewrites SOURCE_DIR/tests/fuzz/corpus/*/ (its own files)
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/model/model_config.h"
#include "common/tokenizer/tiny.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

fs::path g_corpus;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "fuzz_make_corpus: %s\n", message.c_str());
  std::exit(1);
}

std::string Read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Die("cannot read " + path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void Write(const std::string& parser, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_corpus / parser;
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) Die("cannot write " + (dir / name).string());
}

std::string Deep(const std::string& open, const std::string& close, int levels = 100000) {
  std::string s;
  for (int i = 0; i < levels; ++i) s += open;
  for (int i = 0; i < levels; ++i) s += close;
  return s;
}

// An 8-byte little-endian header length, the header, the data.
std::string Safetensors(uint64_t header_len, const std::string& header, const std::string& data) {
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header_len >> (8 * i)) & 0xff);
  return file + header + data;
}
std::string Safetensors(const std::string& header, const std::string& data) {
  return Safetensors(header.size(), header, data);
}

std::string Tensor(const std::string& dtype, const std::string& shape, uint64_t begin,
                   const std::string& end) {
  return "{\"dtype\": \"" + dtype + "\", \"shape\": " + shape + ", \"data_offsets\": [" +
         std::to_string(begin) + ", " + end + "]}";
}

void WriteSafetensorsSeeds() {
  const std::string p = "safetensors_header";
  // Two tensors: F32 [2, 2] = 1, 2, 3, 4 and BF16 [3] = 1, 2, 3.
  std::string data;
  for (uint32_t bits : {0x3f800000u, 0x40000000u, 0x40400000u, 0x40800000u}) {
    for (int i = 0; i < 4; ++i) data.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  }
  for (uint16_t bits : {0x3f80, 0x4000, 0x4040}) {
    data.push_back(static_cast<char>(bits & 0xff));
    data.push_back(static_cast<char>(bits >> 8));
  }
  Write(p, "two_tensors.safetensors",
        Safetensors(
            "{\"__metadata__\": {\"format\": \"pt\"}, \"a\": " + Tensor("F32", "[2, 2]", 0, "16") +
                ", \"b\": " + Tensor("BF16", "[3]", 16, "22") + "}",
            data));

  // Every tensor of the target's small Llama config (vocab 4, hidden 2, 1 layer), in F32.
  auto config = rlmesh::model::ModelConfig::FromJson(
      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 4, "hidden_size": 2,
          "intermediate_size": 2, "num_hidden_layers": 1, "num_attention_heads": 1})",
      "small config.json");
  if (!config.ok()) Die(std::string(config.status().message()));
  ordered_json header = ordered_json::object();
  uint64_t offset = 0;
  for (const auto& [name, shape] : config->TensorShapes()) {
    uint64_t bytes = 4;
    for (int64_t d : shape) bytes *= static_cast<uint64_t>(d);
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  Write(p, "small_llama.safetensors", Safetensors(header.dump(), std::string(offset, '\0')));
  Write(p, "no_tensors.safetensors", Safetensors("{}", ""));

  Write(p, "header_len_2pow63.safetensors", Safetensors(uint64_t{1} << 63, "{}", ""));
  Write(p, "header_len_max.safetensors", Safetensors(~uint64_t{0}, "{}", ""));
  Write(p, "shorter_than_length.safetensors", std::string("\x02\x00\x00", 3));
  Write(p, "offsets_beyond_file.safetensors",
        Safetensors("{\"a\": " + Tensor("F32", "[4]", 0, "16") + "}", std::string(8, '\0')));
  Write(p, "offsets_near_2pow64.safetensors",
        Safetensors(
            "{\"a\": " + Tensor("F32", "[2]", 18446744073709551600u, "18446744073709551608") + "}",
            ""));
  // 2^62 x 4 elements x 4 bytes wraps int64 arithmetic to 0 bytes.
  Write(p, "huge_shape_wraps_to_zero.safetensors",
        Safetensors("{\"a\": " + Tensor("F32", "[4611686018427387904, 4]", 0, "0") + "}", ""));
  // A zero dimension makes it 0 bytes whatever the others are: valid.
  Write(p, "huge_shape_with_zero.safetensors",
        Safetensors("{\"a\": " + Tensor("F32", "[4611686018427387904, 0]", 0, "0") + "}", ""));
  Write(p, "huge_shape_int64_max.safetensors",
        Safetensors(
            "{\"a\": " + Tensor("F16", "[9223372036854775807, 9223372036854775807]", 0, "2") + "}",
            std::string(2, '\0')));
  Write(p, "negative_dim.safetensors",
        Safetensors("{\"a\": " + Tensor("F32", "[-1, 4]", 0, "16") + "}", std::string(16, '\0')));
  Write(p, "overlapping.safetensors",
        Safetensors("{\"a\": " + Tensor("F32", "[2]", 0, "8") +
                        ", \"b\": " + Tensor("F32", "[2]", 4, "12") + "}",
                    std::string(12, '\0')));
  Write(p, "deep_nesting.safetensors", Safetensors("{\"a\": " + Deep("[", "]") + "}", ""));
}

void WriteModelConfigSeeds(const fs::path& source) {
  const std::string p = "model_config";
  Write(p, "qwen3_8b.json", Read(source / "tests/recipes/models/qwen3-8b/config.json"));
  Write(p, "qwen2_5_0_5b.json",
        Read(source / "tests/recipes/models/qwen2.5-0.5b-instruct/config.json"));
  // Llama 3.2 1B: rope_scaling llama3, a list of eos ids, tied embeddings.
  Write(p, "llama3_2_1b.json", R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "intermediate_size": 8192,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 16,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "vocab_size": 128256
}
)");
  // low_freq_factor above the default high_freq_factor: the error message read the missing
  // key through operator[] of a const json (heap-use-after-free under ASan).
  Write(p, "rope_scaling_without_high_freq.json",
        R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 4,
  "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 1,
  "rope_scaling": {"rope_type": "llama3", "low_freq_factor": 5.0}})");
  Write(p, "deep_nesting.json", "{\"architectures\": " + Deep("[", "]") + "}");
  const std::string tiny =
      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 259, "hidden_size": 128,
  "intermediate_size": 352, "num_attention_heads": 4, "max_position_embeddings": 64,
  "num_hidden_layers": )";
  // TensorShapes() lists 9 tensors per layer: 2^31-1 layers asked for ~10^10 of them.
  Write(p, "layers_2pow31.json", tiny + "2147483647}");
  Write(p, "layers_2pow63.json", tiny + "9223372036854775807}");
  Write(p, "sizes_overflow_int64.json",
        R"({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 9223372036854775807,
  "hidden_size": 4611686018427387904, "intermediate_size": 4611686018427387904,
  "num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 4611686018427387904})");
  Write(p, "sizes_beyond_uint64.json",
        R"({"architectures": ["Qwen2ForCausalLM"], "vocab_size": 18446744073709551616,
  "hidden_size": 18446744073709551615, "intermediate_size": 1e308, "num_hidden_layers": -1,
  "num_attention_heads": 2147483648, "rope_theta": 1e400})");
}

ordered_json TinyTokenizer(const rlmesh::tokenizer::TinyTokenizerOptions& options) {
  const fs::path dir = fs::temp_directory_path() / "rlmesh_fuzz_make_corpus";
  if (absl::Status s = rlmesh::tokenizer::WriteTinyTokenizer(dir.string(), options); !s.ok()) {
    Die(std::string(s.message()));
  }
  ordered_json j = ordered_json::parse(Read(dir / "tokenizer.json"));
  fs::remove_all(dir);
  return j;
}

void WriteTokenizerSeeds() {
  const std::string p = "tokenizer_json";
  rlmesh::tokenizer::TinyTokenizerOptions options;
  options.merge_text =
      "Hello, world! The quick brown fox jumps over the lazy dog. Hello again, world: "
      "the fox, the dog and the world say hello 123 4567.";
  options.num_merges = 40;
  const ordered_json merged = TinyTokenizer(options);
  Write(p, "tiny_40_merges.json", merged.dump(1));
  Write(p, "tiny_bytes_only.json", TinyTokenizer({}).dump(1));

  // The GPT-2 layout: ByteLevel(use_regex) alone, no normalizer, merges as "a b" strings, a
  // TemplateProcessing post-processor and an lstrip/rstrip/single_word added token.
  ordered_json gpt2 = merged;
  gpt2["normalizer"] = nullptr;
  gpt2["pre_tokenizer"] = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  ordered_json strings = ordered_json::array();
  for (const auto& m : merged["model"]["merges"]) {
    strings.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  gpt2["model"]["merges"] = strings;
  const ordered_json& first = merged["added_tokens"][0];
  gpt2["post_processor"] = {{"type", "TemplateProcessing"},
                            {"single",
                             {{{"SpecialToken", {{"id", first["content"]}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                            {"special_tokens",
                             {{first["content"].get<std::string>(),
                               {{"id", first["content"]},
                                {"ids", ordered_json::array({first["id"]})},
                                {"tokens", ordered_json::array({first["content"]})}}}}}};
  gpt2["added_tokens"].push_back({{"id", merged["added_tokens"].back()["id"].get<int>() + 1},
                                  {"content", "<tool>"},
                                  {"single_word", true},
                                  {"lstrip", true},
                                  {"rstrip", true},
                                  {"normalized", false},
                                  {"special", false}});
  Write(p, "gpt2_layout.json", gpt2.dump(1));

  ordered_json big_id = merged;
  big_id["model"]["vocab"]["\xc4\xa0\xc4\xa0\xc4\xa0"] = 2147483647;
  Write(p, "vocab_id_2147483647.json", big_id.dump(1));
  big_id["model"]["vocab"]["\xc4\xa0\xc4\xa0\xc4\xa0"] = 2000000000;
  Write(p, "vocab_id_2000000000.json", big_id.dump(1));
  ordered_json big_added = merged;
  big_added["added_tokens"][0]["id"] = 2147483647;
  Write(p, "added_token_id_2147483647.json", big_added.dump(1));
  Write(p, "deep_nesting.json", "{\"model\": " + Deep("[", "]") + "}");
}

void WriteYamlSeeds(const fs::path& source) {
  const std::string p = "yaml_config";
  Write(p, "quickstart.yaml", Read(source / "deploy/configs/quickstart.yaml"));
  Write(p, "recipe_base.yaml", Read(source / "tests/recipes/base.yaml"));
  // The input after a "%%" line is one override per line (see fuzz_yaml_config.cc).
  Write(p, "overrides.yaml",
        "data:\n  train_batch_size: 16\n  train_files: [a.jsonl, b.jsonl]\n"
        "trainer:\n  experiment_name: run-1\n  total_epochs: 2\n"
        "actor_rollout_ref.actor.optim.lr: 3e-4\n"
        "\n%%\n"
        "actor_rollout_ref.rollout.n=4\n"
        "+trainer.project_name=${trainer.experiment_name}-x\n"
        "++data.val_files=[c.jsonl]\n"
        "trainer.default_local_dir=\n"
        "actor_rollout_ref.rollout.top_k=-1\n");
  Write(p, "deep_nesting.yaml", "data:\n  train_files: " + Deep("[", "]") + "\n");
  Write(p, "deep_nesting_override.yaml", "\n%%\ndata.train_files=" + Deep("[", "]") + "\n");
  // Block sequences nest without brackets ("- - - x"); yaml-cpp stops at depth 2000.
  std::string block = "data:\n  train_files:\n    ";
  for (int i = 0; i < 3000; ++i) block += "- ";
  Write(p, "deep_block_sequence.yaml", block + "x\n");
  // Anchors ten times wider at each level: 10^7 scalars if expanded.
  std::string anchors = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 7; ++i) {
    anchors += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) anchors += (k ? ", *l" : "*l") + std::to_string(i - 1);
    anchors += "]\n";
  }
  Write(p, "anchor_laughs.yaml", anchors + "data: *l6\n");
  // ${...} references 16 wide, 9 deep: 1000 x 16^8 bytes (4 TB) if expanded.
  const char* keys[] = {"trainer.project_name",
                        "trainer.experiment_name",
                        "trainer.default_local_dir",
                        "trainer.resume_from_path",
                        "custom_reward_function.path",
                        "custom_reward_function.name",
                        "rlmesh.host",
                        "rlmesh.run_dir",
                        "rlmesh.rollout.replica_id"};
  std::string laughs = std::string(keys[0]) + ": \"" + std::string(1000, 'x') + "\"\n";
  for (size_t i = 1; i < std::size(keys); ++i) {
    laughs += std::string(keys[i]) + ": \"";
    for (int k = 0; k < 16; ++k) laughs += "${" + std::string(keys[i - 1]) + "}";
    laughs += "\"\n";
  }
  Write(p, "interpolation_laughs.yaml", laughs);
  Write(p, "reference_cycle.yaml",
        "trainer:\n  project_name: ${trainer.experiment_name}\n"
        "  experiment_name: a-${trainer.project_name}\n");
}

void WriteDatasetSeeds(const fs::path& source) {
  const std::string p = "dataset_row";
  std::istringstream train(Read(source / "tests/recipes/data/gsm8k_train.jsonl"));
  std::string rows, line;
  for (int i = 0; i < 3 && std::getline(train, line); ++i) rows += line + "\n";
  Write(p, "gsm8k.jsonl", rows);
  Write(
      p, "chat_rows.jsonl",
      R"({"data_source": "openai/gsm8k", "prompt": [{"role": "system", "content": "Think step by step."}, {"role": "user", "content": "What is 6 \u00d7 7? \ud83d\ude00"}], "reward_model": {"style": "rule", "ground_truth": 42}, "extra_info": {"split": "test", "index": 7, "answer": "42", "tags": ["a", {"b": null}]}}

{"data_source": "lighteval/MATH", "prompt": [{"role": "user", "content": "Half of 5?"}], "ability": "math", "reward_model": {"ground_truth": 2.5}, "extra_info": null}
{"data_source": "x", "prompt": [{"role": "user", "content": ""}], "reward_model": {"ground_truth": "-0.0"}}
)");
  Write(p, "deep_prompt.jsonl", "\n{\"prompt\": " + Deep("[", "]") + "}\n");
  Write(p, "deep_extra_info.jsonl",
        "{\"prompt\": [{\"role\": \"user\", \"content\": \"x\"}], \"extra_info\": " +
            Deep("[", "]") + "}\n");
  // nlohmann throws out_of_range (not parse_error) for a number beyond double.
  Write(
      p, "number_beyond_double.jsonl",
      R"({"data_source": "a", "prompt": [{"role": "user", "content": "x"}], "reward_model": {"ground_truth": "1"}, "extra_info": {"x": 1e400}})"
      "\n");
  Write(
      p, "huge_integers.jsonl",
      R"({"data_source": "a", "prompt": [{"role": "user", "content": "x"}], "reward_model": {"ground_truth": 18446744073709551616}, "extra_info": {"i": -9223372036854775809, "u": 18446744073709551615}})"
      "\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) Die("usage: fuzz_make_corpus SOURCE_DIR");
  const fs::path source = argv[1];
  g_corpus = source / "tests/fuzz/corpus";
  WriteSafetensorsSeeds();
  WriteModelConfigSeeds(source);
  WriteTokenizerSeeds();
  WriteYamlSeeds(source);
  WriteDatasetSeeds(source);
  std::printf("fuzz_make_corpus: wrote %s\n", g_corpus.string().c_str());
  return 0;
}
