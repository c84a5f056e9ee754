#include "services/trainer/actor_state_io.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace rlmesh::trainer {
namespace {

namespace fs = std::filesystem;

absl::Status SyncPath(const fs::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("open ", path.string(), ": ", std::strerror(errno)));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("fsync ", path.string(), ": ", std::strerror(err)));
  }
  return absl::OkStatus();
}

// Writes `path` through `write(tmp)`, flushes it, renames it into place, flushes the folder.
absl::Status WriteAtomically(const fs::path& path,
                             const std::function<void(const std::string&)>& write) {
  const fs::path tmp = path.string() + ".tmp";
  try {
    write(tmp.string());
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("writing ", tmp.string(), ": ", e.what_without_backtrace()));
  }
  RETURN_IF_ERROR(SyncPath(tmp, O_RDONLY));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("renaming ", tmp.string(), " to ", path.string(), ": ", ec.message()));
  }
  return SyncPath(path.parent_path(), O_RDONLY | O_DIRECTORY);
}

absl::Status RequireFile(const fs::path& path) {
  if (!fs::is_regular_file(path)) {
    return absl::NotFoundError(absl::StrCat("actor state file ", path.string(), " not found"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteActorState(const std::string& dir, const torch::optim::Optimizer& optimizer,
                             const at::Generator& shuffle_generator,
                             int64_t nonfinite_steps_total) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating folder ", dir, ": ", ec.message()));
  RETURN_IF_ERROR(
      WriteAtomically(fs::path(dir) / kActorOptimizerFile, [&](const std::string& path) {
        torch::serialize::OutputArchive archive;
        optimizer.save(archive);
        archive.save_to(path);
      }));
  return WriteAtomically(fs::path(dir) / kActorRngFile, [&](const std::string& path) {
    torch::serialize::OutputArchive archive;
    archive.write("shuffle_generator", shuffle_generator.get_state());
    auto default_generator = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(default_generator.mutex());
      archive.write("default_cpu_generator", default_generator.get_state());
    }
    archive.write("nonfinite_steps_total", torch::tensor(nonfinite_steps_total, torch::kInt64));
    archive.save_to(path);
  });
}

absl::Status ReadActorState(const std::string& dir, torch::optim::Optimizer* optimizer,
                            at::Generator* shuffle_generator, int64_t* nonfinite_steps_total) {
  const fs::path optimizer_path = fs::path(dir) / kActorOptimizerFile;
  const fs::path rng_path = fs::path(dir) / kActorRngFile;
  RETURN_IF_ERROR(RequireFile(optimizer_path));
  RETURN_IF_ERROR(RequireFile(rng_path));
  try {
    torch::serialize::InputArchive optimizer_archive;
    optimizer_archive.load_from(optimizer_path.string());
    optimizer->load(optimizer_archive);
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("reading ", optimizer_path.string(), ": ", e.what_without_backtrace()));
  }
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(rng_path.string());
    torch::Tensor shuffle_state, default_state, skipped;
    archive.read("shuffle_generator", shuffle_state);
    archive.read("default_cpu_generator", default_state);
    archive.read("nonfinite_steps_total", skipped);
    shuffle_generator->set_state(shuffle_state);
    auto default_generator = at::detail::getDefaultCPUGenerator();
    {
      std::lock_guard<std::mutex> lock(default_generator.mutex());
      default_generator.set_state(default_state);
    }
    *nonfinite_steps_total = skipped.item<int64_t>();
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("reading ", rng_path.string(), ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::Status WriteMasterWeights(const std::string& dir, const std::vector<torch::Tensor>& masters) {
  return WriteAtomically(fs::path(dir) / kActorMasterWeightsFile, [&](const std::string& path) {
    torch::serialize::OutputArchive archive;
    archive.write("count", torch::tensor(static_cast<int64_t>(masters.size()), torch::kInt64));
    for (size_t i = 0; i < masters.size(); ++i) {
      archive.write(absl::StrCat("master_", i), masters[i].detach().to(torch::kCPU));
    }
    archive.save_to(path);
  });
}

absl::Status ReadMasterWeights(const std::string& dir, const std::vector<torch::Tensor>& masters) {
  const fs::path path = fs::path(dir) / kActorMasterWeightsFile;
  RETURN_IF_ERROR(RequireFile(path));
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path.string());
    torch::Tensor count;
    archive.read("count", count);
    if (count.item<int64_t>() != static_cast<int64_t>(masters.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(path.string(), ": holds ", count.item<int64_t>(),
                       " master tensors, the policy has ", masters.size()));
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < masters.size(); ++i) {
      torch::Tensor t;
      archive.read(absl::StrCat("master_", i), t);
      if (t.sizes() != masters[i].sizes()) {
        return absl::InvalidArgumentError(absl::StrCat(path.string(), ": master tensor ", i,
                                                       " has another shape than the policy's"));
      }
      masters[i].copy_(t);
    }
  } catch (const c10::Error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("reading ", path.string(), ": ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace rlmesh::trainer
