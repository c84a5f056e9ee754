// `rlmesh make-dataset --task reverse_digits --out DIR [...]`: writes DIR/train.jsonl and
// DIR/val.jsonl in verl's row schema for the synthetic tasks of common/data.
// Exit status 0 = written, 1 = failed, 2 = usage error.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "cli/command.h"
#include "common/data/dataset.h"
#include "common/data/synthetic_tasks.h"

namespace rlmesh::cli {
namespace {

constexpr char kUsage[] =
    "usage: rlmesh make-dataset --task TASK --out DIR [--train N] [--val N] [--seed S]\n"
    "                           [--min-digits D] [--max-digits D]\n"
    "\n"
    "Writes DIR/train.jsonl and DIR/val.jsonl in verl's row schema (prompt as one user\n"
    "message, data_source, reward_model.ground_truth, extra_info {split, index}).\n"
    "Tasks:\n"
    "  reverse_digits  \"1234=\" -> \"4321\"        data_source rlmesh/reverse_digits\n"
    "  arithmetic      \"12+345=\" -> \"#### 357\"  data_source rlmesh/arithmetic (gsm8k scorer)\n"
    "Defaults: --train 5000 --val 200 --seed 1 --min-digits 3 --max-digits 6.\n"
    "Validation prompts never appear in the training set.\n";

int Usage(const std::string& problem) {
  std::fprintf(stderr, "rlmesh make-dataset: %s\n\n%s", problem.c_str(), kUsage);
  return 2;
}

template <typename T>
bool ParseNumber(const std::string& flag, const std::string& text, T* out, std::string* error) {
  if (!absl::SimpleAtoi(text, out)) {
    *error = flag + ": expected an integer, got \"" + text + "\"";
    return false;
  }
  return true;
}

int MakeDataset(int argc, char** argv) {
  data::SyntheticTaskOptions options;
  std::string out_dir;
  bool task_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) return Usage(flag + ": missing value");
    const std::string value = argv[++i];
    std::string error;
    bool ok = true;
    if (flag == "--task") {
      options.task = value;
      task_given = true;
    } else if (flag == "--out") {
      out_dir = value;
    } else if (flag == "--train") {
      ok = ParseNumber(flag, value, &options.train_size, &error);
    } else if (flag == "--val") {
      ok = ParseNumber(flag, value, &options.val_size, &error);
    } else if (flag == "--seed") {
      ok = ParseNumber(flag, value, &options.seed, &error);
    } else if (flag == "--min-digits") {
      ok = ParseNumber(flag, value, &options.min_digits, &error);
    } else if (flag == "--max-digits") {
      ok = ParseNumber(flag, value, &options.max_digits, &error);
    } else {
      return Usage("unknown flag " + flag);
    }
    if (!ok) return Usage(error);
  }
  if (!task_given) {
    return Usage("--task is required (one of " + absl::StrJoin(data::SyntheticTaskNames(), ", ") +
                 ")");
  }
  if (out_dir.empty()) return Usage("--out is required");

  absl::StatusOr<data::SyntheticDataset> dataset = data::MakeSyntheticDataset(options);
  if (!dataset.ok()) {
    std::fprintf(stderr, "rlmesh make-dataset: %s\n", std::string(dataset.status().message()).c_str());
    return 1;
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "rlmesh make-dataset: --out %s: cannot create the folder: %s\n",
                 out_dir.c_str(), ec.message().c_str());
    return 1;
  }
  for (const auto& [name, rows] : {std::pair{"train.jsonl", &dataset->train},
                                   std::pair{"val.jsonl", &dataset->val}}) {
    const std::string path = (std::filesystem::path(out_dir) / name).string();
    absl::Status written = data::WriteJsonlDataset(*rows, path);
    if (!written.ok()) {
      std::fprintf(stderr, "rlmesh make-dataset: %s\n", std::string(written.message()).c_str());
      return 1;
    }
    std::printf("wrote %s (%zu rows)\n", path.c_str(), rows->size());
  }
  if (dataset->val.empty() && dataset->train.empty()) return 0;
  const data::DataRow& example =
      dataset->val.empty() ? dataset->train.front() : dataset->val.front();
  std::printf("task %s, seed %llu, digits %d-%d; example: \"%s\" -> \"%s\"\n",
              options.task.c_str(), static_cast<unsigned long long>(options.seed),
              options.min_digits, options.max_digits, example.prompt[0].content.c_str(),
              example.ground_truth.c_str());
  return 0;
}

}  // namespace

RLMESH_REGISTER_COMMAND("make-dataset",
                        "write train/val JSONL for a synthetic task (reverse_digits, arithmetic)",
                        MakeDataset);

}  // namespace rlmesh::cli
