// Fuzz target: a .safetensors file (8-byte little-endian header length, JSON header, tensor
// bytes) through SafetensorsReader::Open, the reader of checkpoints and of the dry-run's model
// folder check. Open takes only paths, so each input is written to a scratch file first. Most
// mutations of the header change its length, which the length field then contradicts, so
// when the JSON object after the field ends elsewhere the file is tried a second time with
// the field corrected: that is what carries mutants past the length check into the header.
//
// When the reader accepts a file it has promised that every tensor lies inside the file with
// exactly shape x element-size bytes; the target checks that by arithmetic that cannot
// overflow and by touching each tensor's first and last byte, then validates the tensors
// against a small Llama config as CheckModelFolder does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/model/model_config.h"
#include "common/model/safetensors_reader.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

using rlmesh::fuzz::Fail;

const rlmesh::model::ModelConfig& SmallConfig() {
  static const rlmesh::model::ModelConfig config = [] {
    auto parsed = rlmesh::model::ModelConfig::FromJson(
        R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 4, "hidden_size": 2,
            "intermediate_size": 2, "num_hidden_layers": 1, "num_attention_heads": 1})",
        "small config.json");
    if (!parsed.ok()) Fail("the small config.json of the safetensors target does not parse");
    return *parsed;
  }();
  return config;
}

uint64_t HeaderLength(std::string_view file) {
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<uint8_t>(file[i]);
  return length;
}

// Bytes from offset 8 to the end of the JSON value that starts there (brackets matched
// outside strings), or 0 when it does not end.
uint64_t JsonLengthAfterField(std::string_view file) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 8; i < file.size(); ++i) {
    const char c = file[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth <= 0) {
      return i + 1 - 8;
    }
  }
  return 0;
}

void Check(std::string_view file) {
  static const std::string path = (rlmesh::fuzz::ScratchDir() / "model.safetensors").string();
  rlmesh::fuzz::WriteScratchFile(path, file);
  auto reader = rlmesh::model::SafetensorsReader::Open(path);
  if (!reader.ok()) return;
  ++rlmesh::fuzz::AcceptedInputs();

  if (file.size() < 8) Fail("accepted a file shorter than its 8-byte header length");
  const uint64_t header_len = HeaderLength(file);
  if (header_len > file.size() - 8) Fail("accepted a header longer than the file");
  const unsigned __int128 data_size = file.size() - 8 - header_len;
  unsigned __int128 covered = 0;
  volatile uint8_t sink = 0;
  for (const auto& [name, entry] : (*reader)->entries()) {
    const int64_t element = rlmesh::model::SafetensorsElementSize(entry.dtype);
    if (element == 0) Fail("accepted a tensor of an unsupported dtype");
    // 128-bit products of int64 dimensions, saturated above the data size, cannot wrap; a
    // zero dimension anywhere makes the tensor empty.
    unsigned __int128 bytes = static_cast<unsigned __int128>(element);
    bool empty = false;
    for (int64_t d : entry.shape) {
      if (d < 0) Fail("accepted a negative dimension");
      empty = empty || d == 0;
      bytes = bytes > data_size ? data_size + 1 : bytes * static_cast<uint64_t>(d);
    }
    if (empty) bytes = 0;
    if (entry.nbytes < 0 || bytes != static_cast<unsigned __int128>(entry.nbytes)) {
      Fail("accepted a tensor whose shape x element size is not its byte count");
    }
    covered += static_cast<uint64_t>(entry.nbytes);
    if (entry.nbytes > 0) sink = sink ^ entry.data[0] ^ entry.data[entry.nbytes - 1];
  }
  if (covered > data_size) Fail("accepted tensors that need more bytes than the file holds");
  (void)(*reader)->ValidateAgainst(SmallConfig());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file = rlmesh::fuzz::AsText(data, size);
  Check(file);
  if (size < 8) return 0;
  const uint64_t json_length = JsonLengthAfterField(file);
  if (json_length == 0 || json_length == HeaderLength(file)) return 0;
  std::string fixed(file);
  for (int i = 0; i < 8; ++i) fixed[i] = static_cast<char>((json_length >> (8 * i)) & 0xff);
  Check(fixed);
  return 0;
}
