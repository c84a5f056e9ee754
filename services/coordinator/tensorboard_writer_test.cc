// The event files against the CRC catalogue's check value and an independent reader
// (tests/tools/read_tensorboard_events.py: Debian's crcmod for the CRCs, the protocol-buffer
// wire format decoded by hand).
#include "services/coordinator/tensorboard_writer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "gtest/gtest.h"

namespace rlmesh::coordinator {
namespace {

// The reader's exit status and what it printed.
std::pair<int, std::string> Read(const std::string& path) {
  const std::string command = std::string("/usr/bin/python3 ") + RLMESH_TEST_SOURCE_DIR +
                              "/tests/tools/read_tensorboard_events.py " + path + " 2>&1";
  std::FILE* pipe = popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) out += buffer;
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(TensorBoardWriterTest, Crc32cHasTheCataloguesCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // CRC-32C's check value
  EXPECT_EQ(Crc32c(""), 0u);
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(MaskedCrc32c("123456789"), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TensorBoardWriterTest, AnIndependentReaderFindsEveryScalarAtItsStep) {
  std::string dir = testing::TempDir() + "/rlmesh_tb_XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  auto writer = TensorBoardWriter::Create(dir + "/tb/run");
  ASSERT_TRUE(writer.ok()) << writer.status();
  EXPECT_NE((*writer)->path().find("events.out.tfevents."), std::string::npos);
  ASSERT_TRUE((*writer)->WriteScalars(1, {{"critic/score/mean", 0.25}, {"actor/lr", 1e-6}}).ok());
  ASSERT_TRUE((*writer)->WriteScalars(2, {{"critic/score/mean", 0.75}, {"x", std::nan("")}}).ok());
  ASSERT_TRUE((*writer)->WriteScalars(2, {{"val/reward/mean", 0.5}}).ok());
  ASSERT_TRUE((*writer)->WriteScalars(123456789012, {{"big", -3.5}}).ok());

  auto [status, out] = Read(dir + "/tb/run");
  ASSERT_EQ(status, 0) << out;
  const auto json = nlohmann::json::parse(out);
  EXPECT_EQ(json["files"], 1);
  EXPECT_EQ(json["file_version"], "brain.Event:2");
  const auto& s = json["scalars"];
  EXPECT_EQ(s["1"]["critic/score/mean"], 0.25);
  EXPECT_NEAR(s["1"]["actor/lr"].get<double>(), 1e-6, 1e-13);  // float32, as TensorBoard keeps
  EXPECT_EQ(s["2"]["critic/score/mean"], 0.75);
  EXPECT_TRUE(s["2"]["x"].is_null()) << "NaN stays NaN";
  EXPECT_EQ(s["2"]["val/reward/mean"], 0.5);
  EXPECT_EQ(s["123456789012"]["big"], -3.5);

  // One flipped byte in a record's data: the reader names the record.
  const std::string path = (*writer)->path();
  writer->reset();
  const auto size = std::filesystem::file_size(path);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 6));
    f.put('\x7f');
  }
  auto [bad_status, bad_out] = Read(path);
  EXPECT_EQ(bad_status, 1);
  EXPECT_NE(bad_out.find("CRC of the record at byte"), std::string::npos) << bad_out;
}

TEST(TensorBoardWriterTest, AFolderThatCannotBeMadeIsNamed) {
  auto writer = TensorBoardWriter::Create("/proc/rlmesh_cannot_be_here/tb");
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find("/proc/rlmesh_cannot_be_here/tb"), std::string::npos);
}

}  // namespace
}  // namespace rlmesh::coordinator
