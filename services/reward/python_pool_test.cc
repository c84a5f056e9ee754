// The Python pool of verl reward files with real Python processes (Debian's python3 and the
// generated package in <build>/python): a GSM8K-style compute_score written here scores as
// the built-in GSM8K scorer does; exceptions, hangs and deaths are that item's error; files
// that cannot be loaded stop Create with the reason.
#include "services/reward/python_pool.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/reward/reward_service.h"
#include "services/reward/scorers/scorer_registry.h"

namespace rlmesh::reward {
namespace {

using ::testing::HasSubstr;

// verl's GSM8K rule (strict: the last "#### <number>" of the last 300 characters, "," and "$"
// dropped, compared as text), written as a user would, with three ways to misbehave.
constexpr char kGsm8kFile[] = R"PY(import os
import re
import time


def extract_solution(solution_str):
    found = re.findall(r"#### (\-?[0-9\.\,]+)", solution_str[-300:])
    if not found:
        return None
    return found[-1].replace(",", "").replace("$", "")


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if solution_str == "boom":
        raise ValueError("cannot read " + repr(solution_str))
    if solution_str == "hang":
        time.sleep(3600)
    if solution_str == "die":
        os._exit(3)
    answer = extract_solution(solution_str)
    if answer is None:
        return {"score": 0.0, "acc": 0.0, "has_answer": 0.0}
    right = answer == ground_truth
    # "pred" is text: verl keeps it for maj@N; it is no metric, so it is not an extra value.
    return {"score": 1.0 if right else 0.0, "acc": float(right), "has_answer": 1.0, "pred": answer}
)PY";

std::string PackageDir() { return std::string(RLMESH_TEST_BUILD_DIR) + "/python"; }

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

PythonRewardPoolOptions Options(const std::string& file, int workers) {
  PythonRewardPoolOptions options;
  options.package_dir = PackageDir();
  options.reward_file = file;
  options.workers = workers;
  return options;
}

RewardItem Item(const std::string& id, const std::string& response, const std::string& truth) {
  RewardItem item;
  item.id = id;
  item.data_source = "openai/gsm8k";
  item.response = response;
  item.ground_truth = truth;
  item.extra_info_json = R"({"split": "train", "index": 3})";
  return item;
}

TEST(PythonRewardPoolTest, AVerlStyleFileScoresAsTheBuiltInScorer) {
  auto pool = PythonRewardPool::Create(Options(WriteFile("gsm8k_style.py", kGsm8kFile), 2));
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::string cut = "#### 5";  // 302 code points: the last 300 lose "##"
  for (int i = 0; i < 296; ++i) cut += "\xc3\xa9";
  const std::vector<RewardItem> items = {
      Item("a", "3 + 4 = 7\n#### 7", "7"),  Item("b", "#### 8", "7"),
      Item("c", "#### 1,234", "1234"),      Item("d", "#### $72", "72"),
      Item("e", "no answer at all", "5"),   Item("f", "#### -3.5", "-3.5"),
      Item("g", "#### 7 then #### 8", "8"), Item("h", cut, "5"),
      Item("i", "#### 3.50", "3.5"),        Item("j", std::string(400, 'x') + "#### 9", "9"),
  };
  auto builtin = ScorerRegistry::Create({});
  ASSERT_TRUE(builtin.ok());
  const Scorer* gsm8k = (*builtin)->Find("openai/gsm8k");
  ASSERT_NE(gsm8k, nullptr);
  auto results = (*pool)->ScoreBatch(items, absl::Now() + absl::Seconds(60));
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), items.size());
  int right = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    const auto& python = (*results)[k];
    ASSERT_TRUE(python.ok()) << items[k].id << ": " << python.status();
    auto expected = gsm8k->Score(items[k]);
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(python->score, expected->score) << items[k].id;
    EXPECT_EQ(python->extra, expected->extra) << items[k].id;
    right += python->score == 1.0;
  }
  EXPECT_EQ(right, 5);  // a, c, f, g, j: the rule is exercised both ways
  EXPECT_EQ((*pool)->replaced(), 0);
}

