// `rlmesh make-tiny-model`: writes a randomly initialised Llama / Qwen2 / Qwen3 model as a
// Hugging Face folder (config.json, model.safetensors, tokenizer files), for tests and the
// quickstart. Weights are normal(0, 0.02) with unit norms, drawn from --seed.
#include <stdlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/command.h"
#include "common/model/causal_lm.h"
#include "common/model/pretrained.h"
#include "common/status/status_macros.h"
#include "common/tokenizer/tiny.h"

namespace rlmesh::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kUsage[] =
    "usage: rlmesh make-tiny-model --arch llama|qwen2|qwen3 --out DIR\n"
    "         [--hidden N] [--layers N] [--heads N] [--kv-heads N] [--intermediate N]\n"
    "         [--vocab N] [--head-dim N] [--tie] [--seed N] [--dtype float32|bfloat16]\n"
    "         [--max-position N] [--rope-theta X] [--llama3-rope-factor X]\n"
    "         [--tokenizer PATH/tokenizer.json] [--num-labels N]\n"
    "Writes a random model in Hugging Face format. Without --tokenizer a small byte-level BPE\n"
    "tokenizer is written; --vocab defaults to the tokenizer's size. --num-labels N writes a\n"
    "reward model instead: <Arch>ForSequenceClassification, a `score` head of N outputs read\n"
    "at the last token (pad_token_id: the tokenizer's pad token, when it has one).\n"
    "Defaults: --hidden 64 --layers 2 --heads 4 --kv-heads 2 --intermediate 128 --seed 0\n"
    "--dtype float32 --max-position 4096 --rope-theta 10000; head_dim = hidden / heads.\n";

struct Flags {
  std::string arch, out, dtype = "float32", tokenizer;
  int64_t hidden = 64, layers = 2, heads = 4, kv_heads = 2, intermediate = 128, vocab = 0,
          head_dim = 0, seed = 0, max_position = 4096, num_labels = 0;
  double rope_theta = 10000.0, llama3_factor = 0.0;
  bool tie = false;
};

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--tie") {
      f.tie = true;
      continue;
    }
    if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, ": expected a value"));
    const std::string value = argv[++i];
    auto int_flag = [&](int64_t* out) -> absl::Status {
      if (!absl::SimpleAtoi(value, out) || *out < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(arg, ": expected a non-negative integer, got \"", value, "\""));
      }
      return absl::OkStatus();
    };
    auto double_flag = [&](double* out) -> absl::Status {
      if (!absl::SimpleAtod(value, out) || !(*out > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat(arg, ": expected a number > 0, got \"", value, "\""));
      }
      return absl::OkStatus();
    };
    if (arg == "--arch") {
      f.arch = value;
    } else if (arg == "--out") {
      f.out = value;
    } else if (arg == "--dtype") {
      f.dtype = value;
    } else if (arg == "--tokenizer") {
      f.tokenizer = value;
    } else if (arg == "--hidden") {
      RETURN_IF_ERROR(int_flag(&f.hidden));
    } else if (arg == "--layers") {
      RETURN_IF_ERROR(int_flag(&f.layers));
    } else if (arg == "--heads") {
      RETURN_IF_ERROR(int_flag(&f.heads));
    } else if (arg == "--kv-heads") {
      RETURN_IF_ERROR(int_flag(&f.kv_heads));
    } else if (arg == "--intermediate") {
      RETURN_IF_ERROR(int_flag(&f.intermediate));
    } else if (arg == "--vocab") {
      RETURN_IF_ERROR(int_flag(&f.vocab));
    } else if (arg == "--head-dim") {
      RETURN_IF_ERROR(int_flag(&f.head_dim));
    } else if (arg == "--seed") {
      RETURN_IF_ERROR(int_flag(&f.seed));
    } else if (arg == "--num-labels") {
      RETURN_IF_ERROR(int_flag(&f.num_labels));
    } else if (arg == "--max-position") {
      RETURN_IF_ERROR(int_flag(&f.max_position));
    } else if (arg == "--rope-theta") {
      RETURN_IF_ERROR(double_flag(&f.rope_theta));
    } else if (arg == "--llama3-rope-factor") {
      RETURN_IF_ERROR(double_flag(&f.llama3_factor));
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag \"", arg, "\""));
    }
  }
  if (f.arch.empty() || f.out.empty()) {
    return absl::InvalidArgumentError("--arch and --out are required");
  }
  if (f.dtype != "float32" && f.dtype != "bfloat16") {
    return absl::InvalidArgumentError(
        absl::StrCat("--dtype: expected float32 or bfloat16, got \"", f.dtype, "\""));
  }
  return f;
}

