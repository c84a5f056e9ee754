#!/usr/bin/env bash
# `tests/gpu/deps.sh unpack`, the first stage of run.sh on the GPU machine, on a made-up
# package: the package's files land in the prefix, an absolute link into /usr is made to point
# inside the prefix, env.sh puts the prefix's programs, libraries and multiarch headers first,
# a package that does not match SHA256SUMS is refused, and the glibc check passes on this
# machine every time (it read `ldd --version | head -1` under pipefail once, and failed about
# 1 run in 100 when ldd was still writing as head left).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/gpu/test_lib.sh
. "$here/test_lib.sh"

multiarch=$(gcc -print-multiarch 2> /dev/null || echo x86_64-linux-gnu)
pkg="$tmp/pkg"
mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/usr/lib/$multiarch" "$pkg/usr/include/$multiarch/made"
printf 'Package: rlmesh-made-up\nVersion: 1.0\nArchitecture: all\nMaintainer: rlmesh tests\nDescription: a made-up package\n' \
  > "$pkg/DEBIAN/control"
printf '#!/bin/sh\necho made-up tool\n' > "$pkg/usr/bin/made-up-tool"
chmod +x "$pkg/usr/bin/made-up-tool"
echo "library bytes" > "$pkg/usr/lib/$multiarch/libmadeup.so.1"
ln -s "/usr/lib/$multiarch/libmadeup.so.1" "$pkg/usr/lib/$multiarch/libmadeup.so"
echo "#define MADE_UP 1" > "$pkg/usr/include/$multiarch/made/config.h"
dir="$tmp/deps"
mkdir -p "$dir/debs"
dpkg-deb --root-owner-group --build "$pkg" "$dir/debs/rlmesh-made-up_1.0_all.deb" > /dev/null ||
  { echo "FAIL: dpkg-deb could not build the made-up package"; exit 1; }
(cd "$dir/debs" && sha256sum -- *.deb > SHA256SUMS)

for run in $(seq 20); do
  if ! out=$(bash "$here/deps.sh" unpack "$dir" 2>&1); then
    fail "unpack $run failed: $out"
    break
  fi
done
prefix="$dir/prefix"
[[ -x $prefix/usr/bin/made-up-tool ]] || fail "the package's program is not in the prefix"
link=$(readlink "$prefix/usr/lib/$multiarch/libmadeup.so")
[[ $link != /* ]] || fail "the absolute link was kept: $link"
[[ $(cat "$prefix/usr/lib/$multiarch/libmadeup.so" 2> /dev/null) == "library bytes" ]] ||
  fail "the link does not reach the library in the prefix ($link)"
(
  # shellcheck disable=SC1091
  . "$dir/env.sh"
  [[ $(command -v made-up-tool) == "$prefix/usr/bin/made-up-tool" && $(made-up-tool) == "made-up tool" ]] ||
    { echo "FAIL: env.sh does not put the prefix's programs first"; exit 1; }
  libs=${LD_LIBRARY_PATH:-} headers=${CPLUS_INCLUDE_PATH:-}
  [[ ${libs%%:*} == "$prefix/usr/lib/$multiarch" ]] ||
    { echo "FAIL: LD_LIBRARY_PATH starts with ${libs%%:*}"; exit 1; }
  [[ ${headers%%:*} == "$prefix/usr/include/$multiarch" ]] ||
    { echo "FAIL: CPLUS_INCLUDE_PATH starts with ${headers%%:*}"; exit 1; }
  # A compiler finds the multiarch header through it, as the project's build must.
  echo '#include <made/config.h>
int main() { return MADE_UP - 1; }' > "$tmp/use.cc"
  g++ "$tmp/use.cc" -o "$tmp/use" || { echo "FAIL: the multiarch header is not found"; exit 1; }
) || status=1

# A package changed after download is refused before anything is unpacked.
echo "changed" >> "$dir/debs/rlmesh-made-up_1.0_all.deb"
if out=$(bash "$here/deps.sh" unpack "$dir" 2>&1); then
  fail "a package that does not match SHA256SUMS was unpacked"
elif [[ $out != *"FAILED"* ]]; then
  fail "the refusal does not say which check failed: $out"
fi

finish "deps.sh unpack"
