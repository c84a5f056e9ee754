# Every dependency comes from a Debian 12 package (see scripts/setup.sh).
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)          # FindProtobuf: Debian ships no protobuf-config.cmake
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
include(RlmeshNvtxShim)                  # a CUDA LibTorch's config under CUDA 12.9+
find_package(Torch REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(ZLIB REQUIRED)                # checkpoint checksums (CRC-32)
find_package(OpenSSL REQUIRED)             # SHA-256 of model files (GetModelInfo)
find_package(yaml-cpp REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)

# Torch's exported flags carry -D_GLIBCXX_USE_CXX11_ABI=1 and includes; wrap them in one target.
add_library(rlmesh_torch INTERFACE)
target_link_libraries(rlmesh_torch INTERFACE ${TORCH_LIBRARIES})
target_include_directories(rlmesh_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
