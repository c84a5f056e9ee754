#include "common/config/config.h"

#include <fstream>
#include <string>
#include <vector>

#include "common/config/service_settings.h"
#include "common/config/value_parse.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace rlmesh::config {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ErrorOf(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<Config> config = LoadConfigFromString(yaml, overrides, "test.yaml");
  EXPECT_FALSE(config.ok());
  if (config.ok()) return "";
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

Config Load(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<Config> config = LoadConfigFromString(yaml, overrides, "test.yaml");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : Config();
}

// verl's defaults, from verl/trainer/config/_generated_ppo_trainer.yaml (reference digest).
TEST(ConfigTest, DefaultsAreVerls) {
  const Config c = DefaultConfig();
  EXPECT_EQ(c.data.train_batch_size, 1024);
  EXPECT_EQ(c.data.max_prompt_length, 512);
  EXPECT_EQ(c.data.max_response_length, 512);
  EXPECT_EQ(c.data.prompt_key, "prompt");
  EXPECT_EQ(c.data.reward_fn_key, "data_source");
  EXPECT_TRUE(c.data.shuffle);
  EXPECT_FALSE(c.data.val_batch_size.has_value());
  EXPECT_EQ(c.actor_rollout_ref.actor.ppo_mini_batch_size, 256);
  EXPECT_FALSE(c.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu.has_value());
  EXPECT_EQ(c.actor_rollout_ref.actor.ppo_epochs, 1);
  // verl's literal 0.2 is null here, so that clip_ratio alone sets both bounds (verl's
  // fallback); the bounds in effect are the same 0.2.
  EXPECT_DOUBLE_EQ(c.actor_rollout_ref.actor.clip_ratio, 0.2);
  EXPECT_FALSE(c.actor_rollout_ref.actor.clip_ratio_low.has_value());
  EXPECT_FALSE(c.actor_rollout_ref.actor.clip_ratio_high.has_value());
  EXPECT_DOUBLE_EQ(c.actor_rollout_ref.actor.clip_ratio_c, 3.0);
  EXPECT_EQ(c.actor_rollout_ref.actor.loss_agg_mode, "token-mean");
  EXPECT_FALSE(c.actor_rollout_ref.actor.use_kl_loss);
  EXPECT_DOUBLE_EQ(c.actor_rollout_ref.actor.kl_loss_coef, 0.001);
  EXPECT_EQ(c.actor_rollout_ref.actor.kl_loss_type, "low_var_kl");
  EXPECT_DOUBLE_EQ(c.actor_rollout_ref.actor.grad_clip, 1.0);
  EXPECT_DOUBLE_EQ(c.actor_rollout_ref.actor.optim.lr, 1e-6);
  EXPECT_DOUBLE_EQ(c.actor_rollout_ref.actor.optim.weight_decay, 0.01);
  EXPECT_THAT(c.actor_rollout_ref.actor.optim.betas, ElementsAre(0.9, 0.999));
  EXPECT_EQ(c.actor_rollout_ref.rollout.n, 1);
  EXPECT_EQ(c.actor_rollout_ref.rollout.top_k, -1);
  EXPECT_EQ(c.actor_rollout_ref.rollout.max_num_seqs, 256);
  EXPECT_DOUBLE_EQ(c.actor_rollout_ref.rollout.val_kwargs.temperature, 0.0);
  EXPECT_FALSE(c.actor_rollout_ref.rollout.val_kwargs.do_sample);
  EXPECT_TRUE(c.algorithm.norm_adv_by_std_in_grpo);
  EXPECT_DOUBLE_EQ(c.algorithm.kl_ctrl.kl_coef, 0.001);
  EXPECT_EQ(c.trainer.total_epochs, 30);
  EXPECT_EQ(c.trainer.save_freq, -1);
  EXPECT_EQ(c.trainer.n_gpus_per_node, 1);  // verl: 8; one trainer rank until issue #13
  EXPECT_EQ(c.trainer.resume_mode, "auto");
  EXPECT_EQ(c.reward_model.reward_manager, "naive");
  EXPECT_EQ(c.custom_reward_function.name, "compute_score");
  EXPECT_FALSE(c.custom_reward_function.path.has_value());
  // ${...} defaults are resolved.
  EXPECT_EQ(c.trainer.default_local_dir, "checkpoints/verl_examples/gsm8k");
  EXPECT_EQ(c.rlmesh.run_dir, "runs/gsm8k");
  EXPECT_DOUBLE_EQ(c.rlmesh.reward.timeout_s, 30.0);
  EXPECT_EQ(c.rlmesh.max_staleness, 0);
}