// The quickstart's reward file, examples/reward/reverse_digits_reward.py, scores as the
// built-in rlmesh/reverse_digits scorer.
TEST(PythonRewardPoolTest, TheQuickstartsRewardFileScoresAsTheBuiltInScorer) {
  auto pool = PythonRewardPool::Create(Options(
      std::string(RLMESH_TEST_SOURCE_DIR) + "/examples/reward/reverse_digits_reward.py", 1));
  ASSERT_TRUE(pool.ok()) << pool.status();
  std::vector<RewardItem> items;
  for (const auto& [response, truth] :
       std::vector<std::pair<std::string, std::string>>{{"4321", "4321"},
                                                        {"4312", "4321"},
                                                        {"43", "4321"},
                                                        {"432100", "4321"},
                                                        {"4321\n", "4321"},
                                                        {"", "4321"},
                                                        {"4321<|im_end|>99", "4321"},
                                                        {"12</s>34<eos>", "1234"},
                                                        {"\xc3\xa9"
                                                         "321",
                                                         "4321"},
                                                        {"7", "7"}}) {
    items.push_back(Item(std::to_string(items.size()), response, truth));
    items.back().data_source = "rlmesh/reverse_digits";
  }
  auto builtin = ScorerRegistry::Create({});
  ASSERT_TRUE(builtin.ok());
  const Scorer* reverse = (*builtin)->Find("rlmesh/reverse_digits");
  ASSERT_NE(reverse, nullptr);
  auto results = (*pool)->ScoreBatch(items, absl::Now() + absl::Seconds(60));
  ASSERT_TRUE(results.ok()) << results.status();
  for (size_t k = 0; k < items.size(); ++k) {
    ASSERT_TRUE((*results)[k].ok()) << items[k].response << ": " << (*results)[k].status();
    auto expected = reverse->Score(items[k]);
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ((*results)[k]->score, expected->score) << items[k].response;
    EXPECT_EQ((*results)[k]->extra, expected->extra) << items[k].response;
  }
}

