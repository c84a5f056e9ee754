// Generation throughput benchmark (not a test): generated tokens/s of the GenerationEngine at
// batch 1, 8 and 64 on ~25M and ~120M-parameter Qwen3-shaped float32 models (4k vocabulary,
// random weights written to a temporary Hugging Face folder), against
//   - a plain Hugging-Face-style PyTorch loop with a KV cache (hf_generate_loop.py, Debian's
//     /usr/bin/python3 + python3-torch) on the same checkpoint and workload, same run;
//   - the batch-1 decode bound: read bandwidth / weight bytes read per decode step, with the
//     read bandwidth measured in the same run by summing int64s over a 1 GiB buffer;
//   - the compute ceiling: the workload's arithmetic (2 FLOPs per weight per token through
//     the decoder, the vocabulary projection of each sampled position, attention's two
//     products) over the machine's float32 FMA peak, measured in the same run by independent
//     AVX-512 FMA chains on every thread. Where batches are large this, not bandwidth, bounds
//     both sides; "ours GF/s" and "of peak" show how close each run came. At batch 64 a run
//     with one new token times the prefill of each side, so the decode steps can be compared
//     on their own.
// Both sides use 2 intra-op threads. Workload: greedy, prompts of 32 tokens, 64 new tokens
// (32 at batch 64), time from prefill start to the last token.
//
// OpenMP threads wait passively (OMP_WAIT_POLICY=passive, set for both sides; the program
// re-executes itself to apply it): on a machine shared with other jobs, spinning threads
// that wait for a descheduled peer at every barrier made 2-thread runs 10x slower than
// 1-thread runs. --omp-wait-policy active measures the default instead.
//
// --repeats N times each side N timed runs, alternating ours and Python, and keeps each
// side's fastest: other jobs' bursts on a shared machine then cost neither side a row. The
// load average (/proc/loadavg) is printed before and after, to be reported with the figures.
//
// --python none measures our side alone (for comparing two builds of the kernels).
//
// Usage: generate_bench [--sizes 25m,120m] [--batches 1,8,64] [--python /usr/bin/python3|none]
//                       [--omp-wait-policy passive|active] [--repeats 1]
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/generation/generation_engine.h"
#include "common/model/pretrained.h"

namespace {

using rlmesh::generation::GenerationEngine;
using rlmesh::generation::GenerationEngineOptions;
using rlmesh::generation::GenerationRequest;
using rlmesh::model::CausalLmImpl;
using rlmesh::model::ModelConfig;

constexpr int kThreads = 2;
constexpr int64_t kPromptLen = 32;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Best of `passes` of `units` of work per second, each pass running body(t) on kThreads
// threads t = 0 .. kThreads - 1 at once; body returns a value that is kept alive so the
// compiler cannot drop the work.
template <typename Body>
double BestRate(int passes, double units, const Body& body) {
  double best = 0;
  volatile double sink = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::vector<double> results(kThreads, 0);
    const double start = Now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] { results[t] = body(t); });
    }
    for (auto& th : threads) th.join();
    const double seconds = Now() - start;
    for (double r : results) sink = sink + r;
    best = std::max(best, units / seconds);
  }
  return best;
}

// Bytes/s of a read-only pass (sum of int64s, 8 accumulators per thread, kThreads threads)
// over 1 GiB, far larger than any cache. Best of 5 passes.
double MeasureReadBandwidth() {
  const size_t n = (size_t{1} << 30) / sizeof(int64_t);
  std::vector<int64_t> buf(n);
  for (size_t i = 0; i < n; ++i) buf[i] = static_cast<int64_t>(i);
  return BestRate(5, static_cast<double>(n * sizeof(int64_t)), [&](int t) {
    const size_t begin = n / kThreads * t, end = n / kThreads * (t + 1);
    int64_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t i = begin; i + 8 <= end; i += 8) {
      for (int j = 0; j < 8; ++j) a[j] += buf[i + j];
    }
    return static_cast<double>(a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7]);
  });
}

