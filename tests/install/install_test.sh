#!/usr/bin/env bash
# `cmake --install` puts the binary, the examples and the shipped corpus where the binary finds
# them (core/install_paths.h): an installed motley trains the embedded-data tiny run from any
# folder with the build tree out of reach, and its binary names neither the source nor the build
# folder. Usage: install_test.sh CMAKE BUILD_DIR SOURCE_DIR check-paths|skip-path-check
# (skip-path-check: the sanitizer build, whose ASan/UBSan metadata keeps source paths).
set -euo pipefail
cmake=$1 build=$2 source=$3 path_check=$4
case "$path_check" in
  check-paths|skip-path-check) ;;
  *) echo "install_test: 4th argument must be check-paths or skip-path-check, not '$path_check'"; exit 2 ;;
esac
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
"$cmake" --install "$build" --prefix "$prefix" > "$prefix/install.log"
for f in bin/motley share/motley/data/corpus/kjv.txt share/motley/examples/runs/tiny.yaml \
         share/motley/examples/clusters/hetero-4.yaml share/doc/motley/README.md; do
  [ -e "$prefix/$f" ] || { echo "install_test: $f missing after cmake --install"; exit 1; }
done
# No absolute path of the checkout or the build folder compiled in.
if [ "$path_check" = check-paths ]; then
  for dir in "$source" "$build"; do
    if grep -qaF "$dir" "$prefix/bin/motley"; then
      echo "install_test: the installed binary contains the path $dir"
      exit 1
    fi
  done
else
  echo "install_test: sanitizer build: the no-checkout-path check is skipped"
fi
cd "$prefix"
out=$(env -u MOTLEY_DATA_DIR "$prefix/bin/motley" train share/motley/examples/runs/tiny.yaml \
      --steps 2 --threads 1 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -qF "data: train $prefix/share/motley/data/corpus/kjv.txt" || {
  echo "install_test: the installed binary did not read its installed corpus:"; echo "$out"; exit 1; }
echo "$out" | grep -q "done: 2 steps" || { echo "$out"; exit 1; }
# MOTLEY_DATA_DIR names another data folder; a missing one is an error naming where it looked.
out=$(MOTLEY_DATA_DIR="$prefix/nowhere" "$prefix/bin/motley" train share/motley/examples/runs/tiny.yaml \
      --steps 1 2>&1) && { echo "install_test: a missing data folder did not fail"; exit 1; }
echo "$out" | grep -qF "$prefix/nowhere" || { echo "$out"; exit 1; }
echo "install_test: ok ($prefix)"
