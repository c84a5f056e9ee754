#include "common/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"

namespace rlmesh::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// safetensors dtype name -> (torch dtype, element size). Only the float types of LLM weights.
bool LookupDtype(const std::string& name, torch::Dtype* dtype, int64_t* size) {
  if (name == "F32") {
    *dtype = torch::kFloat32;
    *size = 4;
  } else if (name == "BF16") {
    *dtype = torch::kBFloat16;
    *size = 2;
  } else if (name == "F16") {
    *dtype = torch::kFloat16;
    *size = 2;
  } else {
    return false;
  }
  return true;
}

absl::StatusOr<std::string> DtypeName(torch::Dtype dtype, const std::string& tensor) {
  switch (dtype) {
    case torch::kFloat32:
      return std::string("F32");
    case torch::kBFloat16:
      return std::string("BF16");
    case torch::kFloat16:
      return std::string("F16");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", tensor, "\": dtype ", c10::toString(dtype),
                       " cannot be written (expected F32, BF16 or F16)"));
  }
}

absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat(path, ": write failed: ", std::strerror(errno)));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<torch::Tensor> ReadTensor(const SafetensorsReader& reader, const std::string& name,
                                         torch::Dtype dtype) {
  auto it = reader.entries().find(name);
  if (it == reader.entries().end()) {
    return absl::NotFoundError(absl::StrCat(reader.source(), ": missing tensor \"", name, "\""));
  }
  const SafetensorsEntry& e = it->second;
  torch::Dtype stored = torch::kFloat32;
  int64_t elem = 0;
  LookupDtype(e.dtype, &stored, &elem);
  try {
    torch::Tensor view = torch::from_blob(const_cast<uint8_t*>(e.data), e.shape,
                                          torch::TensorOptions().dtype(stored));
    torch::Tensor out = view.to(dtype, /*non_blocking=*/false, /*copy=*/true);
    // NaN or infinite weights would only show as a failed step much later (after a whole
    // warm-up): refused here, naming the tensor.
    if (out.is_floating_point()) {
      const int64_t bad = out.numel() - torch::isfinite(out).sum().item<int64_t>();
      if (bad > 0) {
        return absl::InvalidArgumentError(absl::StrCat(e.file, ": tensor \"", name, "\": ", bad,
                                                       " of ", out.numel(),
                                                       " values are NaN or infinite"));
      }
    }
    return out;
  } catch (const c10::Error& err) {
    return absl::InternalError(absl::StrCat(
        e.file, ": tensor \"", name, "\": conversion failed: ", err.what_without_backtrace()));
  }
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                              const TensorFetch& fetch) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    ASSIGN_OR_RETURN(std::string dtype, DtypeName(t.scalar_type(), name));
    const uint64_t n = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {
        {"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  // One tensor's CPU bytes at a time, in file order.
  auto bytes_of = [&](size_t i) -> absl::StatusOr<torch::Tensor> {
    const auto& [name, given] = tensors[i];
    torch::Tensor t = given;
    if (fetch) {
      ASSIGN_OR_RETURN(t, fetch(name, given));
      if (t.scalar_type() != given.scalar_type() || t.sizes() != given.sizes()) {
        return absl::InternalError(
            absl::StrCat(path, ": tensor \"", name, "\" came back with another dtype or shape"));
      }
    }
    return t.detach().to(torch::kCPU).contiguous();
  };
  std::string text = header.dump();
  // The reference writer pads the header with spaces so the data starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));

  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat(path, ": cannot create a temporary file: ", std::strerror(errno)));
  }
  absl::Status st = WriteAll(fd, len, 8, tmp);
  if (st.ok()) st = WriteAll(fd, text.data(), text.size(), tmp);
  for (size_t i = 0; st.ok() && i < tensors.size(); ++i) {
    absl::StatusOr<torch::Tensor> cpu = bytes_of(i);
    st = cpu.ok() ? WriteAll(fd, cpu->data_ptr(), cpu->numel() * cpu->element_size(), tmp)
                  : cpu.status();
  }
  if (st.ok() && ::fsync(fd) != 0) {
    st = absl::InternalError(absl::StrCat(tmp, ": fsync failed: ", std::strerror(errno)));
  }
  // mkstemp creates 0600; a checkpoint is meant to be read by other users and tools.
  if (st.ok() && ::fchmod(fd, 0644) != 0) {
    st = absl::InternalError(absl::StrCat(tmp, ": chmod failed: ", std::strerror(errno)));
  }
  ::close(fd);
  if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) {
    st = absl::InternalError(
        absl::StrCat(path, ": rename from ", tmp, " failed: ", std::strerror(errno)));
  }
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

absl::Status WriteSafetensorsCheckpoint(
    const std::string& dir, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    int64_t max_shard_bytes, const TensorFetch& fetch) {
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> shards(1);
  int64_t current = 0;
  for (const auto& item : tensors) {
    const int64_t n = item.second.numel() * item.second.element_size();
    if (current > 0 && current + n > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(item);
    current += n;
  }
  if (shards.size() == 1) {
    return WriteSafetensors((fs::path(dir) / "model.safetensors").string(), tensors, fetch);
  }
  json weight_map = json::object();
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file =
        absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    RETURN_IF_ERROR(WriteSafetensors((fs::path(dir) / file).string(), shards[i], fetch));
    for (const auto& [name, t] : shards[i]) {
      weight_map[name] = file;
      total += t.numel() * t.element_size();
    }
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  const std::string path = (fs::path(dir) / "model.safetensors.index.json").string();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << index.dump(2) << "\n";
    if (!out) return absl::InternalError(absl::StrCat(tmp, ": write failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat(path, ": rename failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace rlmesh::model
