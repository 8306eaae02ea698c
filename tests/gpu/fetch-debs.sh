#!/bin/sh
# Downloads the Debian packages the GPU machine lacks (it has no package manager access;
# FIELD-NOTES.md) into tests/gpu/debs/, so tests/gpu/run.sh can unpack them there:
# libcjson (the harness's JSON library) and zlib's headers (harness/io/npz.c).
# Run it on a Debian/Ubuntu machine with apt before sending the tree to the GPU machine.
# Usage: sh tests/gpu/fetch-debs.sh [DIR]
set -eu
DIR=${1:-$(cd "$(dirname "$0")" && pwd)/debs}
mkdir -p "$DIR"
cd "$DIR"
apt-get download libcjson1 libcjson-dev zlib1g-dev
ls -l "$DIR"