TEST(ConfigTest, CpuListsAsTasksetWritesThem) {
  EXPECT_EQ(ParseCpuList("").value(), std::vector<int>{});
  EXPECT_EQ(ParseCpuList("3").value(), std::vector<int>{3});
  EXPECT_EQ(ParseCpuList("0-3,8").value(), (std::vector<int>{0, 1, 2, 3, 8}));
  EXPECT_EQ(ParseCpuList(" 8, 2-3 ,2").value(), (std::vector<int>{2, 3, 8}));
  for (const char* bad : {"a", "3-1", "-2", "1,,2", "0-", "1-70000", "2.5"}) {
    const auto parsed = ParseCpuList(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(parsed.status().message(), HasSubstr("expected a CPU list such as \"0-3,8\""));
  }
  // As a key: the error names it, and the services' settings carry the CPUs.
  EXPECT_THAT(ErrorOf("", {"rlmesh.rollout.cpus=1-2x"}),
              HasSubstr("rlmesh.rollout.cpus: expected a CPU list such as \"0-3,8\", got "
                        "\"1-2x\""));
  auto settings = DeriveSettings(Load("", {"rlmesh.trainer.cpus=0,2"}));
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->trainer_listen.cpus, (std::vector<int>{0, 2}));
  EXPECT_TRUE(settings->rollout_listen.cpus.empty());
}

// seq-mean-token-sum-norm divides by verl's padded response length, data.max_response_length,
// unless actor.loss_scale_factor says otherwise.
TEST(ConfigTest, TheDrGrpoDivisorIsTheMaxResponseLengthByDefault) {
  auto settings = DeriveSettings(Load("", {"data.max_response_length=96"}));
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->trainer.actor.loss_scale_factor, 96);
  settings =
      DeriveSettings(Load("", {"actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm",
                               "actor_rollout_ref.actor.loss_scale_factor=4096"}));
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_EQ(settings->trainer.actor.loss_scale_factor, 4096);
}

TEST(ConfigTest, EmptyFileGivesDefaults) {
  const Config c = Load("");
  EXPECT_EQ(c.data.train_batch_size, 1024);
  EXPECT_EQ(c.rlmesh.host, "127.0.0.1");
}

TEST(ConfigTest, ReadsNestedAndDottedKeys) {
  const Config c = Load(R"(
data:
  train_batch_size: 32
  train_files: [a.parquet, b.parquet]
actor_rollout_ref:
  actor:
    optim:
      lr: 3e-4
      betas: [0.8, 0.95]
    ppo_micro_batch_size_per_gpu: 16
  rollout.n: 8
trainer.logger: console
rlmesh:
  tls:
    enabled: True
)");
  EXPECT_EQ(c.data.train_batch_size, 32);
  EXPECT_THAT(c.data.train_files, ElementsAre("a.parquet", "b.parquet"));
  EXPECT_DOUBLE_EQ(c.actor_rollout_ref.actor.optim.lr, 3e-4);
  EXPECT_THAT(c.actor_rollout_ref.actor.optim.betas, ElementsAre(0.8, 0.95));
  EXPECT_EQ(c.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu, 16);
  EXPECT_EQ(c.actor_rollout_ref.rollout.n, 8);
  EXPECT_THAT(c.trainer.logger, ElementsAre("console"));
  EXPECT_TRUE(c.rlmesh.tls.enabled);
  // Keys not mentioned keep their defaults.
  EXPECT_EQ(c.actor_rollout_ref.actor.ppo_mini_batch_size, 256);
}