// Float32 FLOP/s of kThreads threads each running 12 independent AVX-512 FMA chains (enough
// to cover the FMA latency on current x86 cores). Best of 3. Zero without AVX-512F.
__attribute__((target("avx512f"), noinline)) double FmaChains(int64_t iterations) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-4f);
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], b, c);
  }
  __m512 sum = acc[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, acc[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  double total = 0;
  for (float v : lanes) total += v;
  return total;
}

double MeasureFmaPeak() {
  if (!__builtin_cpu_supports("avx512f")) return 0;
  const int64_t iterations = 50'000'000;
  return BestRate(3, kThreads * iterations * 12.0 * 16 * 2,
                  [&](int) { return FmaChains(iterations); });
}

// FLOPs the workload needs (the same count for both sides): each row's kPromptLen prompt
// tokens and its first new_tokens - 1 sampled tokens go through the decoder (2 FLOPs per
// weight of its projections, plus q k^T and p v over the keys up to the token's position);
// the vocabulary projection is needed at the new_tokens positions that are sampled from.
double WorkloadFlops(const ModelConfig& c, int64_t batch, int64_t new_tokens) {
  const double hd = static_cast<double>(c.head_dim), d = static_cast<double>(c.hidden_size);
  const double per_layer = d * (c.num_attention_heads + 2 * c.num_key_value_heads) * hd +
                           c.num_attention_heads * hd * d + 3.0 * d * c.intermediate_size;
  const int64_t positions = kPromptLen + new_tokens - 1;
  double attention = 0;  // per layer and row: 4 * heads * head_dim * keys, summed over queries
  for (int64_t p = 0; p < positions; ++p) {
    attention += 4.0 * c.num_attention_heads * hd * static_cast<double>(p + 1);
  }
  const double per_row = static_cast<double>(positions) * 2.0 * per_layer * c.num_hidden_layers +
                         attention * c.num_hidden_layers +
                         static_cast<double>(new_tokens) * 2.0 * d * c.vocab_size;
  return per_row * static_cast<double>(batch);
}

ModelConfig Qwen3Config(const std::string& size) {
  ModelConfig c;
  c.arch = rlmesh::model::Arch::kQwen3;
  c.architecture = "Qwen3ForCausalLM";
  c.model_type = "qwen3";
  c.vocab_size = 4096;
  c.num_attention_heads = size == "25m" ? 8 : 12;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.hidden_size = size == "25m" ? 512 : 768;
  c.intermediate_size = size == "25m" ? 1536 : 2304;
  c.num_hidden_layers = size == "25m" ? 7 : 16;
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  c.qk_norm = true;
  c.tie_word_embeddings = false;
  c.eos_token_ids = {2};
  return c;
}

// Same formula as hf_generate_loop.py.
std::vector<int64_t> Prompt(int64_t row, int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < kPromptLen; ++i) ids.push_back((i * 31 + row * 7 + 3) % vocab);
  return ids;
}

struct OursResult {
  double tokens_per_s = 0;
  std::vector<int64_t> first_row;
  double forward_share = 0;   // of the timed run's wall time, inside the model's forward
  double sampling_share = 0;  // inside the sampler
};

OursResult RunOurs(const std::shared_ptr<CausalLmImpl>& model, int64_t batch,
                   int64_t new_tokens) {
  GenerationEngineOptions options;
  options.max_num_seqs = batch;
  options.max_model_len = kPromptLen + new_tokens;
  auto engine = GenerationEngine::Create(model, options).value();
  auto requests = [&](int64_t n) {
    std::vector<GenerationRequest> out;
    for (int64_t r = 0; r < batch; ++r) {
      GenerationRequest req;
      req.request_id = std::to_string(r);
      req.prompt_ids = Prompt(r, model->config().vocab_size);
      req.params.temperature = 0.0;
      req.params.max_new_tokens = n;
      out.push_back(std::move(req));
    }
    return out;
  };
  engine->Generate(requests(4)).value();  // warm-up, as the Python side does
  const auto before = engine->Stats();
  const double start = Now();
  auto samples = engine->Generate(requests(new_tokens)).value();
  const double seconds = Now() - start;
  const auto after = engine->Stats();
  int64_t tokens = 0;
  for (const auto& s : samples) tokens += static_cast<int64_t>(s.token_ids.size());
  return {static_cast<double>(tokens) / seconds, samples[0].token_ids,
          (after.forward_seconds_total - before.forward_seconds_total) / seconds,
          (after.sampling_seconds_total - before.sampling_seconds_total) / seconds};
}

