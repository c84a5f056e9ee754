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
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

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
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", tensor, "\": dtype ",
                                                     c10::toString(dtype),
                                                     " cannot be written (expected F32, BF16 or F16)"));
  }
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

SafetensorsReader::~SafetensorsReader() {
  for (const Mapping& m : mappings_) {
    if (m.addr != nullptr) ::munmap(m.addr, m.size);
  }
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(
    const std::string& path) {
  std::unique_ptr<SafetensorsReader> reader(new SafetensorsReader());
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    reader->source_ = path;
    RETURN_IF_ERROR(reader->AddFile(path));
    return reader;
  }
  const std::string single = (fs::path(path) / "model.safetensors").string();
  const std::string index = (fs::path(path) / "model.safetensors.index.json").string();
  if (fs::exists(single, ec)) {
    reader->source_ = single;
    RETURN_IF_ERROR(reader->AddFile(single));
    return reader;
  }
  if (!fs::exists(index, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": neither model.safetensors nor ",
                                            "model.safetensors.index.json found"));
  }
  reader->source_ = index;
  ASSIGN_OR_RETURN(std::string text, ReadText(index));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index, ": expected a JSON object with a \"weight_map\" object"));
  }
  std::map<std::string, std::string> expected_file;  // tensor -> shard
  std::set<std::string> shards;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(index, ": tensor \"", name,
                                                     "\": expected a file name, got ", file.dump()));
    }
    expected_file[name] = file.get<std::string>();
    shards.insert(file.get<std::string>());
  }
  for (const std::string& shard : shards) {
    RETURN_IF_ERROR(reader->AddFile((fs::path(path) / shard).string()));
  }
  for (const auto& [name, file] : expected_file) {
    auto it = reader->entries_.find(name);
    if (it == reader->entries_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(index, ": tensor \"", name,
                                                     "\" is listed in shard ", file,
                                                     " but that file does not contain it"));
    }
  }
  for (const auto& [name, entry] : reader->entries_) {
    if (!expected_file.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat(entry.file, ": tensor \"", name,
                                                     "\" is not listed in ", index));
    }
  }
  return reader;
}

absl::Status SafetensorsReader::AddFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": fstat failed: ", std::strerror(errno)));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": truncated file: ", size, " bytes, expected at least the 8-byte header length"));
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (addr == MAP_FAILED) {
    return absl::InternalError(absl::StrCat(path, ": mmap failed: ", std::strerror(errno)));
  }
  mappings_.push_back({path, addr, size});
  const uint8_t* base = static_cast<const uint8_t*>(addr);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];
  if (header_len > size - 8) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header length ", header_len,
                                                   " goes beyond the file (", size, " bytes)"));
  }
  const std::string header_text(reinterpret_cast<const char*>(base + 8), header_len);
  json header = json::parse(header_text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header is not a JSON object"));
  }
  const uint8_t* data = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string where = absl::StrCat(path, ": tensor \"", name, "\"");
    if (!info.is_object() || !info.contains("dtype") || !info["dtype"].is_string() ||
        !info.contains("shape") || !info["shape"].is_array() || !info.contains("data_offsets") ||
        !info["data_offsets"].is_array() || info["data_offsets"].size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": expected {\"dtype\", \"shape\", \"data_offsets\": [begin, end]}, got ",
          info.dump()));
    }
    SafetensorsEntry e;
    e.file = path;
    e.dtype = info["dtype"].get<std::string>();
    torch::Dtype dtype = torch::kFloat32;
    int64_t elem = 0;
    if (!LookupDtype(e.dtype, &dtype, &elem)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": unsupported dtype \"", e.dtype,
                                                     "\" (expected F32, BF16 or F16)"));
    }
    int64_t numel = 1;
    for (const json& d : info["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": shape must be non-negative integers, got ", info["shape"].dump()));
      }
      e.shape.push_back(d.get<int64_t>());
      numel *= d.get<int64_t>();
    }
    const json& off = info["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned() ||
        off[0].get<uint64_t>() > off[1].get<uint64_t>()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": data_offsets must be [begin, end] with 0 <= begin <= end, got ",
                       off.dump()));
    }
    const uint64_t begin = off[0].get<uint64_t>();
    const uint64_t end = off[1].get<uint64_t>();
    if (static_cast<uint64_t>(numel * elem) != end - begin) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": shape ", ShapeString(e.shape), " of ", e.dtype, " needs ", numel * elem,
          " bytes but data_offsets span ", end - begin));
    }
    if (end > data_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": data_offsets end ", end, " lies outside the data (", data_size,
          " bytes after the header); the file is truncated or the header is wrong"));
    }
    if (entries_.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": also stored in ",
                                                     entries_[name].file));
    }
    e.data = data + begin;
    e.nbytes = static_cast<int64_t>(end - begin);
    entries_[name] = std::move(e);
    spans.push_back({begin, end, name});
  }
  // Like the reference reader: tensors tile the data exactly, without gaps or overlaps.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  std::string previous;
  for (const Span& s : spans) {
    if (s.begin < expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor \"", s.name, "\" data_offsets [", s.begin, ", ", s.end,
          "] overlap tensor \"", previous, "\" (which ends at ", expected, ")"));
    }
    if (s.begin > expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor \"", s.name, "\" starts at ", s.begin, " but the previous tensor",
          previous.empty() ? "" : absl::StrCat(" \"", previous, "\""), " ends at ", expected,
          " (the data must be contiguous)"));
    }
    expected = s.end;
    previous = s.name;
  }
  if (expected != data_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the tensors cover ", expected, " bytes but the data holds ", data_size,
        previous.empty() ? "" : absl::StrCat(" (last tensor \"", previous, "\")")));
  }
  return absl::OkStatus();
}

