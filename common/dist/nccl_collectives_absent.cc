// NcclCollectives in a build without the CUDA toolkit and NCCL (common/dist/CMakeLists.txt
// picks this file then): a group asked for backend "nccl" is refused at Join by Available().
#include "common/dist/nccl_collectives.h"

namespace rlmesh::dist {
namespace {

transport::Status NotBuilt() {
  return transport::FailedPreconditionError(
      "backend nccl: this build of rlmesh has no NCCL (CMake found no CUDA toolkit with NCCL, "
      "or RLMESH_CUDA=OFF)");
}

}  // namespace

struct NcclCollectives::State {};

transport::Status NcclCollectives::Available(int) { return NotBuilt(); }
transport::StatusOr<std::string> NcclCollectives::NewId() { return NotBuilt(); }
transport::StatusOr<std::unique_ptr<NcclCollectives>> NcclCollectives::Join(const std::string&, int,
                                                                            int, int, double,
                                                                            const std::string&) {
  return NotBuilt();
}
NcclCollectives::~NcclCollectives() = default;
transport::Status NcclCollectives::AllReduceSum(void*, size_t, NcclElement, const std::string&) {
  return NotBuilt();
}
transport::Status NcclCollectives::AllGather(const void*, void*, size_t, NcclElement,
                                             const std::string&) {
  return NotBuilt();
}
transport::Status NcclCollectives::ReduceScatterSum(const void*, void*, size_t, NcclElement,
                                                    const std::string&) {
  return NotBuilt();
}

}  // namespace rlmesh::dist
