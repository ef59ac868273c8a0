#!/usr/bin/env bash
# Installs the built ferry into a temporary prefix and builds a program against it in each way the
# README and docs/packaging.md document: pkg-config on a plain g++ line (the README's first
# program), a CMake project (find_package(ferry CONFIG)), and a Meson project with ferry as a
# subproject (ferry.wrap).
# Reuses the library the build already made; only the small consumers are compiled, so this stays
# cheap enough for CI. The subproject is configured and its consumer compiled, not linked: linking
# would build the library a second time inside the parent.
# Usage: check.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
source="$(cd "$2" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
step() { printf '== %s (%ds)\n' "$1" "$SECONDS"; }

step "meson install into a temporary prefix"
meson install -C "$build" --no-rebuild --quiet --destdir "$work/root" >/dev/null
# The build's prefix under the destdir; ferry.pc and the CMake package are relocatable.
prefix="$work/root$(meson introspect "$build" --buildoptions |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')"
libdir="$(dirname "$(find "$prefix" -name 'libferry.so' | head -1)")"
test -f "$prefix/include/ferry/ferry.h"
test -f "$libdir/pkgconfig/ferry.pc"
test -f "$libdir/cmake/ferry/ferryConfig.cmake"
test -f "$libdir/cmake/ferry/ferryConfigVersion.cmake"

step "pkg-config: the include path is <prefix>/include only, MPICH's and UCX's libraries private"
# Relocatable (meson.build's pkgconfig.relocatable): the prefix is found from the file's place.
grep -q '^prefix=${pcfiledir}' "$libdir/pkgconfig/ferry.pc" ||
  { echo "FAIL: ferry.pc is not relocatable (configure with -Dpkgconfig.relocatable=true)"; exit 1; }
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cflags="$(pkg-config --cflags ferry)"
libs="$(pkg-config --libs ferry)"
echo "cflags: $cflags"
echo "libs:   $libs"
# ferry's own include path, resolved: <prefix>/include, never <prefix>/include/ferry.
own=0
for flag in $cflags; do
  case "$flag" in -I*) ;; *) continue;; esac
  dir="$(realpath -m "${flag#-I}")"
  if [ "$dir" = "$(realpath -m "$prefix/include")" ]; then own=1; fi
  if [ "$dir" = "$(realpath -m "$prefix/include/ferry")" ]; then
    echo "FAIL: -I<prefix>/include/ferry in Cflags"; exit 1
  fi
done
[ $own = 1 ] || { echo "FAIL: no -I<prefix>/include in Cflags"; exit 1; }
case " $libs " in *mpi*|*ucp*|*ucs*) echo "FAIL: MPI/UCX libraries in Libs"; exit 1;; esac
test "$(pkg-config --variable=cxx_std ferry)" = "c++20"

step "the installed headers compile, and their inline functions link to libferry.so"
# Exported symbols: a program compiled against the headers must find every ferry symbol their
# inline functions reach (-fkeep-inline-functions emits them all; packaging/export_map.py's
# KEEP_DETAIL is where a ferry::detail one goes). Templates are covered by the consumers below.
(cd "$prefix/include" && find ferry -name '*.h' | sort) > "$work/headers.txt"
sed 's|.*|#include <&>|' "$work/headers.txt" > "$work/all_headers.cpp"
# shellcheck disable=SC2086
g++ -std=c++20 -O0 -fkeep-inline-functions -DMPICH_SKIP_MPICXX -c "$work/all_headers.cpp" \
  -o "$work/all_headers.o" $cflags
nm -u -P "$work/all_headers.o" | awk '{print $1}' | grep 5ferry | sort -u > "$work/needed.txt"
nm -D --defined-only "$libdir/libferry.so" | awk '{print $3}' | sort -u > "$work/exported.txt"
missing="$(comm -23 "$work/needed.txt" "$work/exported.txt" | c++filt)"
[ -z "$missing" ] || { echo "FAIL: the headers reach symbols libferry.so hides:"; echo "$missing"; exit 1; }
echo "$(wc -l < "$work/headers.txt") headers; $(wc -l < "$work/needed.txt") ferry symbols reached, all exported"

step "pkg-config consumer: the README's first program"
# shellcheck disable=SC2086  # the flags are word lists
g++ -std=c++20 "$source/tests/install/first_program.cpp" -o "$work/first_program" \
  $cflags $libs -Wl,-rpath,"$libdir"
"$work/first_program"

step "CMake consumer: find_package(ferry CONFIG), ferry::ferry"
mkdir -p "$work/cmake"
cp "$source/tests/install/cmake/CMakeLists.txt" "$source/tests/install/consumer.cpp" "$work/cmake/"
cmake -S "$work/cmake" -B "$work/cmake/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; exit 1; }
cmake --build "$work/cmake/build" >"$work/cmake-build.log" 2>&1 ||
  { cat "$work/cmake-build.log"; exit 1; }
"$work/cmake/build/consumer"

step "Meson consumer: ferry as a subproject through ferry.wrap"
mkdir -p "$work/meson/subprojects"
cp "$source/tests/install/meson/meson.build" "$source/tests/install/consumer.cpp" "$work/meson/"
cp "$source/packaging/ferry.wrap" "$work/meson/subprojects/"
# The wrap's directory already exists, so Meson uses it and fetches nothing.
ln -s "$source" "$work/meson/subprojects/ferry"
meson setup "$work/meson/build" "$work/meson" --force-fallback-for=ferry \
  >"$work/meson.log" 2>&1 || { cat "$work/meson.log"; exit 1; }
targets="$(meson introspect "$work/meson/build" --targets |
  python3 -c 'import json,sys; print(" ".join(t["name"] for t in json.load(sys.stdin)))')"
echo "targets: $targets"
for unwanted in ferry-bench ferry-dlrm ferry-run test_collectives; do
  case " $targets " in *" $unwanted "*) echo "FAIL: the subproject builds $unwanted"; exit 1;; esac
done
obj="$(ninja -C "$work/meson/build" -t targets all | grep -o '^consumer\.p/[^:]*\.o' | head -1)"
ninja -C "$work/meson/build" "$obj" >/dev/null
step "all consumers built"
