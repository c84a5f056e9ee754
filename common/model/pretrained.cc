#include "common/model/pretrained.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/dist/cuda_here.h"
#include "common/model/safetensors.h"
#include "common/status/status_macros.h"

namespace rlmesh::model {
namespace {

namespace fs = std::filesystem;

const char* DtypeConfigName(torch::Dtype dtype) {
  return dtype == torch::kBFloat16 ? "bfloat16" : "float32";
}

absl::Status CopyInto(CausalLmImpl& model, const SafetensorsReader& reader) {
  RETURN_IF_ERROR(reader.ValidateAgainst(model.config()));
  torch::NoGradGuard no_grad;
  for (auto& item : model.named_parameters()) {
    ASSIGN_OR_RETURN(torch::Tensor t, ReadTensor(reader, item.key(), model.options().dtype));
    try {
      item.value().copy_(t);
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat(reader.source(), ": tensor \"", item.key(),
                                              "\": copy failed: ", e.what_without_backtrace()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<CausalLmImpl>> LoadPretrained(const std::string& dir,
                                                             const CausalLmOptions& options) {
  ASSIGN_OR_RETURN(ModelConfig config,
                   ModelConfig::FromFile((fs::path(dir) / "config.json").string()));
  ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(dir));
  // Validate before allocating the network, so a bad file fails fast and cheaply.
  RETURN_IF_ERROR(reader->ValidateAgainst(config));
  ASSIGN_OR_RETURN(auto model, CausalLmImpl::CreateUninitialized(config, options));
  RETURN_IF_ERROR(CopyInto(*model, *reader));
  return model;
}

absl::Status LoadWeights(const std::string& dir, CausalLmImpl& model) {
  ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(dir));
  return CopyInto(model, *reader);
}

absl::Status SavePretrained(const CausalLmImpl& model, const std::string& dir,
                            const std::string& tokenizer_source_dir, const SaveOptions& options) {
  std::error_code ec;
  fs::path target = fs::absolute(fs::path(dir), ec);
  if (target.has_filename() == false) target = target.parent_path();  // "out/" -> "out"
  fs::create_directories(target.parent_path(), ec);
  std::string tmp_template = target.string() + ".tmp.XXXXXX";
  if (::mkdtemp(tmp_template.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat(dir, ": cannot create a temporary folder beside it: ", std::strerror(errno)));
  }
  const fs::path tmp(tmp_template);
  auto fail = [&](absl::Status st) {
    fs::remove_all(tmp, ec);
    return st;
  };
  fs::permissions(tmp,
                  fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec,
                  ec);

  ModelConfig config = model.config();
  config.torch_dtype = DtypeConfigName(model.options().dtype);
  {
    std::ofstream out(tmp / "config.json", std::ios::binary);
    out << config.ToJson();
    if (!out)
      return fail(
          absl::InternalError(absl::StrCat((tmp / "config.json").string(), ": write failed")));
  }
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : model.named_parameters()) tensors.emplace_back(item.key(), item.value());
  if (absl::Status st =
          WriteSafetensorsCheckpoint(tmp.string(), tensors, options.max_shard_bytes, options.fetch);
      !st.ok()) {
    return fail(st);
  }
  if (!tokenizer_source_dir.empty()) {
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                             "generation_config.json"}) {
      const fs::path from = fs::path(tokenizer_source_dir) / name;
      const bool required = std::strcmp(name, "tokenizer.json") == 0;
      if (!fs::exists(from, ec)) {
        if (required) {
          return fail(absl::NotFoundError(absl::StrCat(from.string(), ": not found (",
                                                       "SavePretrained copies the tokenizer)")));
        }
        continue;
      }
      if (!fs::copy_file(from, tmp / name, fs::copy_options::overwrite_existing, ec)) {
        return fail(absl::InternalError(
            absl::StrCat(from.string(), ": copy into ", tmp.string(), " failed: ", ec.message())));
      }
    }
  }
  // Swap the folders: the old one (if any) is moved aside first, then removed.
  const fs::path old = fs::path(target.string() + ".old");
  fs::remove_all(old, ec);
  const bool had_old = fs::exists(target, ec);
  if (had_old) {
    fs::rename(target, old, ec);
    if (ec) {
      return fail(absl::InternalError(
          absl::StrCat(dir, ": cannot move the existing folder aside: ", ec.message())));
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    const std::string message = ec.message();
    if (had_old) fs::rename(old, target, ec);
    return fail(absl::InternalError(
        absl::StrCat(dir, ": rename from ", tmp.string(), " failed: ", message)));
  }
  if (had_old) fs::remove_all(old, ec);
  return absl::OkStatus();
}

absl::StatusOr<CausalLmOptions> ParseCausalLmOptions(const std::string& dtype,
                                                     const std::string& device) {
  CausalLmOptions options;
  if (dtype == "bfloat16") {
    options.dtype = torch::kBFloat16;
  } else if (dtype != "float32") {
    return absl::InvalidArgumentError(
        absl::StrCat("rlmesh.dtype: expected float32 or bfloat16, got \"", dtype, "\""));
  }
  int index = -1;  // "cuda:N": a group's rank on GPU N (common/dist/placement.h)
  if (device == "cuda" || (absl::StartsWith(device, "cuda:") &&
                           absl::SimpleAtoi(device.substr(5), &index) && index >= 0)) {
    options.device = index >= 0 ? torch::Device(torch::kCUDA, static_cast<int8_t>(index))
                                : torch::Device(torch::kCUDA);
  } else if (device != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("rlmesh.device: expected cpu or cuda, got \"", device, "\""));
  }
  return options;
}

absl::StatusOr<CausalLmOptions> CausalLmOptionsFromConfig(const std::string& dtype,
                                                          const std::string& device,
                                                          absl::string_view device_key) {
  ASSIGN_OR_RETURN(CausalLmOptions options, ParseCausalLmOptions(dtype, device));
  if (options.device.is_cuda()) {
    RETURN_IF_ERROR(dist::CheckCudaDevice(
        device_key, options.device.has_index() ? options.device.index() : -1, dist::CudaHereNow()));
  }
  return options;
}

}  // namespace rlmesh::model
