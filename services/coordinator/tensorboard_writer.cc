#include "services/coordinator/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace rlmesh::coordinator {

namespace {

std::array<uint32_t, 256> Crc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected
    table[i] = c;
  }
  return table;
}

// Protocol-buffer wire format, enough for Event, Summary and Summary.Value.
void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void PutTag(std::string& out, int field, int wire_type) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}
void PutBytes(std::string& out, int field, absl::string_view bytes) {
  PutTag(out, field, 2);
  PutVarint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}
template <typename T>
void PutFixed(std::string& out, int field, T value) {
  PutTag(out, field, sizeof(T) == 8 ? 1 : 5);
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(raw, sizeof(T));
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary: value = 1, repeated Value: tag = 1, simple_value = 2 (float)).
std::string EventBytes(double wall_time, int64_t step, const std::string* file_version,
                       const std::map<std::string, double>* scalars) {
  std::string event;
  PutFixed<double>(event, 1, wall_time);
  if (step != 0) {
    PutTag(event, 2, 0);
    PutVarint(event, static_cast<uint64_t>(step));
  }
  if (file_version != nullptr) PutBytes(event, 3, *file_version);
  if (scalars != nullptr) {
    std::string summary;
    for (const auto& [tag, value] : *scalars) {
      std::string v;
      PutBytes(v, 1, tag);
      PutFixed<float>(v, 2, static_cast<float>(value));
      PutBytes(summary, 1, v);
    }
    PutBytes(event, 5, summary);
  }
  return event;
}

double Now() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

}  // namespace

uint32_t Crc32c(absl::string_view data) {
  static const std::array<uint32_t, 256> table = Crc32cTable();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) crc = table[(crc ^ byte) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t MaskedCrc32c(absl::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Create(
    const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("tensorboard: cannot create ", dir, ": ", error.message()));
  }
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const double now = Now();
  const std::string path =
      (std::filesystem::path(dir) /
       absl::StrCat("events.out.tfevents.", static_cast<int64_t>(now), ".", host, ".", getpid()))
          .string();
  std::FILE* file = std::fopen(path.c_str(), "ab");
  if (file == nullptr) {
    return absl::InternalError(
        absl::StrCat("tensorboard: cannot open ", path, ": ", std::strerror(errno)));
  }
  auto writer = std::unique_ptr<TensorBoardWriter>(new TensorBoardWriter(path, file));
  const std::string version = "brain.Event:2";
  if (absl::Status s = writer->WriteRecord(EventBytes(now, 0, &version, nullptr)); !s.ok()) {
    return s;
  }
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(file_); }

absl::Status TensorBoardWriter::WriteScalars(int64_t step,
                                             const std::map<std::string, double>& metrics,
                                             double wall_time) {
  return WriteRecord(EventBytes(wall_time < 0 ? Now() : wall_time, step, nullptr, &metrics));
}

absl::Status TensorBoardWriter::WriteRecord(absl::string_view data) {
  std::string record;
  const uint64_t length = data.size();
  char raw[8];
  std::memcpy(raw, &length, 8);
  record.append(raw, 8);
  const uint32_t length_crc = MaskedCrc32c(absl::string_view(raw, 8));
  std::memcpy(raw, &length_crc, 4);
  record.append(raw, 4);
  record.append(data.data(), data.size());
  const uint32_t data_crc = MaskedCrc32c(data);
  std::memcpy(raw, &data_crc, 4);
  record.append(raw, 4);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat("tensorboard: cannot append to ", path_));
  }
  return absl::OkStatus();
}

}  // namespace rlmesh::coordinator
