#include "services/coordinator/resume_state.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/status/nesting.h"

namespace rlmesh::coordinator {

std::string EncodeResumeState(const ResumeState& state) {
  nlohmann::json json = nlohmann::json::object();
  if (state.first_validation.has_value()) json["first_validation"] = *state.first_validation;
  if (state.kl_coef.has_value()) json["kl_coef"] = *state.kl_coef;
  if (!state.reference_checkpoint.empty())
    json["reference_checkpoint"] = state.reference_checkpoint;
  return json.dump();
}

ResumeState DecodeResumeState(const std::string& text) {
  ResumeState state;
  const nlohmann::json json = CheckNesting(text, "coordinator_state").ok()
                                  ? nlohmann::json::parse(text, nullptr, false)
                                  : nlohmann::json();
  if (!json.is_object()) return state;
  if (json.contains("first_validation") && json["first_validation"].is_number()) {
    state.first_validation = json["first_validation"].get<double>();
  }
  if (json.contains("kl_coef") && json["kl_coef"].is_number()) {
    state.kl_coef = json["kl_coef"].get<double>();
  }
  if (json.contains("reference_checkpoint") && json["reference_checkpoint"].is_string()) {
    state.reference_checkpoint = json["reference_checkpoint"].get<std::string>();
  } else if (json.contains("reference_path") && json["reference_path"].is_string()) {
    state.reference_checkpoint = std::filesystem::path(json["reference_path"].get<std::string>())
                                     .parent_path()
                                     .parent_path()
                                     .string();
  }
  return state;
}

namespace {

// `path` normalised, without a trailing separator ("a/b/" -> "a/b").
std::filesystem::path Normal(const std::string& path) {
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p;
}

}  // namespace

std::string RelativeToRoot(const std::string& path, const std::string& root) {
  namespace fs = std::filesystem;
  const fs::path p = Normal(path);
  const fs::path r = Normal(root);
  if (path.empty() || root.empty() || p.is_absolute() != r.is_absolute()) return path;
  const fs::path relative = p.lexically_relative(r);
  if (relative.empty() || relative == "." || *relative.begin() == "..") return path;
  return relative.string();
}

std::string ResolveFromCheckpoint(const std::string& stored, const std::string& checkpoint) {
  namespace fs = std::filesystem;
  if (stored.empty() || fs::path(stored).is_absolute()) return stored;
  return (Normal(checkpoint).parent_path() / stored).string();
}

bool ValidationDue(int64_t step, int64_t last_step, int64_t test_freq) {
  return test_freq > 0 && (step % test_freq == 0 || step == last_step);
}

bool CheckpointDue(int64_t step, int64_t last_step, int64_t save_freq, bool stop_requested) {
  return (save_freq > 0 && (step % save_freq == 0 || step == last_step)) || stop_requested;
}

}  // namespace rlmesh::coordinator
