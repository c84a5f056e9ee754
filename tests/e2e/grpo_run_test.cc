// End to end: `rlmesh run` starts the five real service binaries over real gRPC on loopback
// and trains the quickstart's tiny model with GRPO for a short run. Fixed seeds throughout.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/metrics/http_get.h"
#include "common/metrics/promtool.h"
#include "tests/e2e/run_helpers.h"

namespace rlmesh::e2e {
namespace {

// A short version of the quickstart: same task, model and recipe, fewer steps.
std::vector<std::string> ShortRun(const std::string& dir, const std::string& model, int steps) {
  return {"run",
          SourceDir() + "/deploy/configs/quickstart.yaml",
          "actor_rollout_ref.model.path=" + model,
          "rlmesh.run_dir=" + dir + "/run",
          "trainer.default_local_dir=" + dir + "/checkpoints",
          absl::StrCat("trainer.total_training_steps=", steps)};
}

double MeanOf(const std::map<int64_t, nlohmann::json>& records, int64_t first, int64_t last,
              const std::string& key) {
  double sum = 0;
  int count = 0;
  for (int64_t s = first; s <= last; ++s) {
    auto it = records.find(s);
    if (it == records.end() || !it->second.contains(key)) continue;
    sum += it->second[key].get<double>();
    ++count;
  }
  EXPECT_GT(count, 0) << key << " missing for steps " << first << ".." << last;
  return count > 0 ? sum / count : 0;
}

TEST(GrpoRunTest, RewardRisesOverAShortRun) {
  const std::string dir = MakeTempDir("grpo_run");
  const std::string model = MakeTinyModel(dir);
  const int steps = 40;
  auto args = ShortRun(dir, model, steps);
  args.push_back("trainer.test_freq=-1");
  args.push_back("trainer.save_freq=-1");
  args.push_back("trainer.logger=[console,jsonl,tensorboard]");
  args.push_back("rlmesh.tensorboard_dir=" + dir + "/tensorboard");
  const int status = RunRlmesh(args, dir + "/run.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << process::Subprocess::DescribeWaitStatus(status) << "; see " << dir << "/run.log";
  auto records = ReadMetrics(dir + "/run/metrics.jsonl");
  ASSERT_EQ(records.count(steps), 1u) << "the run did not reach its last step";
  const double first = MeanOf(records, 1, 5, "critic/score/mean");
  const double last = MeanOf(records, steps - 4, steps, "critic/score/mean");
  EXPECT_GT(last, first + 0.05) << "mean reward of the first 5 steps " << first
                                << ", of the last 5 " << last;
  // verl's metric names are in every step's record.
  for (const char* key :
       {"actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl",
        "actor/grad_norm", "actor/lr", "critic/score/mean", "response_length/mean", "timing_s/gen",
        "timing_s/update_actor", "timing_s/update_weights", "perf/throughput"}) {
    EXPECT_TRUE(records[steps].contains(key)) << key;
  }
  // The TensorBoard event files, read back by an independent reader (CRCs checked, the
  // protocol buffers decoded by hand), hold every scalar of metrics.jsonl at its step.
  const std::string command = "/usr/bin/python3 " + SourceDir() +
                              "/tests/tools/read_tensorboard_events.py " + dir + "/tensorboard > " +
                              dir + "/tensorboard.json 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << "see " << dir << "/tensorboard.json";
  std::ifstream in(dir + "/tensorboard.json");
  const auto events = nlohmann::json::parse(in);
  EXPECT_EQ(events["file_version"], "brain.Event:2");
  int compared = 0;
  for (const auto& [step, record] : records) {
    const auto& scalars = events["scalars"][std::to_string(step)];
    for (const auto& [name, value] : record.items()) {
      if (name == "step") continue;
      ASSERT_TRUE(scalars.contains(name)) << name << " at step " << step;
      if (value.is_null()) {
        EXPECT_TRUE(scalars[name].is_null()) << name;
      } else {
        const double v = value.get<double>();
        EXPECT_NEAR(scalars[name].get<double>(), v, 1e-6 * std::max(1.0, std::abs(v))) << name;
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, steps * 50) << "every step's metrics";
}

// DAPO on the quickstart's task, the whole run: clip-higher, dynamic sampling on acc, and the
// overlong buffer on the last token of the response budget. It learns as far as GRPO does,
// and its metrics show the groups it dropped and the rounds it generated.
TEST(GrpoRunTest, DapoLearnsWithDynamicSamplingAndTheOverlongBuffer) {
  const std::string dir = MakeTempDir("dapo_run");
  const std::string model = MakeTinyModel(dir);
  const int steps = 200;
  auto args = ShortRun(dir, model, steps);
  for (const char* dapo :
       {"algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.clip_ratio_high=0.28",
        "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
        "reward_model.reward_manager=dapo",
        "reward_model.reward_kwargs.overlong_buffer_cfg.enable=true",
        "reward_model.reward_kwargs.overlong_buffer_cfg.len=1",
        "reward_model.reward_kwargs.overlong_buffer_cfg.log=true", "trainer.save_freq=-1"}) {
    args.push_back(dapo);
  }
  const int status = RunRlmesh(args, dir + "/run.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << process::Subprocess::DescribeWaitStatus(status) << "; see " << dir << "/run.log";
  auto records = ReadMetrics(dir + "/run/metrics.jsonl");
  ASSERT_EQ(records.count(steps), 1u) << "the run did not reach its last step";
  const std::string val = "val-core/rlmesh/reverse_digits/reward/mean@1";
  ASSERT_TRUE(records[steps].contains(val));
  EXPECT_GE(records[steps][val].get<double>(), 0.7);
  double dropped = 0, most_rounds = 0;
  for (const auto& [step, record] : records) {
    if (!record.contains("train/num_gen_batches")) continue;
    most_rounds = std::max(most_rounds, record["train/num_gen_batches"].get<double>());
    dropped += record["rlmesh/filter_groups/dropped_groups"].get<double>();
    EXPECT_TRUE(record.contains("reward/overlong/mean")) << "step " << step;
  }
  EXPECT_GT(dropped, 0);
  EXPECT_GE(most_rounds, 2);
}

// The quickstart's reward file (examples/reward/reverse_digits_reward.py, imported from its
// folder) behind a verl reward file that raises on every 7th training row and hangs on the
// first validation row.
std::string MisbehavingRewardFile() {
  return absl::StrCat("import sys\nimport time\n\nsys.path.insert(0, \"", SourceDir(),
                      "/examples/reward\")\n",
                      R"PY(from reverse_digits_reward import compute_score as reverse_digits


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if extra_info["split"] == "val" and extra_info["index"] == 0:
        time.sleep(3600)
    if extra_info["split"] == "train" and extra_info["index"] % 7 == 0:
        raise ValueError("row %d is refused" % extra_info["index"])
    return reverse_digits(data_source, solution_str, ground_truth, extra_info)
)PY");
}

// A verl reward file (custom_reward_function.path) scores a short run in the reward
// service's Python workers. At the validation before training (greedy, the same initial
// model) it gives every sample the built-in scorer's score, but the hung one's: that one is
// cut at rlmesh.reward.timeout_s, retried, and scored rlmesh.reward.failed_item_score; the
// rows it raises on are scored so too, and the run goes on. Its extra values reach the
// validation metrics (val-aux/).
TEST(GrpoRunTest, AVerlRewardFileScoresARunThroughItsErrorsAndTimeouts) {
  const std::string dir = MakeTempDir("reward_file");
  const std::string model = MakeTinyModel(dir);
  const std::string file = dir + "/misbehaving_reward.py";
  std::ofstream(file) << MisbehavingRewardFile();
  const int steps = 2;
  std::map<int64_t, nlohmann::json> records[2];
  std::vector<nlohmann::json> generations[2];
  for (int r = 0; r < 2; ++r) {
    const std::string sub = absl::StrCat(dir, r == 0 ? "/builtin" : "/python");
    auto args = ShortRun(sub, model, steps);
    for (const char* common :
         {"trainer.test_freq=2", "trainer.save_freq=-1", "trainer.log_val_generations=200",
          "rlmesh.reward.failed_item_score=0"}) {
      args.push_back(common);
    }
    if (r == 1) {
      args.push_back("custom_reward_function.path=" + file);
      args.push_back("rlmesh.reward.python_workers=2");
      args.push_back("rlmesh.reward.timeout_s=5");
    }
    const int status = RunRlmesh(args, sub + ".log");
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << process::Subprocess::DescribeWaitStatus(status) << "; see " << sub << ".log";
    records[r] = ReadMetrics(sub + "/run/metrics.jsonl");
    ASSERT_EQ(records[r].count(steps), 1u) << "the run did not reach its last step";
    std::ifstream in(sub + "/run/val_generations.jsonl");
    for (std::string line; std::getline(in, line);) {
      generations[r].push_back(nlohmann::json::parse(line));
    }
    // Before the warm-up, after it (both step 0, the same in both runs), and at the end.
    ASSERT_EQ(generations[r].size(), 3u) << "validations at steps 0, 0 and " << steps;
  }
  for (int v = 0; v < 2; ++v) {
    const auto& builtin = generations[0][v]["samples"];
    const auto& python = generations[1][v]["samples"];
    ASSERT_EQ(generations[1][v]["step"], 0);
    ASSERT_EQ(builtin.size(), 200u);
    ASSERT_EQ(python.size(), builtin.size());
    int equal = 0, failed = 0;
    for (size_t k = 0; k < builtin.size(); ++k) {
      ASSERT_EQ(python[k]["output"], builtin[k]["output"]) << k;
      if (python[k]["score"] == builtin[k]["score"]) {
        ++equal;
      } else {
        EXPECT_EQ(python[k]["score"].get<double>(), 0.0) << k;
        ++failed;
      }
    }
    EXPECT_GE(equal, 199) << "validation " << v;
    EXPECT_LE(failed, 1) << "validation " << v;
  }
  // The hung sample: one timeout at each validation, after the coordinator's retries.
  const auto& python_records = records[1];
  EXPECT_EQ(python_records.at(0)["val/reward_failed/timeout"].get<double>(), 1.0);
  EXPECT_EQ(python_records.at(steps)["val/reward_failed/timeout"].get<double>(), 1.0);
  EXPECT_EQ(records[0].at(0)["val/reward_failed/timeout"].get<double>(), 0.0);
  // verl's reward_extra_info: the file's extra keys, as the built-in scorer's.
  for (const char* key : {"val-aux/rlmesh/reverse_digits/acc/mean@1",
                          "val-aux/rlmesh/reverse_digits/length_match/mean@1"}) {
    EXPECT_TRUE(python_records.at(0).contains(key)) << key;
    EXPECT_TRUE(records[0].at(0).contains(key)) << key;
  }
  // Every 7th training row raised: those samples were scored 0, counted, and trained on.
  double exceptions = 0;
  for (int64_t s = 1; s <= steps; ++s) {
    exceptions += python_records.at(s)["rlmesh/reward_failed/exception"].get<double>();
    EXPECT_EQ(python_records.at(s)["rollout/samples"].get<double>(), 256) << "step " << s;
  }
  EXPECT_GT(exceptions, 0);
  EXPECT_EQ(static_cast<int64_t>(exceptions) % 8, 0) << "a refused row fails all its 8 samples";
  std::ifstream log(dir + "/python.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("ValueError: row "), std::string::npos);
  EXPECT_NE(text.find("(misbehaving_reward.py, line 12, in compute_score)"), std::string::npos);
  // The reward service killed the hung process and started another.
  std::ifstream reward_log(dir + "/python/run/logs/reward.log");
  const std::string reward_text((std::istreambuf_iterator<char>(reward_log)),
                                std::istreambuf_iterator<char>());
  EXPECT_NE(reward_text.find("replacing Python worker"), std::string::npos);
}

// reward_model.enable: a tiny reward model written by make-tiny-model (a
// LlamaForSequenceClassification with the policy's tokenizer) scores the training samples in
// the reward service, its score replacing the rule score as in verl; validation keeps the
// rule scorer.
TEST(GrpoRunTest, ARewardModelScoresTrainingAndTheRulesValidate) {
  const std::string dir = MakeTempDir("reward_model");
  const std::string model = MakeTinyModel(dir);
  const std::string rm =
      MakeTinyModel(dir, "rm",
                    {"--hidden", "32", "--heads", "2", "--kv-heads", "2", "--intermediate", "64",
                     "--num-labels", "1", "--seed", "5"});
  const int steps = 2;
  auto args = ShortRun(dir, model, steps);
  for (const std::string& extra :
       {std::string("reward_model.enable=true"), "reward_model.model.path=" + rm,
        std::string("reward_model.micro_batch_size_per_gpu=64"), std::string("trainer.test_freq=2"),
        std::string("trainer.save_freq=-1")}) {
    args.push_back(extra);
  }
  const int status = RunRlmesh(args, dir + "/run.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << process::Subprocess::DescribeWaitStatus(status) << "; see " << dir << "/run.log";
  auto records = ReadMetrics(dir + "/run/metrics.jsonl");
  ASSERT_EQ(records.count(steps), 1u) << "the run did not reach its last step";
  for (int64_t s = 1; s <= steps; ++s) {
    // The untrained reward model's scores: small and varied; a rule score of this task is a
    // share of right digits, 1 for the warmed-up policy's best samples.
    const double low = records[s]["critic/score/min"].get<double>();
    const double high = records[s]["critic/score/max"].get<double>();
    EXPECT_LT(high, 0.5) << "step " << s;
    EXPECT_GT(low, -0.5) << "step " << s;
    EXPECT_LT(low, high) << "step " << s;
    EXPECT_EQ(records[s]["rollout/samples"].get<double>(), 256) << "step " << s;
  }
  // Validation by the rule: a share of right digits, with some right.
  const std::string val = "val-core/rlmesh/reverse_digits/reward/mean@1";
  ASSERT_TRUE(records[steps].contains(val));
  EXPECT_GT(records[steps][val].get<double>(), 0.0);
  std::ifstream log(dir + "/run/logs/reward.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("reward model " + rm + " loaded"), std::string::npos);
}

// rlmesh.max_staleness=1 through the real services: generation runs one step ahead, every
// step trains all 32 x 8 samples, each exactly one version old after the first step, and the
// run is reproducible (the schedule, not timing, decides which weights generate). With token
// importance weights (algorithm.rollout_correction.rollout_is) the gap between the replicas'
// log-probs and the trainer's is measured: float rounding at step 1, whose samples come from
// the policy being trained, one update's worth after.
TEST(GrpoRunTest, AnAsynchronousRunKeepsItsBoundAndItsBooks) {
  const std::string dir = MakeTempDir("grpo_async");
  const std::string model = MakeTinyModel(dir);
  const int steps = 4;
  std::map<int64_t, nlohmann::json> runs[2];
  for (int r = 0; r < 2; ++r) {
    const std::string sub = absl::StrCat(dir, "/run", r);
    auto args = ShortRun(sub, model, steps);
    args.push_back("trainer.test_freq=-1");
    args.push_back("trainer.save_freq=-1");
    args.push_back("rlmesh.warmup.sft_steps=10");
    args.push_back("rlmesh.max_staleness=1");
    args.push_back("algorithm.rollout_correction.rollout_is=token");
    const int status = RunRlmesh(args, sub + ".log");
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << process::Subprocess::DescribeWaitStatus(status) << "; see " << sub << ".log";
    runs[r] = ReadMetrics(sub + "/run/metrics.jsonl");
    for (int s = 1; s <= steps; ++s) {
      ASSERT_EQ(runs[r].count(s), 1u) << "step " << s;
      const auto& m = runs[r][s];
      EXPECT_EQ(m["rollout/samples"].get<double>(), 256) << "step " << s;
      EXPECT_EQ(m["rlmesh/samples_dropped_stale"].get<double>(), 0) << "step " << s;
      EXPECT_EQ(m["rlmesh/staleness/max"].get<double>(), s == 1 ? 0 : 1) << "step " << s;
      EXPECT_EQ(m["rlmesh/staleness/min"].get<double>(), s == 1 ? 0 : 1) << "step " << s;
      ASSERT_TRUE(m.contains("rollout_corr/kl")) << "step " << s;
      ASSERT_TRUE(m.contains("rollout_corr/rollout_is_mean")) << "step " << s;
      const double kl = std::abs(m["rollout_corr/kl"].get<double>());
      if (s == 1) {
        EXPECT_LT(kl, 1e-4) << "step 1";
      } else {
        EXPECT_GT(kl, 1e-4) << "step " << s;
      }
    }
  }
  ExpectSameSteps(runs[0], runs[1], steps);
}

// Partial rollouts (rlmesh.partial_rollout) at k = 2 with recomputed KV caches: publishes no
// longer wait for the generation running ahead, so a sample may start on one version and end
// on a newer one. Whatever the timing, every step trains all 32 x 8 samples, none older than
// the bound when it started, and none spanning more versions than the bound. (On two CPU
// cores the quickstart's generation is shorter than its update, so few samples, often none,
// span versions here: the switch itself is covered by GenerationEngineTest.NewWeightsMid*
// and WeightSyncWiringTest.AVersionPublishedMidSampleTakesOverBetweenDecodeSteps.)
TEST(GrpoRunTest, PartialRolloutsKeepTheBoundAndTheBooks) {
  const std::string dir = MakeTempDir("grpo_partial");
  const std::string model = MakeTinyModel(dir);
  const int steps = 6;
  auto args = ShortRun(dir + "/run", model, steps);
  args.push_back("trainer.test_freq=-1");
  args.push_back("trainer.save_freq=-1");
  args.push_back("rlmesh.warmup.sft_steps=10");
  args.push_back("rlmesh.max_staleness=2");
  args.push_back("rlmesh.partial_rollout=true");
  args.push_back("rlmesh.rollout.inflight_update=recompute");
  const int status = RunRlmesh(args, dir + "/run.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << process::Subprocess::DescribeWaitStatus(status) << "; see " << dir << "/run.log";
  auto metrics = ReadMetrics(dir + "/run/run/metrics.jsonl");
  double spanning = 0;
  for (int s = 1; s <= steps; ++s) {
    ASSERT_EQ(metrics.count(s), 1u) << "step " << s;
    const auto& m = metrics[s];
    EXPECT_EQ(m["rollout/samples"].get<double>(), 256) << "step " << s;
    EXPECT_EQ(m["rlmesh/samples_dropped_stale"].get<double>(), 0) << "step " << s;
    EXPECT_LE(m["rlmesh/staleness/max"].get<double>(), std::min(s - 1, 2)) << "step " << s;
    EXPECT_LE(m["rlmesh/version_span/max"].get<double>(), 2) << "step " << s;
    spanning += m["rlmesh/samples_spanning_versions"].get<double>();
  }
  std::printf("samples that finished on newer weights than they started on: %.0f of %d\n", spanning,
              256 * steps);
}

TEST(GrpoRunTest, ResumeAfterSigkillReproducesTheUnbrokenRun) {
  const std::string dir = MakeTempDir("grpo_resume");
  const std::string model = MakeTinyModel(dir);
  const int steps = 5;
  auto common = [&](const std::string& name) {
    auto args = ShortRun(dir + "/" + name, model, steps);
    args.push_back("trainer.save_freq=1");
    args.push_back("trainer.test_freq=-1");
    args.push_back("trainer.resume_mode=auto");
    args.push_back("rlmesh.warmup.sft_steps=10");
    return args;
  };
  std::filesystem::create_directories(dir + "/unbroken");
  std::filesystem::create_directories(dir + "/broken");
  int status = RunRlmesh(common("unbroken"), dir + "/unbroken.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << dir << "/unbroken.log";

  // Crash after step 2 is reported, then run again.
  auto run = StartRlmesh(common("broken"), dir + "/broken1.log");
  auto line = run->WaitForLine([](const std::string& l) { return l.rfind("step 2/", 0) == 0; },
                               absl::Minutes(10));
  ASSERT_TRUE(line.ok()) << line.status();
  run->Stop(SIGKILL, absl::Seconds(1));
  status = RunRlmesh(common("broken"), dir + "/broken2.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << dir << "/broken2.log";

  auto unbroken = ReadMetrics(dir + "/unbroken/run/metrics.jsonl");
  auto resumed = ReadMetrics(dir + "/broken/run/metrics.jsonl");
  ExpectSameSteps(unbroken, resumed, steps);

  auto log_of = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  // Resumed at its last step: nothing is left to train, and it says so.
  status = RunRlmesh(common("broken"), dir + "/broken3.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << dir << "/broken3.log";
  EXPECT_NE(log_of(dir + "/broken3.log").find("nothing is left to train"), std::string::npos);
  // Another data.seed than the one the checkpoint drew its prompts with: refused.
  auto reseeded = common("broken");
  reseeded.push_back("trainer.total_training_steps=6");
  reseeded.push_back("data.seed=2");
  status = RunRlmesh(reseeded, dir + "/broken4.log");
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_NE(log_of(dir + "/broken4.log").find("data.seed = 2, but "), std::string::npos)
      << log_of(dir + "/broken4.log");
}

// Run again in the same run folder from the start (resume_mode=disable, the explicit choice):
// metrics.jsonl starts over, so the second start leaves the rows of one run (the step-0
// validations included), not those of two.
TEST(GrpoRunTest, AFreshStartInTheSameRunFolderStartsTheMetricsLogOver) {
  const std::string dir = MakeTempDir("grpo_fresh_again");
  const std::string model = MakeTinyModel(dir);
  auto args = ShortRun(dir, model, 1);
  for (const char* a : {"trainer.save_freq=-1", "trainer.test_freq=1",
                        "trainer.resume_mode=disable", "rlmesh.warmup.sft_steps=2"}) {
    args.push_back(a);
  }
  auto rows = [&] {
    std::vector<int64_t> steps;
    std::ifstream in(dir + "/run/metrics.jsonl");
    std::string line;
    while (std::getline(in, line))
      steps.push_back(nlohmann::json::parse(line)["step"].get<int64_t>());
    return steps;
  };
  std::vector<int64_t> first;
  for (int start = 1; start <= 2; ++start) {
    const int status = RunRlmesh(args, absl::StrCat(dir, "/run", start, ".log"));
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "see " << dir << "/run" << start << ".log";
    if (start == 1) first = rows();
  }
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first.front(), 0);  // the validation before training
  EXPECT_EQ(rows(), first);
}

// The newest checkpoint damaged after the run stopped (4 KB of zeros inside its weights, or its
// RNG state gone): resume_mode=auto passes over it, says why, resumes from the one before and
// reproduces the unbroken run. With no complete checkpoint left the run stops naming the
// files, and never starts fresh over them.
TEST(GrpoRunTest, ADamagedLatestCheckpointIsPassedOverNamingTheFile) {
  const std::string dir = MakeTempDir("grpo_damaged");
  const std::string model = MakeTinyModel(dir);
  const int steps = 4;
  auto args = [&](const std::string& name, int total) {
    auto a = ShortRun(dir + "/" + name, model, total);
    a.push_back("trainer.save_freq=1");
    a.push_back("trainer.test_freq=-1");
    a.push_back("trainer.resume_mode=auto");
    a.push_back("rlmesh.warmup.sft_steps=3");
    return a;
  };
  int status = RunRlmesh(args("unbroken", steps), dir + "/unbroken.log");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << dir << "/unbroken.log";
  const std::string checkpoints = dir + "/broken/checkpoints";
  for (const char* damage : {"zeroed weights", "no rng state"}) {
    SCOPED_TRACE(damage);
    std::filesystem::remove_all(dir + "/broken");
    status = RunRlmesh(args("broken", 3), dir + "/broken1.log");
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << dir << "/broken1.log";
    const std::string third = checkpoints + "/global_step_3";
    std::string reason;
    if (std::string(damage) == "zeroed weights") {
      std::fstream f(third + "/actor/huggingface/model.safetensors",
                     std::ios::binary | std::ios::in | std::ios::out);
      f.seekp(4096);
      f << std::string(4096, '\0');
      reason = "model.safetensors does not match its checksum";
    } else {
      std::filesystem::remove(third + "/actor/actor_rng.pt");
      reason = "actor_rng.pt is missing";
    }
    const std::string log_path = dir + "/broken2.log";
    status = RunRlmesh(args("broken", steps), log_path);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "see " << log_path;
    std::ifstream in(log_path);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_NE(text.str().find("passed over " + third), std::string::npos) << text.str();
    EXPECT_NE(text.str().find(reason), std::string::npos) << text.str();
    EXPECT_NE(text.str().find("resumed from " + checkpoints + "/global_step_2 at step 2"),
              std::string::npos)
        << text.str();
    auto unbroken = ReadMetrics(dir + "/unbroken/run/metrics.jsonl");
    auto resumed = ReadMetrics(dir + "/broken/run/metrics.jsonl");
    ExpectSameSteps(unbroken, resumed, steps);
  }
  // No complete checkpoint: a non-zero exit naming each folder's missing file.
  for (int s = 1; s <= steps; ++s) {
    std::filesystem::remove(absl::StrCat(checkpoints, "/global_step_", s, "/trainer_state.json"));
  }
  status = RunRlmesh(args("broken", steps + 1), dir + "/broken3.log");
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::ifstream in(dir + "/broken3.log");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("no complete checkpoint under " + checkpoints), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("global_step_1: trainer_state.json is missing"), std::string::npos)
      << text.str();
  EXPECT_EQ(text.str().find("starting fresh"), std::string::npos) << text.str();
}

// Ctrl-C during a run: the coordinator finishes the step it is in, checkpoints it and stops;
// every service exits cleanly. While the run is going, each service's /metrics passes promtool.
TEST(GrpoRunTest, InterruptLeavesACheckpointAndEveryServiceServesValidMetrics) {
  const std::string dir = MakeTempDir("grpo_interrupt");
  const std::string model = MakeTinyModel(dir);
  auto args = ShortRun(dir, model, 1000);
  args.push_back("trainer.save_freq=-1");  // only the interrupt writes a checkpoint
  args.push_back("trainer.test_freq=-1");
  args.push_back("rlmesh.warmup.sft_steps=5");
  auto run = StartRlmesh(args, dir + "/run.log");
  auto line = run->WaitForLine([](const std::string& l) { return l.rfind("step 2/", 0) == 0; },
                               absl::Minutes(10));
  ASSERT_TRUE(line.ok()) << line.status();

  std::ifstream targets_file(dir + "/run/targets.json");
  const auto targets = nlohmann::json::parse(targets_file, nullptr, false);
  ASSERT_TRUE(targets.is_array()) << dir << "/run/targets.json";
  std::set<std::string> components;
  for (const auto& group : targets) {
    const std::string component = group["labels"]["component"];
    const std::string target = group["targets"][0];
    const int port = std::stoi(target.substr(target.rfind(':') + 1));
    auto page = metrics::HttpGet("127.0.0.1", port, "/metrics");
    ASSERT_TRUE(page.ok()) << component << ": " << page.status();
    auto checked = metrics::PromtoolCheckMetrics(page->body);
    if (checked.status().code() == absl::StatusCode::kNotFound) {
      GTEST_SKIP() << "promtool not installed (run scripts/setup.sh)";
    }
    EXPECT_TRUE(checked.ok()) << component << ": " << checked.status();
    EXPECT_NE(page->body.find("rlmesh_" + component + "_"), std::string::npos) << component;
    components.insert(component);
  }
  EXPECT_EQ(components,
            (std::set<std::string>{"coordinator", "reference", "reward", "rollout", "trainer"}));

  run->Signal(SIGINT);
  auto status = run->Wait(absl::Minutes(5));
  ASSERT_TRUE(status.has_value()) << "rlmesh run did not stop after SIGINT";
  // 130: stopped by the user (128 + SIGINT), after a clean shutdown of every service.
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 130)
      << process::Subprocess::DescribeWaitStatus(*status) << "; see " << dir << "/run.log";

  // The last step in metrics.jsonl is the checkpointed one.
  auto records = ReadMetrics(dir + "/run/metrics.jsonl");
  ASSERT_FALSE(records.empty());
  const int64_t last = records.rbegin()->first;
  EXPECT_GE(last, 2);
  EXPECT_LT(last, 1000);
  std::ifstream latest(dir + "/checkpoints/latest_checkpointed_iteration.txt");
  int64_t checkpointed = -1;
  latest >> checkpointed;
  EXPECT_EQ(checkpointed, last);
  const std::string step_dir = absl::StrCat(dir, "/checkpoints/global_step_", last);
  EXPECT_TRUE(std::filesystem::exists(step_dir + "/actor/huggingface/model.safetensors"))
      << step_dir;
  EXPECT_TRUE(std::filesystem::exists(step_dir + "/actor/huggingface/config.json")) << step_dir;
  EXPECT_TRUE(std::filesystem::exists(step_dir + "/trainer_state.json")) << step_dir;
}

}  // namespace
}  // namespace rlmesh::e2e
