// Tests of the public API: every message round-trips through its wire format, every RPC of
// every service is callable through a generated stub on an in-process server, the built-in
// grpc++ health service speaks our grpc.health.v1 proto, and the .proto files follow the
// house rules (a comment on every field, enums start at *_UNSPECIFIED = 0, every rpc lists its
// status codes, the same as docs/api.md's "## Status codes" tables).
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "rlmesh/v1/common.pb.h"
#include "rlmesh/v1/coordinator.grpc.pb.h"
#include "rlmesh/v1/reference.grpc.pb.h"
#include "rlmesh/v1/reward.grpc.pb.h"
#include "rlmesh/v1/rollout.grpc.pb.h"
#include "rlmesh/v1/trainer.grpc.pb.h"

namespace rlmesh::v1 {
namespace {

namespace pb = ::google::protobuf;

// Sets every field of `msg` to a non-default value derived from `seed` (recursing into
// message fields up to `depth`), so a round trip that drops any field is detected.
void Fill(pb::Message* msg, int seed, int depth) {
  const pb::Descriptor* d = msg->GetDescriptor();
  const pb::Reflection* r = msg->GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const int v = seed * 31 + i + 1;
    if (f->is_map()) {
      for (int k = 0; k < 2; ++k) {
        pb::Message* entry = r->AddMessage(msg, f);
        Fill(entry, v + k, depth);
      }
      continue;
    }
    const int count = f->is_repeated() ? 3 : 1;
    for (int k = 0; k < count; ++k) {
      const int x = v + k;
      switch (f->cpp_type()) {
        case pb::FieldDescriptor::CPPTYPE_INT32:
          f->is_repeated() ? r->AddInt32(msg, f, -x) : r->SetInt32(msg, f, -x);
          break;
        case pb::FieldDescriptor::CPPTYPE_INT64:
          f->is_repeated() ? r->AddInt64(msg, f, -(int64_t{x} << 33))
                           : r->SetInt64(msg, f, -(int64_t{x} << 33));
          break;
        case pb::FieldDescriptor::CPPTYPE_UINT32:
          f->is_repeated() ? r->AddUInt32(msg, f, x) : r->SetUInt32(msg, f, x);
          break;
        case pb::FieldDescriptor::CPPTYPE_UINT64:
          f->is_repeated() ? r->AddUInt64(msg, f, uint64_t{1} << 63 | x)
                           : r->SetUInt64(msg, f, uint64_t{1} << 63 | x);
          break;
        case pb::FieldDescriptor::CPPTYPE_DOUBLE:
          f->is_repeated() ? r->AddDouble(msg, f, x + 0.125) : r->SetDouble(msg, f, x + 0.125);
          break;
        case pb::FieldDescriptor::CPPTYPE_FLOAT:
          f->is_repeated() ? r->AddFloat(msg, f, -x - 0.5f) : r->SetFloat(msg, f, -x - 0.5f);
          break;
        case pb::FieldDescriptor::CPPTYPE_BOOL:
          // Alternate values in repeated bools, so the middle one is false.
          f->is_repeated() ? r->AddBool(msg, f, k % 2 == 0) : r->SetBool(msg, f, true);
          break;
        case pb::FieldDescriptor::CPPTYPE_ENUM: {
          const pb::EnumDescriptor* e = f->enum_type();
          const pb::EnumValueDescriptor* ev = e->value(1 + (x % (e->value_count() - 1)));
          f->is_repeated() ? r->AddEnum(msg, f, ev) : r->SetEnum(msg, f, ev);
          break;
        }
        case pb::FieldDescriptor::CPPTYPE_STRING: {
          // Bytes fields get a NUL and a non-UTF-8 byte; strings get a non-ASCII character.
          std::string s = f->type() == pb::FieldDescriptor::TYPE_BYTES ? std::string("\0\xff", 2)
                                                                       : std::string("vé");
          s.append(std::to_string(x));
          f->is_repeated() ? r->AddString(msg, f, s) : r->SetString(msg, f, s);
          break;
        }
        case pb::FieldDescriptor::CPPTYPE_MESSAGE:
          if (depth > 0) {
            pb::Message* sub = f->is_repeated() ? r->AddMessage(msg, f) : r->MutableMessage(msg, f);
            Fill(sub, x, depth - 1);
          }
          break;
      }
    }
  }
}

// Every message type of the API files, nested ones included.
std::vector<const pb::Descriptor*> AllMessages() {
  const pb::FileDescriptor* files[] = {
      Tensor::descriptor()->file(),
      GenerateRequest::descriptor()->file(),
      ScoreRequest::descriptor()->file(),
      ComputeLogProbsRequest::descriptor()->file(),
      TrainStepRequest::descriptor()->file(),
      RegisterReplicaRequest::descriptor()->file(),
      ::grpc::health::v1::HealthCheckRequest::descriptor()->file(),
  };
  std::vector<const pb::Descriptor*> out;
  std::vector<const pb::Descriptor*> stack;
  for (const pb::FileDescriptor* f : files) {
    for (int i = 0; i < f->message_type_count(); ++i) stack.push_back(f->message_type(i));
  }
  while (!stack.empty()) {
    const pb::Descriptor* d = stack.back();
    stack.pop_back();
    if (d->options().map_entry()) continue;
    out.push_back(d);
    for (int i = 0; i < d->nested_type_count(); ++i) stack.push_back(d->nested_type(i));
  }
  return out;
}

TEST(ApiMessagesTest, EveryMessageRoundTripsWithEveryFieldSet) {
  const std::vector<const pb::Descriptor*> messages = AllMessages();
  // 55 messages when written: a smaller count means a file fell out of the list above.
  EXPECT_GE(messages.size(), 55u);
  for (const pb::Descriptor* d : messages) {
    SCOPED_TRACE(d->full_name());
    const pb::Message* prototype = pb::MessageFactory::generated_factory()->GetPrototype(d);
    ASSERT_NE(prototype, nullptr);
    std::unique_ptr<pb::Message> original(prototype->New());
    Fill(original.get(), 7, 3);
    // Every field is present after filling (so the comparison below covers all of them).
    const pb::Reflection* r = original->GetReflection();
    for (int i = 0; i < d->field_count(); ++i) {
      const pb::FieldDescriptor* f = d->field(i);
      EXPECT_TRUE(f->is_repeated() ? r->FieldSize(*original, f) > 0 : r->HasField(*original, f))
          << f->name();
    }
    std::string wire;
    ASSERT_TRUE(original->SerializeToString(&wire));
    std::unique_ptr<pb::Message> parsed(prototype->New());
    ASSERT_TRUE(parsed->ParseFromString(wire));
    std::string diff;
    pb::util::MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differencer.Compare(*original, *parsed)) << diff;
    // And a default instance differs from the filled one, unless the message has no fields.
    if (d->field_count() > 0) {
      EXPECT_FALSE(pb::util::MessageDifferencer::Equals(*original, *prototype));
    }
  }
}