TEST(ConfigTest, OverridesAsVerlUsersTypeThem) {
  const Config c =
      Load("actor_rollout_ref:\n  rollout:\n    n: 4\n",
           {"actor_rollout_ref.rollout.n=8", "actor_rollout_ref.actor.optim.betas=[0.9,0.95]",
            "actor_rollout_ref.actor.use_kl_loss=true", "algorithm.norm_adv_by_std_in_grpo=False",
            "trainer.experiment_name=run 7", "data.train_files=~/data/gsm8k/train.parquet",
            "trainer.logger=['console','jsonl']",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            "trainer.total_training_steps=null", "rlmesh.tls.ca_file=", "+rlmesh.seed=7"});
  EXPECT_EQ(c.actor_rollout_ref.rollout.n, 8);  // the override wins over the file
  EXPECT_THAT(c.actor_rollout_ref.actor.optim.betas, ElementsAre(0.9, 0.95));
  EXPECT_TRUE(c.actor_rollout_ref.actor.use_kl_loss);
  EXPECT_FALSE(c.algorithm.norm_adv_by_std_in_grpo);
  EXPECT_EQ(c.trainer.experiment_name, "run 7");
  EXPECT_THAT(c.data.train_files, ElementsAre("~/data/gsm8k/train.parquet"));
  EXPECT_THAT(c.trainer.logger, ElementsAre("console", "jsonl"));
  EXPECT_EQ(c.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu, 4);
  EXPECT_FALSE(c.trainer.total_training_steps.has_value());
  EXPECT_EQ(c.rlmesh.tls.ca_file, "");
  EXPECT_EQ(c.rlmesh.seed, 7);
  // References follow the overridden name.
  EXPECT_EQ(c.rlmesh.run_dir, "runs/run 7");
  EXPECT_EQ(c.trainer.default_local_dir, "checkpoints/verl_examples/run 7");
}

TEST(ConfigTest, LaterOverrideWins) {
  const Config c = Load("", {"data.train_batch_size=8", "data.train_batch_size=16"});
  EXPECT_EQ(c.data.train_batch_size, 16);
}

TEST(ConfigTest, OutOfRangeNamesKeyAndValue) {
  EXPECT_EQ(ErrorOf("", {"actor_rollout_ref.rollout.n=0"}),
            "command line \"actor_rollout_ref.rollout.n=0\": config key "
            "actor_rollout_ref.rollout.n: expected an integer >= 1, got \"0\"");
  EXPECT_THAT(ErrorOf("", {"actor_rollout_ref.rollout.top_p=1.5"}),
              HasSubstr("config key actor_rollout_ref.rollout.top_p: expected a number in "
                        "(0, 1], got \"1.5\""));
  EXPECT_THAT(ErrorOf("", {"actor_rollout_ref.actor.clip_ratio_c=1"}),
              HasSubstr("expected a number > 1, got \"1\""));
  EXPECT_THAT(ErrorOf("", {"actor_rollout_ref.rollout.top_k=0"}),
              HasSubstr("expected -1 (no limit) or an integer >= 1, got \"0\""));
  EXPECT_THAT(ErrorOf("", {"rlmesh.rollout.port=70000"}),
              HasSubstr("expected an integer in [0, 65535], got \"70000\""));
  // Named at start-up, not by the synthetic task's generator deep in the coordinator.
  EXPECT_THAT(ErrorOf("", {"rlmesh.quickstart.max_digits=24"}),
              HasSubstr("config key rlmesh.quickstart.max_digits: expected an integer in [1, "
                        "18], got \"24\""));
}