TEST(PythonRewardPoolTest, ExceptionsHangsAndDeathsAreTheirItemsErrors) {
  const std::string file = WriteFile("misbehaving.py", kGsm8kFile);
  PythonRewardPoolOptions options = Options(file, 2);
  std::atomic<int> replaced_calls{0};
  options.on_replaced = [&replaced_calls] { ++replaced_calls; };
  auto pool = PythonRewardPool::Create(options);
  ASSERT_TRUE(pool.ok()) << pool.status();
  RewardServiceOptions service_options;
  service_options.num_workers = 1;
  auto service = RewardService::Create(service_options, *std::move(pool));
  ASSERT_TRUE(service.ok()) << service.status();
  // One process hangs until the deadline; the other scores the rest meanwhile.
  const std::vector<RewardItem> items = {Item("boom", "boom", "1"), Item("hang", "hang", "1"),
                                         Item("ok1", "#### 1", "1"), Item("ok2", "#### 2", "1")};
  std::vector<ItemOutcome> outcomes = (*service)->ScoreBatch(items, absl::Now() + absl::Seconds(8));
  ASSERT_EQ(outcomes.size(), 4u);
  EXPECT_EQ(outcomes[0].error_kind, ItemErrorKind::kException);
  // The traceback's last line, and where in the user's file it was raised.
  EXPECT_THAT(outcomes[0].status.message(),
              HasSubstr("custom_reward_function compute_score of " + file +
                        ": ValueError: cannot read 'boom' (misbehaving.py, line 15, in "
                        "compute_score)"));
  EXPECT_EQ(outcomes[1].error_kind, ItemErrorKind::kTimeout);
  EXPECT_EQ(outcomes[1].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(outcomes[1].status.message(), HasSubstr("rlmesh.reward.timeout_s"));
  ASSERT_TRUE(outcomes[2].status.ok()) << outcomes[2].status;
  EXPECT_EQ(outcomes[2].result.score, 1.0);
  ASSERT_TRUE(outcomes[3].status.ok()) << outcomes[3].status;
  EXPECT_EQ(outcomes[3].result.score, 0.0);

  // A process that dies while scoring fails its item; its replacement and the hung one's
  // score what comes next.
  outcomes = (*service)->ScoreBatch({Item("die", "die", "1")}, absl::Now() + absl::Seconds(60));
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_EQ(outcomes[0].error_kind, ItemErrorKind::kException);
  EXPECT_THAT(outcomes[0].status.message(), HasSubstr("exited with code 3"));
  std::vector<RewardItem> after;
  for (int i = 0; i < 6; ++i) after.push_back(Item("after" + std::to_string(i), "#### 4", "4"));
  outcomes = (*service)->ScoreBatch(after, absl::Now() + absl::Seconds(60));
  for (const ItemOutcome& outcome : outcomes) {
    ASSERT_TRUE(outcome.status.ok()) << outcome.status;
    EXPECT_EQ(outcome.result.score, 1.0);
  }
  // Replacements happen on the dispatching threads; wait for both (the hang's and the death's).
  for (int i = 0; i < 600 && replaced_calls < 2; ++i) absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(replaced_calls.load(), 2);
}

TEST(PythonRewardPoolTest, AFileThatCannotBeUsedStopsCreateWithTheReason) {
  auto syntax = PythonRewardPool::Create(
      Options(WriteFile("broken.py", "def compute_score(:\n    return 1\n"), 1));
  ASSERT_FALSE(syntax.ok());
  EXPECT_THAT(syntax.status().message(), HasSubstr("failed to load: SyntaxError"));

  auto imports =
      PythonRewardPool::Create(Options(WriteFile("imports.py", "import no_such_module_here\n"), 1));
  ASSERT_FALSE(imports.ok());
  EXPECT_THAT(imports.status().message(),
              HasSubstr("ModuleNotFoundError: No module named 'no_such_module_here'"));

  PythonRewardPoolOptions named = Options(WriteFile("named.py", kGsm8kFile), 1);
  named.function = "score_it";
  auto missing_function = PythonRewardPool::Create(named);
  ASSERT_FALSE(missing_function.ok());
  EXPECT_THAT(missing_function.status().message(),
              HasSubstr("custom_reward_function.name=score_it"));

  auto missing_file = PythonRewardPool::Create(Options(testing::TempDir() + "/nowhere.py", 1));
  ASSERT_FALSE(missing_file.ok());
  EXPECT_THAT(missing_file.status().message(), HasSubstr("no such file"));

  PythonRewardPoolOptions interpreter = Options(WriteFile("fine.py", kGsm8kFile), 1);
  interpreter.python = "/nonexistent/python3";
  auto no_python = PythonRewardPool::Create(interpreter);
  ASSERT_FALSE(no_python.ok());
  EXPECT_THAT(no_python.status().message(), HasSubstr("config key rlmesh.reward.python"));
}

// custom_reward_function.reward_kwargs reach every call as keyword arguments, typed as JSON
// carries them (a number, a list, a mapping); a function that cannot take them, or an argument
// rlmesh passes per item, stops Create naming the key instead of failing every item.
TEST(PythonRewardPoolTest, RewardKwargsReachEveryCall) {
  const std::string file = WriteFile("kwargs.py", R"PY(
def compute_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0,
                  weights=None, labels=None):
    right = float(solution_str == ground_truth)
    return {"score": scale * right, "weight": weights["right"] if weights else -1.0,
            "labels": float(len(labels or []))}


async def takes_anything(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return float(kwargs["bonus"])
)PY");
  const std::vector<RewardItem> items = {Item("a", "7", "7"), Item("b", "8", "7")};
  auto scores = [&](const std::string& function, const std::string& kwargs) {
    PythonRewardPoolOptions options = Options(file, 1);
    options.function = function;
    options.kwargs = kwargs;
    std::vector<double> out;
    auto pool = PythonRewardPool::Create(options);
    EXPECT_TRUE(pool.ok()) << pool.status();
    if (!pool.ok()) return out;
    auto results = (*pool)->ScoreBatch(items, absl::Now() + absl::Seconds(60));
    EXPECT_TRUE(results.ok()) << results.status();
    if (!results.ok()) return out;
    for (const auto& r : *results) {
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) continue;
      out.push_back(r->score);
      for (const auto& [name, value] : r->extra) out.push_back(value);
    }
    return out;
  };
  // score, then the extras by name: labels, weight.
  EXPECT_EQ(scores("compute_score", "{}"), (std::vector<double>{1, 0, -1, 0, 0, -1}));
  EXPECT_EQ(scores("compute_score", R"({"labels":["x","y"],"scale":2.5,"weights":{"right":4}})"),
            (std::vector<double>{2.5, 2, 4, 0, 2, 4}));
  EXPECT_EQ(scores("takes_anything", R"({"bonus":3})"), (std::vector<double>{3, 3}));

  PythonRewardPoolOptions unknown = Options(file, 1);
  unknown.kwargs = R"({"scael":2})";
  auto refused = PythonRewardPool::Create(unknown);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("custom_reward_function.reward_kwargs: compute_score(data_source, "
                        "solution_str, ground_truth, extra_info=None, scale=1.0, weights=None, "
                        "labels=None) cannot take them: got an unexpected keyword argument "
                        "'scael'"));
  PythonRewardPoolOptions per_item = Options(file, 1);
  per_item.kwargs = R"({"ground_truth":"7"})";
  refused = PythonRewardPool::Create(per_item);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("custom_reward_function.reward_kwargs.ground_truth: rlmesh passes "
                        "ground_truth to compute_score itself, for each item"));
}

