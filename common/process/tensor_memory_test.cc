#include "common/process/tensor_memory.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace rlmesh::process {
namespace {

TEST(TensorMemoryTest, CountsWhatTensorsHoldAndTheirPeak) {
  torch::Tensor before = torch::empty({1000}, torch::kFloat32);  // made before the install
  CountCpuTensorMemory();
  CountCpuTensorMemory();  // a second call changes nothing
  const TensorMemory start = CpuTensorMemory();
  {
    torch::Tensor a = torch::empty({1000}, torch::kFloat32);  // 4,000 bytes
    torch::Tensor b = torch::empty({250}, torch::kFloat64);   // 2,000 bytes
    EXPECT_EQ(CpuTensorMemory().allocated_bytes - start.allocated_bytes, 6000);
    EXPECT_GE(CpuTensorMemory().peak_bytes, start.allocated_bytes + 6000);
  }
  before = torch::Tensor();  // freed, never counted: the count does not go below its start
  EXPECT_EQ(CpuTensorMemory().allocated_bytes, start.allocated_bytes);
  EXPECT_GE(CpuTensorMemory().peak_bytes, start.allocated_bytes + 6000);

  ResetPeakCpuTensorMemory();
  EXPECT_EQ(CpuTensorMemory().peak_bytes, CpuTensorMemory().allocated_bytes);
  {
    torch::Tensor c = torch::ones({500}, torch::kFloat32);  // 2,000 bytes, written
    EXPECT_EQ(c.sum().item<float>(), 500.0f);
  }
  const TensorMemory end = CpuTensorMemory();
  EXPECT_EQ(end.allocated_bytes, start.allocated_bytes);
  // The sum's result and the 0-d float made by item() come and go too: at least c's bytes.
  EXPECT_GE(end.peak_bytes - end.allocated_bytes, 2000);
}

}  // namespace
}  // namespace rlmesh::process