TEST(ConfigTest, WrongTypesNameKeyAndValue) {
  EXPECT_THAT(ErrorOf("", {"data.train_batch_size=eight"}),
              HasSubstr("config key data.train_batch_size: expected an integer >= 1, got "
                        "\"eight\""));
  EXPECT_THAT(ErrorOf("", {"data.train_batch_size=8.5"}),
              HasSubstr("expected an integer >= 1, got \"8.5\""));
  EXPECT_THAT(ErrorOf("", {"data.shuffle=yes"}),
              HasSubstr("config key data.shuffle: expected true or false, got \"yes\""));
  EXPECT_THAT(ErrorOf("", {"actor_rollout_ref.actor.optim.lr=fast"}),
              HasSubstr("expected a number >= 0, got \"fast\""));
  EXPECT_THAT(ErrorOf("", {"actor_rollout_ref.actor.optim.lr=nan"}), HasSubstr("got \"nan\""));
  EXPECT_THAT(ErrorOf("", {"actor_rollout_ref.actor.optim.betas=[0.9]"}),
              HasSubstr("expected a list of 2 numbers, each in [0, 1), got [0.9]"));
  EXPECT_THAT(ErrorOf("", {"actor_rollout_ref.actor.optim.betas=0.9"}), HasSubstr("got \"0.9\""));
  EXPECT_THAT(ErrorOf("", {"actor_rollout_ref.actor.loss_agg_mode=mean"}),
              HasSubstr("expected one of \"token-mean\", \"seq-mean-token-sum\", "
                        "\"seq-mean-token-mean\", \"seq-mean-token-sum-norm\", got \"mean\""));
  EXPECT_THAT(ErrorOf("", {"trainer.logger=[console,stdout]"}),
              HasSubstr("config key trainer.logger: expected a list of \"console\", \"jsonl\", "
                        "\"wandb\""));
  EXPECT_THAT(ErrorOf("", {"trainer.project_name=null"}),
              HasSubstr("config key trainer.project_name: expected a string, got null"));
  EXPECT_THAT(ErrorOf("", {"data.train_batch_size=null"}),
              HasSubstr("expected an integer >= 1, got null"));
  EXPECT_THAT(ErrorOf("data:\n  train_batch_size: {a: 1}\n"),
              HasSubstr("test.yaml:2: config key data.train_batch_size: expected an integer "
                        ">= 1, got {a: 1}"));
  EXPECT_THAT(ErrorOf("", {"data.seed="}), HasSubstr("expected an integer >= 0, got \"\""));
}

TEST(ConfigTest, UnknownKeySuggestsClosest) {
  EXPECT_EQ(ErrorOf("", {"actor_rollout_ref.actor.ppo_mini_batch_sise=8"}),
            "command line \"actor_rollout_ref.actor.ppo_mini_batch_sise=8\": unknown config key "
            "\"actor_rollout_ref.actor.ppo_mini_batch_sise\"; did you mean "
            "actor_rollout_ref.actor.ppo_mini_batch_size?");
  // Right name, wrong section: found through the last component.
  EXPECT_THAT(ErrorOf("", {"actor_rollout_ref.actor.temperature=0.7"}),
              HasSubstr("did you mean actor_rollout_ref.rollout.temperature?"));
  // Nothing close: no suggestion.
  EXPECT_THAT(ErrorOf("", {"foo.completely_different_thing=1"}), Not(HasSubstr("did you mean")));
}