absl::StatusOr<torch::Tensor> SafetensorsReader::Get(const std::string& name,
                                                     torch::Dtype dtype) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat(source_, ": missing tensor \"", name, "\""));
  }
  const SafetensorsEntry& e = it->second;
  torch::Dtype stored = torch::kFloat32;
  int64_t elem = 0;
  LookupDtype(e.dtype, &stored, &elem);
  try {
    torch::Tensor view = torch::from_blob(const_cast<uint8_t*>(e.data), e.shape,
                                          torch::TensorOptions().dtype(stored));
    return view.to(dtype, /*non_blocking=*/false, /*copy=*/true);
  } catch (const c10::Error& err) {
    return absl::InternalError(absl::StrCat(e.file, ": tensor \"", name,
                                            "\": conversion failed: ", err.what_without_backtrace()));
  }
}

absl::Status SafetensorsReader::ValidateAgainst(const ModelConfig& config) const {
  std::set<std::string> expected;
  for (const auto& [name, shape] : config.TensorShapes()) {
    expected.insert(name);
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          source_, ": missing tensor \"", name, "\" (expected shape ", ShapeString(shape),
          " for ", config.architecture, ")"));
    }
    if (it->second.shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          it->second.file, ": tensor \"", name, "\" has shape ", ShapeString(it->second.shape),
          ", expected ", ShapeString(shape), " from config.json"));
    }
  }
  for (const auto& [name, entry] : entries_) {
    if (!expected.contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          entry.file, ": unexpected tensor \"", name, "\" (not a parameter of ",
          config.architecture, config.tie_word_embeddings ? " with tied embeddings" : "", ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, torch::Tensor>>& tensors) {
  std::vector<torch::Tensor> cpu;
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    ASSIGN_OR_RETURN(std::string dtype, DtypeName(t.scalar_type(), name));
    torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    const uint64_t n = static_cast<uint64_t>(c.numel()) * c.element_size();
    header[name] = {{"dtype", dtype},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + n}}};
    offset += n;
    cpu.push_back(std::move(c));
  }
  std::string text = header.dump();
  // The reference writer pads the header with spaces so the data starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{text.size()} >> (8 * i));

  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(path, ": cannot create a temporary file: ",
                                            std::strerror(errno)));
  }
  absl::Status st = WriteAll(fd, len, 8, tmp);
  if (st.ok()) st = WriteAll(fd, text.data(), text.size(), tmp);
  for (size_t i = 0; st.ok() && i < cpu.size(); ++i) {
    st = WriteAll(fd, cpu[i].data_ptr(), cpu[i].numel() * cpu[i].element_size(), tmp);
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
    st = absl::InternalError(absl::StrCat(path, ": rename from ", tmp,
                                          " failed: ", std::strerror(errno)));
  }
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

absl::Status WriteSafetensorsCheckpoint(
    const std::string& dir, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
    int64_t max_shard_bytes) {
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
    return WriteSafetensors((fs::path(dir) / "model.safetensors").string(), tensors);
  }
  json weight_map = json::object();
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file =
        absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    RETURN_IF_ERROR(WriteSafetensors((fs::path(dir) / file).string(), shards[i]));
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