TEST(ApiMessagesTest, FieldValuesSurviveTheWireExactly) {
  Sample sample;
  sample.add_token_ids(151643);
  sample.add_token_ids(0);
  sample.add_logprobs(-0.6931472f);
  sample.add_logprobs(-1e-30f);
  sample.set_finish_reason(FINISH_REASON_LENGTH);
  sample.set_weight_version(18446744073709551615ull);
  Sample parsed;
  ASSERT_TRUE(parsed.ParseFromString(sample.SerializeAsString()));
  EXPECT_EQ(parsed.token_ids(0), 151643);
  EXPECT_EQ(parsed.logprobs(1), -1e-30f);
  EXPECT_EQ(parsed.finish_reason(), FINISH_REASON_LENGTH);
  EXPECT_EQ(parsed.weight_version(), 18446744073709551615ull);
  // proto3 `optional`: presence of a zero seed is kept.
  SamplingParams params;
  params.set_seed(0);
  SamplingParams parsed_params;
  ASSERT_TRUE(parsed_params.ParseFromString(params.SerializeAsString()));
  EXPECT_TRUE(parsed_params.has_seed());
  EXPECT_FALSE(SamplingParams().has_seed());
}

// The house rules of the API files, checked on their text: a `//` comment directly above every
// field and enum value, and every enum's zero value named *_UNSPECIFIED (the health proto is
// the standard one and keeps its own enum names).
TEST(ApiStyleTest, EveryFieldHasACommentAndEnumsStartUnspecified) {
  const char* source_dir = std::getenv("RLMESH_SOURCE_DIR");
  ASSERT_NE(source_dir, nullptr) << "RLMESH_SOURCE_DIR is not set";
  const std::regex field_re(R"(^\s*(repeated |optional )?[\w.<>, ]+ \w+ = \d+;)");
  const std::regex enum_value_re(R"(^\s*(\w+) = (\d+);)");
  const std::regex enum_re(R"(^\s*enum \w+ \{)");
  int checked = 0;
  for (const char* name : {"common", "rollout", "reward", "reference", "trainer", "coordinator"}) {
    const std::string path = std::string(source_dir) + "/proto/rlmesh/v1/" + name + ".proto";
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    std::string line, previous;
    bool expect_unspecified = false;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      const bool is_enum_value = std::regex_search(line, m, enum_value_re);
      if (std::regex_search(line, field_re) || is_enum_value) {
        ++checked;
        EXPECT_NE(previous.find("//"), std::string::npos)
            << path << ":" << n << ": no comment above `" << line << "`";
      }
      if (expect_unspecified && is_enum_value) {
        EXPECT_EQ(m[2].str(), "0") << path << ":" << n;
        EXPECT_TRUE(m[1].str().ends_with("_UNSPECIFIED")) << path << ":" << n;
        expect_unspecified = false;
      }
      if (std::regex_search(line, enum_re)) expect_unspecified = true;
      if (line.find_first_not_of(" \t") != std::string::npos) previous = line;
    }
  }
  EXPECT_GT(checked, 150);
}