// A verl key rlmesh lacks is refused with its reason, except at verl's default, which asks for
// nothing: a config carrying verl's defaults loads.
TEST(ConfigTest, VerlKeysRlmeshLacksLoadAtVerlsDefaultOnly) {
  const Config loaded = Load(
      "trainer:\n  val_only: false\n  rollout_data_dir: null\n  total_epochs: 3\n"
      "critic:\n  enable: false\n",
      {"trainer.use_legacy_worker_impl=auto", "reward_model.strategy=fsdp",
       "data.return_full_prompt=false", "actor_rollout_ref.actor.loss_scale_factor=null"});
  EXPECT_EQ(loaded.trainer.total_epochs, 3);
  EXPECT_EQ(ErrorOf("trainer:\n  val_only: true\n"),
            "test.yaml:2: config key trainer.val_only is one of verl's that rlmesh does not "
            "have: validation-only runs are not built");
  EXPECT_THAT(ErrorOf("", {"trainer.rollout_data_dir=/tmp/x"}),
              HasSubstr("trainer.rollout_data_dir is one of verl's that rlmesh does not have: "
                        "rollouts are not dumped to files"));
  EXPECT_THAT(ErrorOf("critic:\n  enable: true\n"), HasSubstr("GRPO has no critic"));
  // The rest of a section stays refused whatever its value.
  EXPECT_THAT(ErrorOf("", {"critic.optim.lr=0"}), HasSubstr("GRPO has no critic"));
}

// custom_reward_function.reward_kwargs takes any mapping, typed as YAML (and OmegaConf) type
// plain scalars, a quoted one always a string; Hydra's `+...reward_kwargs.NAME=VALUE` sets one
// entry and keeps the others.
TEST(ConfigTest, RewardKwargsAreTypedAsYamlAndSetOneByOne) {
  const std::string file =
      "custom_reward_function:\n  path: r.py\n  reward_kwargs:\n    scale: 2\n    name: '7'\n"
      "    on: True\n    ratio: 5e-1\n    none: ~\n    list: [1, a]\n    nested: {x: 1}\n";
  EXPECT_EQ(Load(file).custom_reward_function.reward_kwargs,
            R"({"list":[1,"a"],"name":"7","nested":{"x":1},"none":null,"on":true,"ratio":0.5,)"
            R"("scale":2})");
  EXPECT_EQ(DefaultConfig().custom_reward_function.reward_kwargs, "{}");
  EXPECT_EQ(
      Load("custom_reward_function:\n  reward_kwargs:\n").custom_reward_function.reward_kwargs,
      "{}");
  // One entry at a time, over the file's: the others stay.
  EXPECT_EQ(Load(file, {"+custom_reward_function.reward_kwargs.scale=3",
                        "custom_reward_function.reward_kwargs.nested.y=b",
                        "++custom_reward_function.reward_kwargs.new.deep=[x]"})
                .custom_reward_function.reward_kwargs,
            R"({"list":[1,"a"],"name":"7","nested":{"x":1,"y":"b"},"new":{"deep":["x"]},)"
            R"("none":null,"on":true,"ratio":0.5,"scale":3})");
  // The whole mapping replaces the file's.
  EXPECT_EQ(Load(file, {"custom_reward_function.reward_kwargs={a: '1'}"})
                .custom_reward_function.reward_kwargs,
            R"({"a":"1"})");
  // Dotted inside the file too, each entry once.
  EXPECT_EQ(
      Load("custom_reward_function.reward_kwargs.a: 1\ncustom_reward_function.reward_kwargs.b: "
           "x\n")
          .custom_reward_function.reward_kwargs,
      R"({"a":1,"b":"x"})");
  EXPECT_THAT(ErrorOf("custom_reward_function.reward_kwargs.a: 1\n"
                      "custom_reward_function.reward_kwargs.a: 2\n"),
              HasSubstr("test.yaml:2: config key custom_reward_function.reward_kwargs.a is set "
                        "twice (first at test.yaml:1)"));
  // Errors name the key and the entry.
  EXPECT_THAT(ErrorOf("", {"custom_reward_function.reward_kwargs=3"}),
              HasSubstr("config key custom_reward_function.reward_kwargs: expected a mapping of "
                        "names to values (YAML: numbers, strings, booleans, null, lists, "
                        "mappings), got \"3\""));
  EXPECT_THAT(ErrorOf("", {"custom_reward_function.reward_kwargs.x=.inf"}),
              HasSubstr("at x: expected a finite number, got .inf"));
  EXPECT_THAT(ErrorOf("", {"custom_reward_function.reward_kwargs.n=99999999999999999999"}),
              HasSubstr("at n: expected an integer of 64 bits, got 99999999999999999999 (quote "
                        "it for a string)"));
  EXPECT_THAT(ErrorOf(file, {"custom_reward_function.reward_kwargs.scale.deep=1"}),
              HasSubstr("config key custom_reward_function.reward_kwargs: custom_reward_function."
                        "reward_kwargs.scale is \"2\", not a mapping to set deep in"));
  // Printed and read back, the same arguments: "7" stays a string, 0.5 a number.
  const Config loaded = Load(file);
  EXPECT_EQ(Load(ConfigToYaml(loaded)).custom_reward_function.reward_kwargs,
            loaded.custom_reward_function.reward_kwargs);
}