absl::StatusOr<json> ReadJson(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not JSON"));
  return j;
}

// What the model config takes from a tokenizer folder: its size and eos/bos ids.
struct TokenizerFacts {
  int64_t vocab_size = 0;
  std::vector<int64_t> eos;
  std::optional<int64_t> bos;
  std::optional<int64_t> pad;
};

absl::StatusOr<TokenizerFacts> ReadTokenizerFacts(const fs::path& dir) {
  ASSIGN_OR_RETURN(json tok, ReadJson(dir / "tokenizer.json"));
  TokenizerFacts facts;
  std::map<std::string, int64_t> ids;
  if (tok.contains("model") && tok["model"].contains("vocab") && tok["model"]["vocab"].is_object()) {
    for (const auto& [piece, id] : tok["model"]["vocab"].items()) {
      if (id.is_number_integer()) ids[piece] = id.get<int64_t>();
    }
  }
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array()) {
    for (const json& t : tok["added_tokens"]) {
      if (t.contains("content") && t.contains("id")) ids[t["content"]] = t["id"].get<int64_t>();
    }
  }
  if (ids.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat((dir / "tokenizer.json").string(), ": no model.vocab or added_tokens"));
  }
  for (const auto& [piece, id] : ids) facts.vocab_size = std::max(facts.vocab_size, id + 1);
  std::error_code ec;
  if (fs::exists(dir / "tokenizer_config.json", ec)) {
    ASSIGN_OR_RETURN(json cfg, ReadJson(dir / "tokenizer_config.json"));
    auto lookup = [&](const char* key) -> std::optional<int64_t> {
      if (!cfg.contains(key)) return std::nullopt;
      const json& v = cfg[key];
      std::string content = v.is_string() ? v.get<std::string>()
                            : (v.is_object() && v.contains("content")) ? v["content"].get<std::string>()
                                                                       : "";
      auto it = ids.find(content);
      return it == ids.end() ? std::nullopt : std::optional<int64_t>(it->second);
    };
    if (auto eos = lookup("eos_token")) facts.eos.push_back(*eos);
    facts.bos = lookup("bos_token");
    facts.pad = lookup("pad_token");
  }
  return facts;
}

