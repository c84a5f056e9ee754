#include "common/model/safetensors_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/nesting.h"
#include "common/status/status_macros.h"

namespace rlmesh::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

int64_t SafetensorsElementSize(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  return 0;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

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
  if (absl::Status deep = CheckNesting(text, index); !deep.ok()) return deep;
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
      return absl::InvalidArgumentError(
          absl::StrCat(index, ": tensor \"", name, "\": expected a file name, got ", file.dump()));
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
      return absl::InvalidArgumentError(
          absl::StrCat(entry.file, ": tensor \"", name, "\" is not listed in ", index));
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
  if (absl::Status deep = CheckNesting(header_text, absl::StrCat(path, ": header")); !deep.ok()) {
    return deep;
  }
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
    const int64_t elem = SafetensorsElementSize(e.dtype);
    if (elem == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unsupported dtype \"", e.dtype, "\" (expected F32, BF16 or F16)"));
    }
    // Checked products: [2^62, 4] of F32 would otherwise wrap to 0 bytes and be accepted.
    int64_t numel = 1;
    bool zero = false, overflow = false;
    for (const json& d : info["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": shape must be non-negative integers, got ", info["shape"].dump()));
      }
      e.shape.push_back(d.get<int64_t>());
      zero = zero || d.get<int64_t>() == 0;
      overflow = overflow || __builtin_mul_overflow(numel, d.get<int64_t>(), &numel);
    }
    if (zero) numel = 0;
    int64_t nbytes = 0;
    if ((overflow && !zero) || __builtin_mul_overflow(numel, elem, &nbytes)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": shape ", ShapeString(e.shape), " of ", e.dtype, " needs more than 2^63 bytes"));
    }
    const json& off = info["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned() ||
        off[0].get<uint64_t>() > off[1].get<uint64_t>()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": data_offsets must be [begin, end] with 0 <= begin <= end, got ", off.dump()));
    }
    const uint64_t begin = off[0].get<uint64_t>();
    const uint64_t end = off[1].get<uint64_t>();
    if (static_cast<uint64_t>(nbytes) != end - begin) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": shape ", ShapeString(e.shape),
                                                     " of ", e.dtype, " needs ", nbytes,
                                                     " bytes but data_offsets span ", end - begin));
    }
    if (end > data_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": data_offsets end ", end, " lies outside the data (", data_size,
                       " bytes after the header); the file is truncated or the header is wrong"));
    }
    if (entries_.contains(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": also stored in ", entries_[name].file));
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
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor \"", s.name, "\" data_offsets [", s.begin, ", ", s.end,
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

absl::Status SafetensorsReader::ValidateAgainst(const ModelConfig& config) const {
  std::set<std::string> expected;
  for (const auto& [name, shape] : config.TensorShapes()) {
    expected.insert(name);
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ": missing tensor \"", name,
                                                     "\" (expected shape ", ShapeString(shape),
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

bool HasSafetensors(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / "model.safetensors", ec) ||
         fs::exists(fs::path(dir) / "model.safetensors.index.json", ec);
}

absl::StatusOr<ModelConfig> CheckModelFolder(const std::string& dir) {
  ASSIGN_OR_RETURN(ModelConfig config,
                   ModelConfig::FromFile((fs::path(dir) / "config.json").string()));
  if (HasSafetensors(dir)) {
    ASSIGN_OR_RETURN(auto reader, SafetensorsReader::Open(dir));
    RETURN_IF_ERROR(reader->ValidateAgainst(config));
  }
  return config;
}

}  // namespace rlmesh::model