TEST(ConfigTest, UnknownKeyInFileCarriesLine) {
  EXPECT_EQ(ErrorOf("data:\n  train_batch_size: 8\n  max_promt_length: 10\n"),
            "test.yaml:3: unknown config key \"data.max_promt_length\"; did you mean "
            "data.max_prompt_length?");
}

TEST(ConfigTest, BadValueInFileCarriesLine) {
  EXPECT_EQ(ErrorOf("trainer:\n  nnodes: 1\n\n  n_gpus_per_node: -2\n"),
            "test.yaml:4: config key trainer.n_gpus_per_node: expected an integer >= 1, got "
            "\"-2\"");
}

TEST(ConfigTest, ReportsEveryError) {
  const std::string error =
      ErrorOf("data:\n  train_batch_size: 0\n  shufle: true\n", {"actor_rollout_ref.rollout.n=0"});
  EXPECT_THAT(error, HasSubstr("test.yaml:2: config key data.train_batch_size"));
  EXPECT_THAT(error, HasSubstr("test.yaml:3: unknown config key \"data.shufle\"; did you mean "
                               "data.shuffle?"));
  EXPECT_THAT(error, HasSubstr("config key actor_rollout_ref.rollout.n: expected"));
}

TEST(ConfigTest, SectionsMustBeMappings) {
  EXPECT_THAT(ErrorOf("data: 5\n"),
              HasSubstr("test.yaml:1: config key data is a section: expected a mapping of its "
                        "keys, got \"5\""));
  EXPECT_THAT(ErrorOf("", {"actor_rollout_ref.rollout=8"}),
              HasSubstr("config key actor_rollout_ref.rollout is a section"));
  // An empty section is fine.
  EXPECT_EQ(Load("actor_rollout_ref:\n  actor:\n    megatron:\n")
                .actor_rollout_ref.actor.megatron.tensor_model_parallel_size,
            1);
}

TEST(ConfigTest, DuplicateKeyInFileIsAnError) {
  EXPECT_THAT(ErrorOf("data:\n  train_batch_size: 8\ndata.train_batch_size: 16\n"),
              HasSubstr("test.yaml:3: config key data.train_batch_size is set twice (first at "
                        "test.yaml:2)"));
}

TEST(ConfigTest, InvalidYamlCarriesLine) {
  EXPECT_THAT(ErrorOf("data:\n  train_batch_size: [1, 2\n  shuffle: true\n"),
              HasSubstr("test.yaml:"));
  EXPECT_THAT(ErrorOf("data:\n  train_batch_size: [1, 2\n  shuffle: true\n"),
              HasSubstr("invalid YAML"));
  EXPECT_THAT(ErrorOf("- a\n- b\n"),
              HasSubstr("test.yaml:1: expected a mapping of config keys at the top level"));
}

