#!/usr/bin/env bash
# rlmesh's build dependencies other than LibTorch and CUDA, carried to a GPU machine that has
# neither them nor a package registry (the device machine of docs/performance.md: CUDA, CMake,
# ninja and a Python with a CUDA PyTorch only).
#
#   tests/gpu/deps.sh download [dir]   here, on Debian 12: `apt-get download` of every package
#                                      below and of what they depend on, into dir/debs
#   tests/gpu/deps.sh list             the packages download would fetch, one a line
#   tests/gpu/deps.sh unpack [dir]     there: dpkg-deb -x of dir/debs/*.deb into dir/prefix,
#                                      absolute links made relative, and dir/env.sh written
#   . dir/env.sh                       PATH, LD_LIBRARY_PATH, PKG_CONFIG_*, CMAKE_PREFIX_PATH
#                                      and the multiarch include folder (C_INCLUDE_PATH,
#                                      CPLUS_INCLUDE_PATH) pointing into dir/prefix
# dir defaults to build-gpu-deps/ at the top of the repository (ignored by git; `run` carries
# it). The C library and the compiler's runtime are left out on purpose: the machine's own are
# used, and mixing two C libraries in one process does not work, so the target must have a
# glibc at least as new as Debian 12's (2.36) for the unpacked programs (protoc,
# grpc_cpp_plugin, pkg-config) and libraries to load; `unpack` checks that and says so.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
command="${1:-}"
dir="$(realpath -m "${2:-$repo/build-gpu-deps}")"

# What cmake/RlmeshDependencies.cmake finds besides Torch and CUDA (scripts/setup.sh installs
# the same here), and pkg-config for its pkg_check_modules.
packages=(
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
  libyaml-cpp-dev libpcre2-dev libutf8proc-dev zlib1g-dev libssl-dev pkgconf
)
# The C library, its headers and the compiler's runtime: the target machine's own.
exclude='^(libc6|libc6-dev|libc-dev-bin|libcrypt1|libcrypt-dev|libgcc-s1|libstdc\+\+6|gcc-[0-9]+-base|linux-libc-dev|libnsl2|libnsl-dev|libtirpc3|libtirpc-dev|libtirpc-common|rpcsvc-proto)$'
glibc_needed=2.36

resolve() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "${packages[@]}" |
    grep -v '^[ <]' | sort -u | grep -Ev "$exclude"
}

case "$command" in
  list)
    resolve
    ;;
  download)
    command -v apt-get >/dev/null || { echo "deps.sh download: needs apt-get (Debian 12)" >&2; exit 1; }
    mapfile -t wanted < <(resolve)
    rm -rf "$dir/debs.partial"
    mkdir -p "$dir/debs.partial"
    # apt-get download writes into the current folder; a failed one leaves debs/ as it was.
    (cd "$dir/debs.partial" && apt-get download -q "${wanted[@]}")
    got=$(find "$dir/debs.partial" -name '*.deb' | wc -l)
    if [[ $got -ne ${#wanted[@]} ]]; then
      echo "deps.sh download: $got .deb files for ${#wanted[@]} packages" >&2
      exit 1
    fi
    (cd "$dir/debs.partial" && sha256sum -- *.deb > SHA256SUMS)
    rm -rf "$dir/debs"
    mv "$dir/debs.partial" "$dir/debs"
    echo "deps.sh: ${#wanted[@]} packages in $dir/debs ($(du -sh "$dir/debs" | cut -f1))"
    ;;
  unpack)
    [[ -f $dir/debs/SHA256SUMS ]] || { echo "deps.sh unpack: no $dir/debs/SHA256SUMS: run 'deps.sh download' on Debian 12 first" >&2; exit 1; }
    (cd "$dir/debs" && sha256sum --quiet -c SHA256SUMS)
    # Read whole: `ldd --version | head -1` under pipefail failed when ldd was still writing
    # as head left (SIGPIPE), and "|| echo 0" then made the version "2.41\n0" (2 reads in 200
    # here, one unpack in ten in gpu_deps_unpack's runs).
    have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
    have=${have:-0}
    if [[ $(printf '%s\n%s\n' "$glibc_needed" "$have" | sort -V | sed -n 1p) != "$glibc_needed" ]]; then
      echo "deps.sh unpack: this machine's glibc is $have; the carried Debian 12 packages need $glibc_needed or newer" >&2
      exit 1
    fi
    prefix="$dir/prefix"
    rm -rf "$prefix"
    mkdir -p "$prefix"
    for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$prefix" 2>/dev/null || {
      # No dpkg-deb (not Debian): a .deb is an ar archive holding data.tar.*.
      tmp=$(mktemp -d)
      (cd "$tmp" && ar x "$deb" && tar -xf data.tar.* -C "$prefix")
      rm -rf "$tmp"
    }; done
    # Links that name /usr/... point into the prefix instead.
    while IFS= read -r -d '' link; do
      target=$(readlink "$link")
      if [[ $target == /* ]]; then
        ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$prefix$target")" "$link"
      fi
    done < <(find "$prefix" -type l -print0)
    multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
    lib="$prefix/usr/lib/$multiarch"
    cat > "$dir/env.sh" <<EOF
# Written by tests/gpu/deps.sh unpack: the carried packages under $prefix.
export PATH="$prefix/usr/bin:\$PATH"
export LD_LIBRARY_PATH="$lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$lib/pkgconfig:$prefix/usr/share/pkgconfig"
export PKG_CONFIG_LIBDIR="\$PKG_CONFIG_PATH"
export PKG_CONFIG_SYSROOT_DIR="$prefix"
export CMAKE_PREFIX_PATH="$prefix/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
# Debian's multiarch headers (openssl/opensslconf.h, curl/curl.h), which a Debian compiler
# finds in /usr/include/$multiarch by itself but nobody's compiler finds in the prefix.
export C_INCLUDE_PATH="$prefix/usr/include/$multiarch\${C_INCLUDE_PATH:+:\$C_INCLUDE_PATH}"
export CPLUS_INCLUDE_PATH="$prefix/usr/include/$multiarch\${CPLUS_INCLUDE_PATH:+:\$CPLUS_INCLUDE_PATH}"
EOF
    echo "deps.sh: $(ls "$dir"/debs/*.deb | wc -l) packages unpacked into $prefix; source $dir/env.sh"
    ;;
  *)
    sed -n '2,18p' "$0" >&2
    exit 2
    ;;
esac