absl::Status MakeTinyModel(const Flags& f) {
  model::ModelConfig c;
  if (f.arch == "llama") {
    c.arch = model::Arch::kLlama;
    c.architecture = "LlamaForCausalLM";
    c.model_type = "llama";
  } else if (f.arch == "qwen2") {
    c.arch = model::Arch::kQwen2;
    c.architecture = "Qwen2ForCausalLM";
    c.model_type = "qwen2";
    c.attention_bias = true;
  } else if (f.arch == "qwen3") {
    c.arch = model::Arch::kQwen3;
    c.architecture = "Qwen3ForCausalLM";
    c.model_type = "qwen3";
    c.qk_norm = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--arch: expected llama, qwen2 or qwen3, got \"", f.arch, "\""));
  }
  // The tokenizer first: it fixes the vocabulary size and the special ids.
  std::string tmpl = fs::absolute(f.out).string() + ".tok.XXXXXX";
  fs::create_directories(fs::absolute(f.out).parent_path());
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat(f.out, ": cannot create a temporary folder beside it"));
  }
  const fs::path tok_tmp(tmpl);
  fs::path tok_dir = tok_tmp;
  if (f.tokenizer.empty()) {
    RETURN_IF_ERROR(tokenizer::WriteTinyTokenizer(tok_tmp.string(), {}));
  } else {
    fs::path given(f.tokenizer);
    tok_dir = fs::is_directory(given) ? given : given.parent_path();
    if (tok_dir.empty()) tok_dir = ".";
  }
  auto facts = ReadTokenizerFacts(tok_dir);
  if (!facts.ok()) {
    fs::remove_all(tok_tmp);
    return facts.status();
  }
  c.vocab_size = f.vocab > 0 ? f.vocab : facts->vocab_size;
  if (c.vocab_size < facts->vocab_size) {
    fs::remove_all(tok_tmp);
    return absl::InvalidArgumentError(absl::StrCat("--vocab ", c.vocab_size,
                                                   " is smaller than the tokenizer's ",
                                                   facts->vocab_size, " ids"));
  }
  c.eos_token_ids = facts->eos;
  c.bos_token_id = facts->bos;
  c.hidden_size = f.hidden;
  c.intermediate_size = f.intermediate;
  c.num_hidden_layers = f.layers;
  c.num_attention_heads = f.heads;
  c.num_key_value_heads = f.kv_heads;
  c.head_dim = f.head_dim > 0 ? f.head_dim : (f.heads > 0 ? f.hidden / f.heads : 0);
  c.max_position_embeddings = f.max_position;
  c.rope_theta = f.rope_theta;
  c.tie_word_embeddings = f.tie;
  c.torch_dtype = f.dtype;
  if (f.num_labels > 0) {
    if (f.tie) {
      fs::remove_all(tok_tmp);
      return absl::InvalidArgumentError("--tie: a reward model (--num-labels) has no lm_head to tie");
    }
    c.head = model::Head::kSequenceClassification;
    c.architecture.replace(c.architecture.find("ForCausalLM"), std::string("ForCausalLM").size(),
                           "ForSequenceClassification");
    c.num_labels = f.num_labels;
    c.pad_token_id = facts->pad;
  }
  if (f.llama3_factor > 0) c.rope_scaling = model::RopeScaling{f.llama3_factor, 1.0, 4.0, 8192};
  // Round-trip through the config.json parser so the sizes get its validation and messages.
  auto checked = model::ModelConfig::FromJson(c.ToJson(), "--arch/--hidden/... flags");
  if (!checked.ok()) {
    fs::remove_all(tok_tmp);
    return checked.status();
  }
  torch::manual_seed(static_cast<uint64_t>(f.seed));
  model::CausalLmOptions options;
  options.dtype = f.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  options.sequence_classification = f.num_labels > 0;
  auto m = model::CausalLmImpl::Create(*checked, options);
  absl::Status st = m.ok() ? model::SavePretrained(**m, f.out, tok_dir.string()) : m.status();
  fs::remove_all(tok_tmp);
  RETURN_IF_ERROR(st);
  std::printf("wrote %s: %s, %lld parameters, vocab %lld, %s\n", f.out.c_str(),
              c.architecture.c_str(), static_cast<long long>(checked->NumParameters()),
              static_cast<long long>(c.vocab_size), f.dtype.c_str());
  return absl::OkStatus();
}

int Run(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  auto flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "make-tiny-model: %s\n\n%s", std::string(flags.status().message()).c_str(),
                 kUsage);
    return 2;
  }
  absl::Status st = MakeTinyModel(*flags);
  if (!st.ok()) {
    std::fprintf(stderr, "make-tiny-model: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  return 0;
}

RLMESH_REGISTER_COMMAND("make-tiny-model", "write a random Llama/Qwen2/Qwen3 model in HF format",
                        Run);

}  // namespace
}  // namespace rlmesh::cli
