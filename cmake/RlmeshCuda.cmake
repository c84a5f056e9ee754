# RLMESH_CUDA=AUTO builds the CUDA/NCCL targets when the CUDA toolkit and NCCL are found;
# ON makes their absence an error; OFF skips them. Nothing else depends on them.
set(RLMESH_HAVE_CUDA OFF)
if(NOT RLMESH_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    include(RlmeshFindNccl)
  endif()
  if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(RLMESH_HAVE_CUDA ON)
    add_library(rlmesh_nccl UNKNOWN IMPORTED)
    set_target_properties(rlmesh_nccl PROPERTIES
      IMPORTED_LOCATION ${NCCL_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
    message(STATUS "rlmesh: CUDA ${CUDAToolkit_VERSION} and NCCL found; building the NCCL targets")
  elseif(RLMESH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "RLMESH_CUDA=ON but the CUDA toolkit or NCCL was not found (NCCL: set NCCL_HOME to a folder with include/nccl.h and lib/libnccl.so*)")
  else()
    message(STATUS "rlmesh: no CUDA toolkit with NCCL; skipping the NCCL targets")
  endif()
endif()