// The names of grpc::StatusCode's values, the only words a "Status codes:" sentence may list.
const std::set<std::string>& GrpcCodeNames() {
  // In grpc::StatusCode's order, 0 to 16.
  static const std::set<std::string> names = [] {
    std::set<std::string> out;
    std::istringstream words(
        "OK CANCELLED UNKNOWN INVALID_ARGUMENT DEADLINE_EXCEEDED NOT_FOUND ALREADY_EXISTS "
        "PERMISSION_DENIED RESOURCE_EXHAUSTED FAILED_PRECONDITION ABORTED OUT_OF_RANGE "
        "UNIMPLEMENTED INTERNAL UNAVAILABLE DATA_LOSS UNAUTHENTICATED");
    for (std::string word; words >> word;) out.insert(word);
    return out;
  }();
  return names;
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path << ": cannot be read";
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string Trim(const std::string& s, const char* chars = " \t") {
  const size_t begin = s.find_first_not_of(chars);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(chars) - begin + 1);
}

// The codes of the sentence that follows "Status codes:" in `text`, the comment above an rpc:
// "Status codes: OK; CODE (when); CODE (when)." at its end. Adds a failure naming `where`
// when the sentence is missing, is not last, or lists a word that is not a gRPC code.
std::set<std::string> StatusCodesOf(const std::string& text, const std::string& where) {
  const std::string kLead = "Status codes:";
  const size_t lead = text.find(kLead);
  if (lead == std::string::npos) {
    ADD_FAILURE() << where << ": the comment above the rpc has no \"" << kLead << "\" sentence";
    return {};
  }
  std::set<std::string> codes;
  std::string item;
  int depth = 0;
  size_t end = std::string::npos;
  auto take = [&] {
    const std::string name = Trim(item.substr(0, item.find('(')));
    if (GrpcCodeNames().count(name) == 0) {
      ADD_FAILURE() << where << ": \"" << name << "\" in its " << kLead
                    << " sentence is not a gRPC status code name";
    } else if (!codes.insert(name).second) {
      ADD_FAILURE() << where << ": " << name << " is listed twice in its " << kLead << " sentence";
    }
    item.clear();
  };
  for (size_t i = lead + kLead.size(); i < text.size() && end == std::string::npos; ++i) {
    const char c = text[i];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ';' || c == '.')) {
      take();
      if (c == '.') end = i;
      continue;
    }
    item += c;
  }
  if (end == std::string::npos) {
    ADD_FAILURE() << where << ": its " << kLead << " sentence does not end with a period";
  } else if (!Trim(text.substr(end + 1)).empty()) {
    ADD_FAILURE() << where << ": its " << kLead << " sentence must end the comment, but \""
                  << Trim(text.substr(end + 1)) << "\" follows it";
  }
  return codes;
}

// The codes of each rpc in docs/api.md's "## Status codes" section: "### XxxService" headings,
// each with a table | RPC | Code | When |, one code per row; an empty RPC cell continues the
// row above. Keyed "Service.Rpc"; `rows` gets the line of each (rpc, code).
std::map<std::string, std::set<std::string>> DocumentedCodes(const std::vector<std::string>& lines,
                                                             const std::string& path,
                                                             std::map<std::string, int>* rows) {
  std::map<std::string, std::set<std::string>> out;
  const std::regex service_re(R"(^### .*?(\w+Service))");
  bool in_section = false;
  std::string service, rpc;
  for (size_t n = 0; n < lines.size(); ++n) {
    const std::string& line = lines[n];
    const std::string where = path + ":" + std::to_string(n + 1);
    if (line == "## Status codes") {
      in_section = true;
      continue;
    }
    if (!in_section) continue;
    if (line.starts_with("## ")) break;
    std::smatch m;
    if (std::regex_search(line, m, service_re)) {
      service = m[1].str();
      rpc.clear();
      continue;
    }
    if (!line.starts_with("|")) continue;
    std::vector<std::string> cells;
    std::stringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(Trim(cell, " `"));
    if (cells.size() < 3 || cells[0] == "RPC" || cells[0].starts_with("---")) continue;
    if (!cells[0].empty()) rpc = cells[0];
    EXPECT_FALSE(service.empty() || rpc.empty())
        << where << ": a table row before its ### service heading or its RPC";
    EXPECT_EQ(GrpcCodeNames().count(cells[1]), 1u)
        << where << ": \"" << cells[1] << "\" is not a gRPC status code name";
    const std::string key = service + "." + rpc;
    EXPECT_TRUE(out[key].insert(cells[1]).second)
        << where << ": " << key << " lists " << cells[1] << " twice";
    (*rows)[key + " " + cells[1]] = static_cast<int>(n + 1);
  }
  EXPECT_TRUE(in_section) << path << ": no \"## Status codes\" section";
  return out;
}

