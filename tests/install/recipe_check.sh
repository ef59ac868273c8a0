#!/usr/bin/env bash
# Runs the README's install recipe ("Installing into a prefix") as written, with $HOME pointing at
# a temporary folder, and checks that the install goes under the prefix it names, whatever state
# the source tree's own build/ is in (tools/demo configures it with the default prefix first).
#
# By default only the recipe's `meson setup` line runs (a few seconds), and the checks read what
# Meson would install and build: every installed file under the prefix, nothing of the test
# suites in the build. --full runs every line of the recipe (a whole second build of the library
# and the tools: many minutes on a 2-core machine), then checks the installed files and builds the
# README's first program against them with pkg-config.
# Usage: recipe_check.sh SOURCE_DIR [--full]
set -euo pipefail
source="$(cd "$1" && pwd)"
full=0
[ "${2:-}" = "--full" ] && full=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The sh block under "### Installing into a prefix".
python3 - "$source/README.md" > "$work/recipe.sh" <<'EOF'
import sys
lines = open(sys.argv[1], encoding='utf-8').read().split('\n')
start = lines.index('### Installing into a prefix')
i = next(k for k in range(start, len(lines)) if lines[k] == '```sh')
end = next(k for k in range(i + 1, len(lines)) if lines[k] == '```')
print('\n'.join(lines[i + 1:end]))
EOF
echo "the README's recipe:"
sed 's/^/  /' "$work/recipe.sh"
# Its build folder is relative to the source tree, where a reader runs it; here it goes into the
# temporary folder, the one change made to the recipe's lines.
build_name="$(awk '$1 == "meson" && $2 == "setup" {print $3; exit}' "$work/recipe.sh")"
[ -n "$build_name" ] || { echo "FAIL: the recipe has no 'meson setup DIR' line"; exit 1; }
case "$build_name" in build) echo "FAIL: the recipe configures build/, which tools/demo configures first"; exit 1;; esac
sed "s|\\b$build_name\\b|$work/$build_name|g" "$work/recipe.sh" > "$work/run.sh"
if [ $full = 0 ]; then grep '^meson setup' "$work/run.sh" > "$work/setup.sh"; mv "$work/setup.sh" "$work/run.sh"; fi
mkdir -p "$work/home"
(cd "$source" && HOME="$work/home" bash -euo pipefail "$work/run.sh") > "$work/recipe.log" 2>&1 ||
  { cat "$work/recipe.log"; echo "FAIL: the recipe failed"; exit 1; }
build="$work/$build_name"

prefix="$(meson introspect "$build" --buildoptions |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')"
case "$prefix" in "$work/home/"*) ;; *) echo "FAIL: the prefix is $prefix, not under \$HOME"; exit 1;; esac
echo "prefix: $prefix"

# Every file Meson installs goes under the prefix.
meson introspect "$build" --installed | python3 -c '
import json, sys
prefix = sys.argv[1]
dests = sorted(json.load(sys.stdin).values())
outside = [d for d in dests if not d.startswith(prefix + "/")]
if outside:
    sys.exit("FAIL: installed outside the prefix: " + ", ".join(outside))
names = {d.rsplit("/", 1)[-1] for d in dests}
for want in ("libferry.so", "ferry.pc", "ferryConfig.cmake", "ferry.h", "ferry-run", "ferry-info",
             "ferry-bench", "ferry-dlrm"):
    if want not in names:
        sys.exit("FAIL: the install lacks " + want)
print(len(dests), "files, all under the prefix")
' "$prefix"

# The build an install runs (ninja's default targets) holds no test suite.
meson introspect "$build" --targets | python3 -c '
import json, sys
built = [t["name"] for t in json.load(sys.stdin) if t["build_by_default"]]
tests = [n for n in built if n.startswith("test_") or n.endswith("_job")]
if tests:
    sys.exit("FAIL: the install builds test suites: " + ", ".join(tests))
print("default targets:", " ".join(built))
'
left="$(ninja -C "$build" -n | tail -1)"
case "$left" in
  *"no work to do"*) echo "build steps: none left (the recipe built them)" ;;
  *) echo "build steps: $(cut -d' ' -f1 <<<"$left" | tr -d '[]' | cut -d/ -f2)" ;;
esac

if [ $full = 1 ]; then
  libdir="$(dirname "$(find "$prefix" -name 'libferry.so' | head -1)")"
  for f in "$prefix/include/ferry/ferry.h" "$libdir/pkgconfig/ferry.pc" \
           "$libdir/cmake/ferry/ferryConfig.cmake" "$prefix/bin/ferry-run" "$prefix/bin/ferry-info"; do
    test -e "$f" || { echo "FAIL: $f was not installed"; exit 1; }
  done
  export PKG_CONFIG_PATH="$libdir/pkgconfig"
  # shellcheck disable=SC2046  # the flags are word lists
  g++ -std=c++20 "$source/tests/install/first_program.cpp" -o "$work/first_program" \
    $(pkg-config --cflags --libs ferry) -Wl,-rpath,"$(pkg-config --variable=libdir ferry)"
  "$work/first_program"
fi
echo "the install recipe installs under its prefix"
