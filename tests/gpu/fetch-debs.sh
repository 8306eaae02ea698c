#!/bin/sh
# Downloads the Debian packages of the build dependencies the GPU machine lacks (it has no
# package manager access) into tests/gpu/debs/ (git-ignored): libcjson (the harness's JSON
# library), Check and subunit (the test framework, for make check there) and zlib's headers
# (harness/io/npz.c). Run it on a Debian/Ubuntu machine with apt whose release matches the
# GPU machine's, then hand the folder to the GPU machine with the tree (the device tool's
# `carry: ["tests/gpu/debs"]`); tests/gpu/run.sh unpacks them there with dpkg -x into
# OUT/deps and points PKG_CONFIG_PATH at them (docs/cuda.md, "A GPU run").
# Usage: sh tests/gpu/fetch-debs.sh [DIR]
set -eu
DIR=${1:-$(cd "$(dirname "$0")" && pwd)/debs}
mkdir -p "$DIR"
cd "$DIR"
apt-get download libcjson1 libcjson-dev check libsubunit0 libsubunit-dev zlib1g zlib1g-dev
ls -l "$DIR"
