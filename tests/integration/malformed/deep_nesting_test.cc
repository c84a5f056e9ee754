// Files nested 100k brackets deep, in every place rlmesh reads JSON or YAML from a user: a
// model's config.json, a safetensors header and index, a tokenizer.json, a dataset row and the
// YAML config with its overrides. Each used to overflow the stack (SIGSEGV) in the parser or
// in the code printing the value; each must now be InvalidArgument naming the file and the
// byte where the nesting passed the bound. Ordinary nesting still parses.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/config/config.h"
#include "common/data/dataset.h"
#include "common/model/model_config.h"
#include "common/model/safetensors_reader.h"
#include "common/status/nesting.h"
#include "common/tokenizer/tokenizer.h"

namespace rlmesh {
namespace {

namespace fs = std::filesystem;

std::string Deep(const std::string& open, const std::string& close, int levels = 100000) {
  std::string s;
  for (int i = 0; i < levels; ++i) s += open;
  for (int i = 0; i < levels; ++i) s += close;
  return s;
}

fs::path Dir(const std::string& name) {
  const fs::path dir = fs::path(testing::TempDir()) / ("rlmesh_deep_nesting_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void Write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void ExpectRefusedNaming(const absl::Status& s, const std::string& source) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(source), std::string::npos) << s;
  EXPECT_NE(s.message().find("nested more than 256 levels deep at byte"), std::string::npos) << s;
}

TEST(DeepNestingTest, TheGuardCountsBracketsOutsideStrings) {
  EXPECT_TRUE(CheckNesting("{\"a\": [1, {\"b\": []}]}", "x").ok());
  EXPECT_TRUE(CheckNesting("\"" + Deep("[", "") + "\"", "x").ok());      // inside a string
  EXPECT_TRUE(CheckNesting("\"\\\"" + Deep("[", "") + "\"", "x").ok());  // after an escaped quote
  EXPECT_TRUE(CheckNesting("a: '" + Deep("{", "") + "'", "x", kMaxNesting, true).ok());
  EXPECT_TRUE(CheckNesting("# " + Deep("[", "") + "\na: 1", "x", kMaxNesting, true).ok());
  EXPECT_TRUE(CheckNesting(Deep("[", "]", 256), "x").ok());
  absl::Status s = CheckNesting(Deep("[", "]", 257), "x");
  EXPECT_EQ(s.message(), "x: nested more than 256 levels deep at byte 256");
}

TEST(DeepNestingTest, ModelConfigAndSafetensorsRefuseIt) {
  const fs::path dir = Dir("model");
  Write(dir / "config.json", "{\"architectures\": " + Deep("[", "]") + "}");
  ExpectRefusedNaming(model::ModelConfig::FromFile((dir / "config.json").string()).status(),
                      "config.json");

  // A safetensors file whose header is the deep JSON.
  const std::string header = "{\"a\": " + Deep("[", "]") + "}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  Write(dir / "model.safetensors", file + header);
  ExpectRefusedNaming(model::SafetensorsReader::Open(dir.string()).status(),
                      "model.safetensors: header");
  fs::remove(dir / "model.safetensors");
  Write(dir / "model.safetensors.index.json", "{\"weight_map\": " + Deep("{\"a\":", "}") + "}");
  ExpectRefusedNaming(model::SafetensorsReader::Open(dir.string()).status(),
                      "model.safetensors.index.json");
}

TEST(DeepNestingTest, TokenizerJsonRefusesIt) {
  const fs::path dir = Dir("tokenizer");
  Write(dir / "tokenizer.json", "{\"model\": " + Deep("[", "]") + "}");
  ExpectRefusedNaming(tokenizer::Tokenizer::FromDirectory(dir.string()).status(), "tokenizer.json");
}

TEST(DeepNestingTest, ADatasetRowRefusesItNamingTheLine) {
  const std::string rows = "\n{\"prompt\": " + Deep("[", "]") + "}\n";
  ExpectRefusedNaming(data::ParseJsonlDataset(rows, "train.jsonl", {}).status(), "train.jsonl:2");
  const std::string extra = "{\"prompt\": \"x\", \"extra_info\": " + Deep("{\"a\":", "}") + "}\n";
  ExpectRefusedNaming(data::ParseJsonlDataset(extra, "train.jsonl", {}).status(), "train.jsonl:1");
}

TEST(DeepNestingTest, TheYamlConfigAndItsOverridesRefuseIt) {
  auto file = config::LoadConfigFromString("data:\n  train_files: " + Deep("[", "]") + "\n", {},
                                           "run.yaml");
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("run.yaml: nested more than 256 levels deep"),
            std::string::npos)
      << file.status();
  auto override = config::LoadConfigFromString("", {"data.train_files=" + Deep("[", "]")});
  ASSERT_FALSE(override.ok());
  EXPECT_NE(override.status().message().find("nested more than 256 levels deep"), std::string::npos)
      << override.status();
}

}  // namespace
}  // namespace rlmesh