TEST(PythonRewardPoolTest, ReturnValuesFollowVerlsContract) {
  // verl's contract: a number, or a dict with "score"; an async function is awaited.
  const std::string file = WriteFile("values.py", R"PY(import asyncio


async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    await asyncio.sleep(0)
    if solution_str == "int":
        return 2
    if solution_str == "no score":
        return {"acc": 1.0}
    if solution_str == "text":
        return "high"
    if solution_str == "nan":
        return float("nan")
    return {"score": extra_info["index"] + 0.5, "split_is_train": extra_info["split"] == "train"}
)PY");
  auto pool = PythonRewardPool::Create(Options(file, 1));
  ASSERT_TRUE(pool.ok()) << pool.status();
  auto results =
      (*pool)->ScoreBatch({Item("a", "int", "1"), Item("b", "no score", "1"),
                           Item("c", "text", "1"), Item("d", "nan", "1"), Item("e", "dict", "1")},
                          absl::Now() + absl::Seconds(60));
  ASSERT_TRUE(results.ok());
  ASSERT_TRUE((*results)[0].ok()) << (*results)[0].status();
  EXPECT_EQ((*results)[0]->score, 2.0);
  EXPECT_THAT((*results)[1].status().message(), HasSubstr("a dict without \"score\""));
  EXPECT_THAT((*results)[2].status().message(), HasSubstr("returned 'high'"));
  EXPECT_THAT((*results)[3].status().message(), HasSubstr("finite"));
  ASSERT_TRUE((*results)[4].ok()) << (*results)[4].status();
  EXPECT_EQ((*results)[4]->score, 3.5);  // extra_info arrives as the row's JSON object
  EXPECT_EQ((*results)[4]->extra.at("split_is_train"), 1.0);
  EXPECT_EQ((*pool)->KindOf((*results)[1].status()), ItemErrorKind::kException);
}

}  // namespace
}  // namespace rlmesh::reward