struct PythonResult {
  double tokens_per_s = 0;
  std::vector<int64_t> first_row;
  bool ok = false;
};

PythonResult RunPython(const std::string& python, const std::string& dir, int64_t batch,
                       int64_t new_tokens) {
  const std::string cmd = python + " " + RLMESH_HF_LOOP_SCRIPT + " --model " + dir +
                          " --batch " + std::to_string(batch) + " --prompt-len " +
                          std::to_string(kPromptLen) + " --new-tokens " +
                          std::to_string(new_tokens) + " --threads " + std::to_string(kThreads);
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {};
  std::string out;
  char buf[4096];
  while (size_t got = fread(buf, 1, sizeof(buf), pipe)) out.append(buf, got);
  const int rc = pclose(pipe);
  PythonResult result;
  if (rc != 0) {
    std::fprintf(stderr, "python loop failed (%d): %s\n", rc, cmd.c_str());
    return result;
  }
  auto j = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "python loop printed no JSON: %s\n", out.c_str());
    return result;
  }
  result.tokens_per_s = j["tokens_per_s"].get<double>();
  result.first_row = j["first_row"].get<std::vector<int64_t>>();
  result.ok = true;
  return result;
}

// Each side's fastest of `repeats` alternating runs of one workload.
std::pair<OursResult, PythonResult> Measure(const std::shared_ptr<CausalLmImpl>& model,
                                            const std::string& python, const std::string& dir,
                                            int64_t batch, int64_t new_tokens, int64_t repeats) {
  OursResult ours;
  PythonResult py;
  for (int64_t r = 0; r < repeats; ++r) {
    OursResult o = RunOurs(model, batch, new_tokens);
    if (o.tokens_per_s > ours.tokens_per_s) ours = std::move(o);
    if (python == "none") continue;
    PythonResult p = RunPython(python, dir, batch, new_tokens);
    if (!p.ok) return {ours, p};
    if (p.tokens_per_s > py.tokens_per_s) py = std::move(p);
  }
  return {ours, py};
}

std::string LoadAverage() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "unknown";
  char buf[128] = {0};
  const size_t got = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  std::string text(buf, got);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

int64_t CommonPrefix(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return static_cast<int64_t>(i);
}

}  // namespace

constexpr char kUsage[] =
    "usage: generate_bench [--sizes 25m,120m] [--batches 1,8,64] [--python PATH|none] "
    "[--omp-wait-policy passive|active] [--repeats N]\n";

