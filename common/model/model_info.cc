#include "common/model/model_info.h"

#include <openssl/evp.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model/model_config.h"
#include "common/tokenizer/tokenizer.h"

namespace rlmesh::model {

namespace {

// The files a client compares to its own copies, in this order.
constexpr const char* kModelFiles[] = {
    "tokenizer.json",          "tokenizer_config.json",  "vocab.json", "merges.txt",
    "special_tokens_map.json", "generation_config.json", "config.json"};

}  // namespace

absl::StatusOr<std::string> FileSha256(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    return absl::InternalError("SHA-256 is not available from OpenSSL");
  std::vector<unsigned char> buffer(1 << 20);
  size_t got = 0;
  while ((got = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0) {
    EVP_DigestUpdate(ctx.get(), buffer.data(), got);
  }
  if (std::ferror(file.get())) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &length);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

absl::StatusOr<v1::GetModelInfoResponse> ReadModelInfo(const std::string& model_path) {
  const std::filesystem::path dir(model_path);
  auto config = ModelConfig::FromFile((dir / "config.json").string());
  if (!config.ok()) return config.status();
  v1::GetModelInfoResponse info;
  info.set_model_path(model_path);
  info.set_architecture(config->architecture);
  info.set_model_type(config->model_type);
  info.set_vocab_size(static_cast<int32_t>(config->vocab_size));
  for (int64_t id : config->eos_token_ids) info.add_eos_token_ids(static_cast<int32_t>(id));
  if (config->bos_token_id) info.set_bos_token_id(static_cast<int32_t>(*config->bos_token_id));
  info.mutable_limits()->set_max_position_embeddings(
      static_cast<int32_t>(config->max_position_embeddings));
  for (const char* name : kModelFiles) {
    const std::filesystem::path path = dir / name;
    std::error_code error;
    if (!std::filesystem::is_regular_file(path, error)) continue;
    auto sha = FileSha256(path.string());
    if (!sha.ok()) return sha.status();
    v1::ModelFile* file = info.add_files();
    file->set_name(name);
    file->set_bytes(static_cast<int64_t>(std::filesystem::file_size(path, error)));
    file->set_sha256(*sha);
    if (file->name() == "tokenizer.json") info.set_tokenizer_sha256(*sha);
  }
  if (info.tokenizer_sha256().empty()) return info;
  auto tokenizer = tokenizer::Tokenizer::FromDirectory(model_path);
  if (!tokenizer.ok()) return tokenizer.status();
  for (int32_t id : (*tokenizer)->SpecialIds()) {
    v1::SpecialToken* token = info.add_special_tokens();
    token->set_id(id);
    token->set_content((*tokenizer)->IdToToken(id).value_or(""));
  }
  if (!info.has_bos_token_id() && (*tokenizer)->bos_token_id())
    info.set_bos_token_id(*(*tokenizer)->bos_token_id());
  if ((*tokenizer)->pad_token_id()) info.set_pad_token_id(*(*tokenizer)->pad_token_id());
  info.set_chat_template((*tokenizer)->chat_template_text());
  return info;
}

}  // namespace rlmesh::model
