#include "services/trainer/checkpoint_manifest.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace rlmesh::trainer {
namespace {

namespace fs = std::filesystem;

constexpr char kLatest[] = "latest_checkpointed_iteration.txt";
constexpr char kStepPrefix[] = "global_step_";

}  // namespace

absl::StatusOr<uint32_t> FileCrc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();
    if (got > 0)
      crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(got));
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return static_cast<uint32_t>(crc);
}

absl::Status WriteManifest(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> files;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    const std::string relative = fs::relative(it->path(), dir).generic_string();
    if (relative != kManifestFile) files.push_back(relative);
  }
  if (ec) return absl::InternalError(absl::StrCat("listing ", dir, ": ", ec.message()));
  std::sort(files.begin(), files.end());
  nlohmann::json list = nlohmann::json::array();
  for (const std::string& file : files) {
    const fs::path path = fs::path(dir) / file;
    const auto size = fs::file_size(path, ec);
    if (ec) return absl::InternalError(absl::StrCat(path.string(), ": ", ec.message()));
    auto crc = FileCrc32(path.string());
    if (!crc.ok()) return crc.status();
    list.push_back({{"path", file}, {"bytes", size}, {"crc32", *crc}});
  }
  const nlohmann::json manifest = {{"format", 1}, {"files", list}};
  const fs::path target = fs::path(dir) / kManifestFile;
  const fs::path tmp = target.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << manifest.dump(1) << "\n";
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp.string()));
  }
  fs::rename(tmp, target, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot rename ", tmp.string(), ": ", ec.message()));
  return absl::OkStatus();
}

absl::Status VerifyManifest(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(
        "checkpoint folder ", dir, fs::exists(dir, ec) ? " is not a folder" : " does not exist"));
  }
  const fs::path path = fs::path(dir) / kManifestFile;
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat(path.string(), " is missing: the save did not finish"));
  }
  std::stringstream text;
  text << in.rdbuf();
  // Depth-bounded by construction: the manifest has two levels, and anything else is refused.
  const auto manifest = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object() || !manifest.contains("files") || !manifest["files"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a checkpoint manifest"));
  }
  for (const auto& entry : manifest["files"]) {
    if (!entry.is_object() || !entry.contains("path") || !entry["path"].is_string() ||
        !entry.contains("bytes") || !entry["bytes"].is_number_unsigned() ||
        !entry.contains("crc32") || !entry["crc32"].is_number_unsigned()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path.string(), ": an entry without path, bytes and crc32"));
    }
    const std::string file = entry["path"].get<std::string>();
    const fs::path full = fs::path(dir) / file;
    std::error_code ec;
    const auto size = fs::file_size(full, ec);
    if (ec) return absl::FailedPreconditionError(absl::StrCat(full.string(), " is missing"));
    const auto expected = entry["bytes"].get<uint64_t>();
    if (size != expected) {
      return absl::DataLossError(
          absl::StrCat(full.string(), " has ", size, " bytes; the manifest says ", expected));
    }
    auto crc = FileCrc32(full.string());
    if (!crc.ok()) return absl::FailedPreconditionError(crc.status().message());
    if (*crc != entry["crc32"].get<uint64_t>()) {
      return absl::DataLossError(absl::StrCat(full.string(), " does not match its checksum in ",
                                              kManifestFile, " (the file changed after the save)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ChooseCheckpoint(const std::string& root,
                                             std::vector<std::string>* skipped) {
  // Candidates newest first: the marker's step, then every global_step_<N> by N.
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    if (entry.is_directory() && absl::StartsWith(name, kStepPrefix) &&
        absl::SimpleAtoi(absl::string_view(name).substr(sizeof(kStepPrefix) - 1), &step)) {
      steps.push_back(step);
    }
  }
  std::sort(steps.rbegin(), steps.rend());
  std::vector<std::string> reasons;
  const fs::path latest = fs::path(root) / kLatest;
  std::ifstream marker(latest);
  std::optional<int64_t> marked;
  if (marker) {
    std::stringstream text;
    text << marker.rdbuf();
    int64_t step = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(text.str()), &step) && step >= 0) {
      marked = step;
    } else {
      reasons.push_back(absl::StrCat(latest.string(), ": \"",
                                     absl::StripAsciiWhitespace(text.str()).substr(0, 40),
                                     "\" is not a step number"));
    }
  }
  if (!marker && steps.empty()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint under ", root, " (", kLatest,
                                            " is missing and no ", kStepPrefix, "<N> folder)"));
  }
  std::vector<int64_t> order;
  if (marked.has_value()) order.push_back(*marked);
  for (int64_t s : steps) {
    if (!marked.has_value() || s != *marked) order.push_back(s);
  }
  // A folder of a later step than the marker's is either a save that died before it reached
  // the marker (its manifest written after the marker), used when complete, or one of a line
  // of training given up when a run resumed from an earlier checkpoint (its manifest written
  // before the marker), passed over.
  std::sort(order.rbegin(), order.rend());
  std::optional<fs::file_time_type> marker_time;
  if (marked.has_value()) {
    const fs::file_time_type t = fs::last_write_time(latest, ec);
    if (!ec) marker_time = t;
  }
  for (int64_t s : order) {
    const std::string dir = (fs::path(root) / absl::StrCat(kStepPrefix, s)).string();
    if (marker_time.has_value() && s > *marked) {
      const fs::file_time_type written = fs::last_write_time(fs::path(dir) / kManifestFile, ec);
      if (!ec && written < *marker_time) {
        reasons.push_back(absl::StrCat(dir, ": written before ", kLatest, " named step ", *marked,
                                       ", so a line of training given up when a run "
                                       "resumed from an earlier checkpoint"));
        continue;
      }
    }
    absl::Status complete = fs::is_directory(dir)
                                ? VerifyManifest(dir)
                                : absl::FailedPreconditionError(absl::StrCat(
                                      dir, " is missing (", kLatest, " names step ", s, ")"));
    if (complete.ok()) {
      if (skipped != nullptr) *skipped = reasons;
      return dir;
    }
    // The folder once, then its files relative to it.
    reasons.push_back(
        absl::StrCat(dir, ": ", absl::StrReplaceAll(complete.message(), {{dir + "/", ""}})));
  }
  if (skipped != nullptr) *skipped = reasons;
  return absl::FailedPreconditionError(
      absl::StrCat("no complete checkpoint under ", root, ": ", absl::StrJoin(reasons, "; ")));
}

}  // namespace rlmesh::trainer