int main(int argc, char** argv) {
  // Every flag takes a value: --help, or a flag without one, gets the usage, not a run.
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  if ((argc - 1) % 2 != 0) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  // libgomp reads OMP_WAIT_POLICY when it is loaded, before main: set it and start again.
  std::string wait_policy = "passive";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--omp-wait-policy") wait_policy = argv[i + 1];
  }
  const char* current = std::getenv("OMP_WAIT_POLICY");
  if (current == nullptr || wait_policy != current) {
    setenv("OMP_WAIT_POLICY", wait_policy.c_str(), 1);
    execv("/proc/self/exe", argv);
    std::perror("re-executing with OMP_WAIT_POLICY set");
    return 1;
  }
  std::vector<std::string> sizes = {"25m", "120m"};
  std::vector<int64_t> batches = {1, 8, 64};
  std::string python = "/usr/bin/python3";
  int64_t repeats = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--sizes") {
      sizes = absl::StrSplit(argv[i + 1], ',');
    } else if (flag == "--batches") {
      batches.clear();
      for (auto part : absl::StrSplit(argv[i + 1], ',')) {
        int64_t b = 0;
        if (!absl::SimpleAtoi(part, &b) || b < 1) {
          std::fprintf(stderr, "--batches: expected positive integers, got %s\n", argv[i + 1]);
          return 2;
        }
        batches.push_back(b);
      }
    } else if (flag == "--python") {
      python = argv[i + 1];
    } else if (flag == "--repeats") {
      if (!absl::SimpleAtoi(argv[i + 1], &repeats) || repeats < 1) {
        std::fprintf(stderr, "--repeats: expected a positive integer, got %s\n", argv[i + 1]);
        return 2;
      }
    } else if (flag == "--omp-wait-policy") {
      continue;  // applied above
    } else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  const bool with_python = python != "none";
  at::set_num_threads(kThreads);
  std::printf("load average at start: %s\n", LoadAverage().c_str());
  const double bandwidth = MeasureReadBandwidth();
  std::printf("read bandwidth (int64 sum, %d threads, 1 GiB): %.2f GB/s\n", kThreads,
              bandwidth / 1e9);
  const double peak = MeasureFmaPeak();
  std::printf("float32 FMA peak (AVX-512, %d threads): %.1f GFLOP/s\n", kThreads, peak / 1e9);
  std::printf("machine: %u hardware threads, shared with other jobs (numbers are noisy); "
              "%d torch threads, OMP_WAIT_POLICY=%s on both sides\n\n",
              std::thread::hardware_concurrency(), kThreads, wait_policy.c_str());
  if (repeats > 1) {
    std::printf("each side: fastest of %lld timed runs, alternating\n\n",
                static_cast<long long>(repeats));
  }
  std::printf("%-6s %5s %6s %12s %12s %9s %12s %9s %9s %8s %8s %8s %9s\n", "model", "batch",
              "new", "ours tok/s", "python tok/s", "ours/py", "bound tok/s", "ours/bnd",
              "ours GF/s", "of peak", "py peak", "agree", "fwd/smp%");

  char tmpl[] = "/tmp/rlmesh_generate_bench_XXXXXX";
  const char* root = mkdtemp(tmpl);
  if (root == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  int exit_code = 0;
  for (const std::string& size : sizes) {
    if (size != "25m" && size != "120m") {
      std::fprintf(stderr, "--sizes: expected 25m and/or 120m, got %s\n", size.c_str());
      return 2;
    }
    const ModelConfig config = Qwen3Config(size);
    const std::string dir = std::string(root) + "/" + size;
    {
      torch::manual_seed(1);
      auto fresh = CausalLmImpl::Create(config, {}).value();
      auto saved = rlmesh::model::SavePretrained(*fresh, dir, "");
      if (!saved.ok()) {
        std::fprintf(stderr, "saving %s: %s\n", dir.c_str(), std::string(saved.message()).c_str());
        return 1;
      }
    }
    auto loaded = rlmesh::model::LoadPretrained(dir, {});
    if (!loaded.ok()) {
      std::fprintf(stderr, "loading %s: %s\n", dir.c_str(),
                   std::string(loaded.status().message()).c_str());
      return 1;
    }
    std::shared_ptr<CausalLmImpl> model = *loaded;
    model->eval();
    // Bytes a decode step must read: every weight except the embedding table (one row).
    const int64_t params = config.NumParameters();
    const double weight_bytes =
        static_cast<double>(params - config.vocab_size * config.hidden_size) * 4.0;
    const double bound = bandwidth / weight_bytes;
    for (int64_t batch : batches) {
      const int64_t new_tokens = batch >= 64 ? 32 : 64;
      auto [ours, py] = Measure(model, python, dir, batch, new_tokens, repeats);
      if (with_python && !py.ok) exit_code = 1;
      char bound_text[32] = "-", ratio_text[32] = "-";
      if (batch == 1) {
        std::snprintf(bound_text, sizeof(bound_text), "%.1f", bound);
        std::snprintf(ratio_text, sizeof(ratio_text), "%.2f", ours.tokens_per_s / bound);
      }
      // Seconds of our run = tokens / (tokens/s); its FLOP/s follow from the workload's count.
      const double ours_flops = WorkloadFlops(config, batch, new_tokens) /
                                (static_cast<double>(batch * new_tokens) / ours.tokens_per_s);
      const double py_flops = WorkloadFlops(config, batch, new_tokens) /
                              (static_cast<double>(batch * new_tokens) / py.tokens_per_s);
      char peak_text[32] = "-", py_peak_text[32] = "-";
      if (peak > 0) {
        std::snprintf(peak_text, sizeof(peak_text), "%.2f", ours_flops / peak);
        if (py.ok) std::snprintf(py_peak_text, sizeof(py_peak_text), "%.2f", py_flops / peak);
      }
      std::printf(
          "%-6s %5lld %6lld %12.1f %12.1f %9.2f %12s %9s %9.1f %8s %8s %5lld/%-3lld "
          "%4.0f/%-3.0f\n",
          size.c_str(), static_cast<long long>(batch), static_cast<long long>(new_tokens),
          ours.tokens_per_s, py.tokens_per_s, py.ok ? ours.tokens_per_s / py.tokens_per_s : 0.0,
          bound_text, ratio_text, ours_flops / 1e9, peak_text, py_peak_text,
                  static_cast<long long>(CommonPrefix(ours.first_row, py.first_row)),
                  static_cast<long long>(ours.first_row.size()), 100 * ours.forward_share,
                  100 * ours.sampling_share);
      if (batch >= 64 && (py.ok || !with_python)) {
        // The same prompts with one new token: the prefill (and the first sample) alone. The
        // rest of the full run is its decode steps.
        auto [ours_prefill, py_prefill] = Measure(model, python, dir, batch, 1, repeats);
        if (with_python && !py_prefill.ok) exit_code = 1;
        const double tokens = static_cast<double>(batch * new_tokens);
        const double ours_all = tokens / ours.tokens_per_s;
        const double ours_pre = static_cast<double>(batch) / ours_prefill.tokens_per_s;
        if (!with_python) {
          std::printf("         prefill: ours %.3f s; the %lld decode steps: ours %.3f s\n",
                      ours_pre, static_cast<long long>(new_tokens - 1), ours_all - ours_pre);
          std::fflush(stdout);
          continue;
        }
        const double py_all = tokens / py.tokens_per_s;
        const double py_pre = static_cast<double>(batch) / py_prefill.tokens_per_s;
        std::printf("         prefill: ours %.3f s, python %.3f s (%.2fx); the %lld decode steps: "
                    "ours %.3f s, python %.3f s (%.2fx)\n",
                    ours_pre, py_pre, py_pre / ours_pre, static_cast<long long>(new_tokens - 1),
                    ours_all - ours_pre, py_all - py_pre, (py_all - py_pre) / (ours_all - ours_pre));
      }
      std::fflush(stdout);
    }
    std::printf("  %s: %.1fM parameters, %.0f MB of weights read per decode step\n", size.c_str(),
                params / 1e6, weight_bytes / 1e6);
  }
  std::filesystem::remove_all(root);
  std::printf("load average at end: %s\n", LoadAverage().c_str());
  std::printf("\nagree: leading greedy tokens of row 0 identical between ours and the Python loop\n"
              "fwd/smp%%: share of our wall time inside the model forward / the sampler\n"
              "ours GF/s: the workload's FLOPs over our run's time; of peak: ours and the "
              "Python loop's FLOP/s over the FMA peak\n"
              "  (being k times faster than the Python loop needs k x its share of peak)\n"
              "prefill: from runs of the same prompts with one new token; the decode steps are "
              "the rest of the full run\n");
  return exit_code;
}
