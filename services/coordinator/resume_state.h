// What the coordinator keeps in a checkpoint beside the trainer's state (the
// "coordinator_state" string of SaveCheckpoint), and when verl's frequencies make a step
// validate or save. Pure functions: no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace rlmesh::coordinator {

struct ResumeState {
  std::optional<double> first_validation;  // the run's first validation reward
  std::optional<double> kl_coef;           // the in-reward KL controller's coefficient
  // The checkpoint folder of the warm-up, whose weights the KL reference holds; empty: the
  // initial model. Written relative to the checkpoint root (trainer.default_local_dir) when
  // it lies under it, so that a run's checkpoints can be moved or copied as a whole.
  std::string reference_checkpoint;
};

// A JSON object of the fields that are set.
std::string EncodeResumeState(const ResumeState& state);
// What `text` holds of the fields; a field of the wrong type, or text that is not a JSON
// object, leaves them unset. A state written before the reference took its weights from the
// trainer names the warm-up's Hugging Face folder ("reference_path":
// <checkpoint>/actor/huggingface): its checkpoint is the folder two levels up.
ResumeState DecodeResumeState(const std::string& text);

// `path` relative to `root` when it lies under it (compared lexically), else `path` itself.
std::string RelativeToRoot(const std::string& path, const std::string& root);
// The folder a stored reference_checkpoint names, for the checkpoint at `checkpoint` (a
// global_step_N folder): a relative one is read from that checkpoint's root, its parent.
std::string ResolveFromCheckpoint(const std::string& stored, const std::string& checkpoint);

// As verl: validation every test_freq steps and at the last step, when test_freq > 0.
bool ValidationDue(int64_t step, int64_t last_step, int64_t test_freq);
// A checkpoint every save_freq steps and at the last step when save_freq > 0, and always
// when a stop was requested.
bool CheckpointDue(int64_t step, int64_t last_step, int64_t save_freq, bool stop_requested);

}  // namespace rlmesh::coordinator
