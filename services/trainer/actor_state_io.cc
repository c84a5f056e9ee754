#include "services/trainer/actor_state_io.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <regex>
#include <set>
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

// Writes the archive `fill` fills to `path`: into path.tmp, flushed, renamed into place, the
// folder flushed. The bytes go through a writer of ours rather than LibTorch's file writer,
// whose failure to write (a full disk) is thrown from a destructor and ends the process: ours
// records the first error, drops the rest, and the save fails naming it.
absl::Status WriteAtomically(const fs::path& path,
                             const std::function<void(torch::serialize::OutputArchive&)>& fill) {
  const fs::path tmp = path.string() + ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (file == nullptr) {
    return absl::InternalError(absl::StrCat("open ", tmp.string(), ": ", std::strerror(errno)));
  }
  int write_error = 0;
  std::string thrown;
  try {
    torch::serialize::OutputArchive archive;
    fill(archive);
    archive.save_to([&](const void* data, size_t size) -> size_t {
      if (write_error == 0 && size > 0 && std::fwrite(data, 1, size, file) != size) {
        write_error = errno != 0 ? errno : EIO;
      }
      return size;
    });
  } catch (const c10::Error& e) {
    thrown = e.what_without_backtrace();
  }
  if (std::fflush(file) != 0 && write_error == 0) write_error = errno;
  if (std::fclose(file) != 0 && write_error == 0) write_error = errno;
  if (!thrown.empty() || write_error != 0) {
    std::error_code ignored;
    fs::remove(tmp, ignored);  // a partial file is of no use, and takes the space needed
    return absl::InternalError(absl::StrCat("writing ", tmp.string(), ": ",
                                            thrown.empty() ? std::strerror(write_error) : thrown));
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
      WriteAtomically(fs::path(dir) / kActorOptimizerFile,
                      [&](torch::serialize::OutputArchive& archive) { optimizer.save(archive); }));
  return WriteRngState(dir, shuffle_generator, nonfinite_steps_total);
}

absl::Status WriteRngState(const std::string& dir, const at::Generator& shuffle_generator,
                           int64_t nonfinite_steps_total) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating folder ", dir, ": ", ec.message()));
  return WriteAtomically(
      fs::path(dir) / kActorRngFile, [&](torch::serialize::OutputArchive& archive) {
        archive.write("shuffle_generator", shuffle_generator.get_state());
        auto default_generator = at::detail::getDefaultCPUGenerator();
        {
          std::lock_guard<std::mutex> lock(default_generator.mutex());
          archive.write("default_cpu_generator", default_generator.get_state());
        }
        archive.write("nonfinite_steps_total", torch::tensor(nonfinite_steps_total, torch::kInt64));
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
  return ReadRngState(dir, shuffle_generator, nonfinite_steps_total);
}

absl::Status ReadRngState(const std::string& dir, at::Generator* shuffle_generator,
                          int64_t* nonfinite_steps_total) {
  const fs::path rng_path = fs::path(dir) / kActorRngFile;
  RETURN_IF_ERROR(RequireFile(rng_path));
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
  return WriteAtomically(
      fs::path(dir) / kActorMasterWeightsFile, [&](torch::serialize::OutputArchive& archive) {
        archive.write("count", torch::tensor(static_cast<int64_t>(masters.size()), torch::kInt64));
        for (size_t i = 0; i < masters.size(); ++i) {
          archive.write(absl::StrCat("master_", i), masters[i].detach().to(torch::kCPU));
        }
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

std::string ShardStateFile(int rank, int world_size) {
  return absl::StrCat("actor_shard_", rank, "_of_", world_size, ".pt");
}

absl::Status WriteShardState(const std::string& dir, int rank, int world_size,
                             const std::vector<int64_t>& unit_numel,
                             const std::vector<torch::Tensor>& masters,
                             const torch::optim::Optimizer& optimizer) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating folder ", dir, ": ", ec.message()));
  return WriteAtomically(
      fs::path(dir) / ShardStateFile(rank, world_size),
      [&](torch::serialize::OutputArchive& archive) {
        archive.write("rank", torch::tensor(int64_t{rank}));
        archive.write("world_size", torch::tensor(int64_t{world_size}));
        archive.write("units", torch::tensor(static_cast<int64_t>(masters.size())));
        for (size_t u = 0; u < masters.size(); ++u) {
          const std::string k = std::to_string(u);
          archive.write("numel_" + k, torch::tensor(unit_numel[u]));
          archive.write("master_" + k, masters[u].detach().to(torch::kCPU));
          auto it = optimizer.state().find(OptimizerStateKey(optimizer, masters[u]));
          const bool has_state = it != optimizer.state().end();
          archive.write(
              "step_" + k,
              torch::tensor(
                  has_state ? static_cast<const torch::optim::AdamWParamState&>(*it->second).step()
                            : int64_t{0}));
          if (has_state) {
            const auto& state = static_cast<const torch::optim::AdamWParamState&>(*it->second);
            archive.write("exp_avg_" + k, state.exp_avg().to(torch::kCPU));
            archive.write("exp_avg_sq_" + k, state.exp_avg_sq().to(torch::kCPU));
          }
        }
      });
}

absl::StatusOr<int> ShardStateWorldSize(const std::string& dir) {
  static const std::regex pattern(R"(actor_shard_(\d+)_of_(\d+)\.pt)");
  std::set<int> sizes;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern)) sizes.insert(std::stoi(m[2]));
  }
  if (sizes.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": holds actor shards of ", sizes.size(), " world sizes"));
  }
  return sizes.empty() ? 0 : *sizes.begin();
}