TEST(ConfigTest, MalformedOverride) {
  EXPECT_EQ(ErrorOf("", {"data.train_batch_size"}),
            "command line \"data.train_batch_size\": expected key=value");
  EXPECT_THAT(ErrorOf("", {"actor_rollout_ref.actor.optim.betas=[0.9,"}),
              HasSubstr("config key actor_rollout_ref.actor.optim.betas: value is not valid "
                        "YAML"));
}

TEST(ConfigTest, References) {
  Config c = Load("trainer:\n  project_name: p\n  experiment_name: e\n",
                  {"rlmesh.run_dir=/tmp/${trainer.project_name}-${data.train_batch_size}"});
  EXPECT_EQ(c.rlmesh.run_dir, "/tmp/p-1024");
  EXPECT_EQ(c.trainer.default_local_dir, "checkpoints/p/e");
  // A reference to a reference.
  c = Load("", {"trainer.experiment_name=x${rlmesh.host}",
                "rlmesh.run_dir=r/${trainer.experiment_name}"});
  EXPECT_EQ(c.rlmesh.run_dir, "r/x127.0.0.1");
  EXPECT_THAT(ErrorOf("", {"rlmesh.run_dir=${trainer.experiment_nam}"}),
              HasSubstr("config key rlmesh.run_dir: ${trainer.experiment_nam} names no key"));
  EXPECT_THAT(ErrorOf("", {"trainer.project_name=${trainer.experiment_name}",
                           "trainer.experiment_name=${trainer.project_name}"}),
              HasSubstr("circular reference"));
  EXPECT_THAT(ErrorOf("", {"rlmesh.run_dir=${data.train_files}"}),
              HasSubstr("must be a single value"));
  EXPECT_THAT(ErrorOf("", {"rlmesh.run_dir=a${trainer.project_name"}), HasSubstr("unterminated"));
}

TEST(ConfigTest, YamlRoundTrip) {
  const Config c = Load("data:\n  train_files: [\"123\", \"true\"]\n",
                        {"trainer.experiment_name=007", "actor_rollout_ref.actor.optim.lr=3e-4",
                         "rlmesh.host=", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                         "custom_reward_function.path=null", "rlmesh.reward.format_score=-0.5"});
  const std::string yaml = ConfigToYaml(c);
  EXPECT_THAT(yaml, HasSubstr("experiment_name: \"007\""));
  EXPECT_THAT(yaml, HasSubstr("lr: 0.0003\n"));
  EXPECT_THAT(yaml, HasSubstr("path: ~"));
  absl::StatusOr<Config> again = LoadConfigFromString(yaml, {}, "printed");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << yaml;
  EXPECT_EQ(ConfigToYaml(*again), yaml);
  EXPECT_THAT(again->data.train_files, ElementsAre("123", "true"));
  EXPECT_EQ(again->trainer.experiment_name, "007");
  EXPECT_EQ(again->rlmesh.host, "");
  EXPECT_DOUBLE_EQ(again->rlmesh.reward.format_score, -0.5);
}

TEST(ConfigTest, LoadConfigReadsFileAndNamesIt) {
  const std::string path = testing::TempDir() + "/config_test.yaml";
  {
    std::ofstream out(path);
    out << "data:\n  train_batch_size: 64\n  bad_key: 1\n";
  }
  absl::StatusOr<Config> config = LoadConfig(path, {});
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(config.status().message(), HasSubstr(path + ":3: unknown config key"));
  {
    std::ofstream out(path);
    out << "data:\n  train_batch_size: 64\n";
  }
  config = LoadConfig(path, {"data.max_prompt_length=16"});
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->data.train_batch_size, 64);
  EXPECT_EQ(config->data.max_prompt_length, 16);
  config = LoadConfig(path + ".missing", {});
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(config.status().message(), HasSubstr(path + ".missing"));
}

}  // namespace
}  // namespace rlmesh::config
