#!/bin/sh
# Makes sure the build dependencies are present: a C compiler, make, pkg-config, Debian's
# libcjson-dev, check and zlib1g-dev, and python3 (the test suite's layer checker). Installs what is missing with apt-get when it can (as root, or
# through password-less sudo); otherwise says exactly what to install and exits 1.
set -u
missing=""
command -v cc >/dev/null 2>&1 || missing="$missing build-essential"
command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
command -v python3 >/dev/null 2>&1 || missing="$missing python3"
if command -v pkg-config >/dev/null 2>&1; then
    pkg-config --exists libcjson || missing="$missing libcjson-dev"
    pkg-config --exists check || missing="$missing check"
    pkg-config --exists zlib || missing="$missing zlib1g-dev"
else
    missing="$missing libcjson-dev check zlib1g-dev"
fi
[ -z "$missing" ] && exit 0

echo "ckpt-harness: missing build dependencies:$missing"
if command -v apt-get >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        SUDO=""
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        echo "ckpt-harness: run as root: apt-get update && apt-get install -y$missing"
        exit 1
    fi
    echo "ckpt-harness: installing with apt-get:$missing"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq$missing >/dev/null
    exit $?
fi
echo "ckpt-harness: no apt-get here; install these with your package manager:$missing"
echo "              (a C11 compiler, make, pkg-config, cJSON >= 1.7, Check >= 0.15 and zlib with .pc files)"
exit 1
