// A checkpoint's manifest: checkpoint_manifest.json lists every file of the checkpoint folder
// with its size and CRC-32, and is written last, once every rank's files are in place. A
// folder is a complete checkpoint when its manifest is there and every file it lists has that
// size and checksum; loading checks this before it applies anything, so a file that is
// missing, cut short or overwritten with other bytes is named instead of being loaded.
// Pure file I/O; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rlmesh::trainer {

inline constexpr char kManifestFile[] = "checkpoint_manifest.json";

// The CRC-32 (zlib's) of the file at `path`; NotFound when it cannot be read.
absl::StatusOr<uint32_t> FileCrc32(const std::string& path);

// Lists every regular file under `dir` (but the manifest) into <dir>/checkpoint_manifest.json,
// written atomically.
absl::Status WriteManifest(const std::string& dir);

// OK when `dir` is a complete checkpoint. Otherwise FailedPrecondition naming what is missing
// (the manifest itself: the save did not finish) or DataLoss naming the file whose size or
// checksum differs; InvalidArgument when the manifest does not parse.
absl::Status VerifyManifest(const std::string& dir);

// The checkpoint to resume from under `root` (trainer.default_local_dir): the step that
// latest_checkpointed_iteration.txt names, else, or when that one is not complete, the newest
// complete global_step_<N> folder. `skipped` gets "<folder>: <reason>" for each newer one
// passed over. NotFound when `root` holds no checkpoint at all; FailedPrecondition listing the
// reasons when it holds some but none is complete.
absl::StatusOr<std::string> ChooseCheckpoint(const std::string& root,
                                             std::vector<std::string>* skipped);

}  // namespace rlmesh::trainer