// Every rpc's comment ends with "Status codes: OK; CODE (when); ...", naming only gRPC codes,
// and docs/api.md's "## Status codes" tables list exactly the same codes for it, so neither
// can change without the other.
TEST(ApiStyleTest, EveryRpcDocumentsItsStatusCodes) {
  const char* source_dir = std::getenv("RLMESH_SOURCE_DIR");
  ASSERT_NE(source_dir, nullptr) << "RLMESH_SOURCE_DIR is not set";
  const std::regex service_re(R"(^\s*service (\w+) \{)");
  const std::regex rpc_re(R"(^\s*rpc (\w+)\()");
  // "Service.Rpc" -> the codes of its comment, and where the rpc is.
  std::map<std::string, std::set<std::string>> proto_codes;
  std::map<std::string, std::string> proto_where;
  for (const char* name : {"rollout", "reward", "reference", "trainer", "coordinator"}) {
    const std::string path = std::string(source_dir) + "/proto/rlmesh/v1/" + name + ".proto";
    const std::vector<std::string> lines = ReadLines(path);
    std::string service;
    for (size_t n = 0; n < lines.size(); ++n) {
      std::smatch m;
      if (std::regex_search(lines[n], m, service_re)) service = m[1].str();
      if (!std::regex_search(lines[n], m, rpc_re)) continue;
      const std::string where = path + ":" + std::to_string(n + 1);
      // The `//` block directly above the rpc, joined into one text.
      size_t first = n;
      while (first > 0 && Trim(lines[first - 1]).starts_with("//")) --first;
      std::string text;
      for (size_t k = first; k < n; ++k) text += " " + Trim(Trim(lines[k]).substr(2));
      const std::string key = service + "." + m[1].str();
      proto_codes[key] = StatusCodesOf(text, where + " (" + key + ")");
      proto_where[key] = where;
    }
  }
  // The text scan found every rpc the compiled descriptors have.
  for (const pb::FileDescriptor* file :
       {GenerateRequest::descriptor()->file(), ScoreRequest::descriptor()->file(),
        ComputeLogProbsRequest::descriptor()->file(), TrainStepRequest::descriptor()->file(),
        RegisterReplicaRequest::descriptor()->file()}) {
    for (int s = 0; s < file->service_count(); ++s) {
      for (int r = 0; r < file->service(s)->method_count(); ++r) {
        const std::string key =
            file->service(s)->name() + "." + file->service(s)->method(r)->name();
        EXPECT_EQ(proto_codes.count(key), 1u)
            << file->name() << ": rpc " << key << " was not found in the text";
      }
    }
  }
  // 23 rpcs when written: a smaller count means a file fell out of the list above.
  EXPECT_GE(proto_codes.size(), 23u);

  const std::string docs = std::string(source_dir) + "/docs/api.md";
  std::map<std::string, int> rows;
  const auto documented = DocumentedCodes(ReadLines(docs), docs, &rows);
  for (const auto& [key, codes] : proto_codes) {
    auto it = documented.find(key);
    if (it == documented.end()) {
      ADD_FAILURE() << proto_where[key] << ": rpc " << key << " has no row in " << docs
                    << "'s \"## Status codes\" section";
      continue;
    }
    for (const std::string& code : codes) {
      EXPECT_EQ(it->second.count(code), 1u)
          << proto_where[key] << ": " << key << " returns " << code << " by its comment, but "
          << docs << "'s \"## Status codes\" has no row for it";
    }
    for (const std::string& code : it->second) {
      EXPECT_EQ(codes.count(code), 1u)
          << docs << ":" << rows[key + " " + code] << ": " << key << " returns " << code
          << ", but the Status codes: sentence at " << proto_where[key] << " does not say so";
    }
  }
  for (const auto& [key, codes] : documented) {
    EXPECT_EQ(proto_codes.count(key), 1u) << docs << ":" << rows[key + " " + *codes.begin()] << ": "
                                          << key << " is not an rpc of the protos";
  }
}

}  // namespace
}  // namespace rlmesh::v1
