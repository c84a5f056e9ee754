// TensorBoard event files (trainer.logger: tensorboard): each call appends one scalar Event per
// metric at a step, in the TFRecord framing TensorBoard reads (a little-endian uint64 length,
// its masked CRC-32C, the serialized Event, its masked CRC-32C), after a first Event that
// carries the file version "brain.Event:2". One file per writer, named
// events.out.tfevents.<seconds>.<host>.<pid> as TensorFlow names them; flushed after every
// call. One thread at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rlmesh::coordinator {

class TensorBoardWriter {
 public:
  // Creates `dir` if needed and opens a new event file in it; INTERNAL naming the path when it
  // cannot.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Create(const std::string& dir);
  ~TensorBoardWriter();

  const std::string& path() const { return path_; }

  // One simple_value per metric, tagged with its name, at `step`. Non-finite values are
  // written as they are (TensorBoard shows them as NaN / inf). `wall_time`: the seconds since
  // the epoch the record carries (now when < 0).
  absl::Status WriteScalars(int64_t step, const std::map<std::string, double>& metrics,
                            double wall_time = -1);

 private:
  TensorBoardWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status WriteRecord(absl::string_view data);

  const std::string path_;
  std::FILE* file_;
};

// CRC-32C (Castagnoli) of `data`, and the masked form TFRecord stores:
// ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t Crc32c(absl::string_view data);
uint32_t MaskedCrc32c(absl::string_view data);

}  // namespace rlmesh::coordinator