absl::StatusOr<std::vector<UnitState>> ReadShardStates(const std::string& dir,
                                                       const std::vector<int64_t>& unit_numel) {
  ASSIGN_OR_RETURN(const int world, ShardStateWorldSize(dir));
  if (world == 0) return absl::NotFoundError(absl::StrCat("no actor shards in ", dir));
  const size_t units = unit_numel.size();
  std::vector<std::vector<torch::Tensor>> masters(units), avg(units), avg_sq(units);
  std::vector<UnitState> out(units);
  for (int r = 0; r < world; ++r) {
    const fs::path path = fs::path(dir) / ShardStateFile(r, world);
    RETURN_IF_ERROR(RequireFile(path));
    try {
      torch::serialize::InputArchive archive;
      archive.load_from(path.string());
      torch::Tensor count;
      archive.read("units", count);
      if (count.item<int64_t>() != static_cast<int64_t>(units)) {
        return absl::InvalidArgumentError(absl::StrCat(
            path.string(), ": holds ", count.item<int64_t>(), " units, the policy has ", units));
      }
      for (size_t u = 0; u < units; ++u) {
        const std::string k = std::to_string(u);
        torch::Tensor numel, master, step;
        archive.read("numel_" + k, numel);
        if (numel.item<int64_t>() != unit_numel[u]) {
          return absl::InvalidArgumentError(
              absl::StrCat(path.string(), ": unit ", u, " has ", numel.item<int64_t>(),
                           " elements, the policy's ", unit_numel[u]));
        }
        archive.read("master_" + k, master);
        archive.read("step_" + k, step);
        masters[u].push_back(master);
        out[u].step = step.item<int64_t>();
        if (out[u].step > 0) {
          torch::Tensor a, b;
          archive.read("exp_avg_" + k, a);
          archive.read("exp_avg_sq_" + k, b);
          avg[u].push_back(a);
          avg_sq[u].push_back(b);
        }
      }
    } catch (const c10::Error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("reading ", path.string(), ": ", e.what_without_backtrace()));
    }
  }
  for (size_t u = 0; u < units; ++u) {
    auto join = [&](const std::vector<torch::Tensor>& parts) {
      return torch::cat(parts).narrow(0, 0, unit_numel[u]).to(torch::kFloat32).contiguous();
    };
    out[u].master = join(masters[u]);
    if (out[u].step > 0) {
      if (avg[u].size() != static_cast<size_t>(world)) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": the ranks' shards disagree on unit ", u, "'s optimizer steps"));
      }
      out[u].exp_avg = join(avg[u]);
      out[u].exp_avg_sq = join(avg_sq[u]);
    }
    if (out[u].master.numel() != unit_numel[u]) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, ": unit ", u, "'s shards hold too few elements"));
    }
  }
  return out;
}

}  // namespace rlmesh::trainer
