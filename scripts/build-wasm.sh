#!/usr/bin/env bash
# Builds the engine for JavaScript hosts:
#   OUT/delivery_lab.{js,wasm,d.ts}             every lab (Node: the CLI, the tests, the bench)
#   OUT/labs/LAB/delivery_lab.{js,wasm,d.ts}    one lab each (the page loads only its lab's)
# Usage: scripts/build-wasm.sh [--no-hidden] [--no-reference] [--out DIR] [--target-dir DIR]
#   --no-hidden   leave the hidden tests out (for a page whose hidden tests stay on
#                 the course's server)
#   --no-reference  leave each lab's reference solution out of the page's graders
#                 (OUT/labs/LAB: DELIVERY_LAB_NO_REFERENCE, build.rs), each built in a
#                 target dir of its own (only-LAB-no-reference). The every-lab module is
#                 Node's (the CLI reads the reference from it) and is never served.
#   --out         where the packages go (default www/pkg)
#   --target-dir  cargo's target dir (default target/)
# No wasm-pack: cargo, then wasm-bindgen-cli, then wasm-opt when it is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

hidden=hidden
noref=
out=www/pkg
default_target_dir=target
target_dir=$default_target_dir
while (($#)); do
  case "$1" in
    --no-hidden) hidden= ;;
    --no-reference) noref=1 ;;
    --out) out=$2; shift ;;
    --target-dir) target_dir=$2; shift ;;
    *) echo "usage: $0 [--no-hidden] [--no-reference] [--out DIR] [--target-dir DIR]" >&2; exit 2 ;;
  esac
  shift
done
# The labs (src/labs.rs); a page's grader holds its lab only.
mapfile -t labs < <("$(dirname "$0")/labs")
((${#labs[@]})) || { echo "error: scripts/labs named no lab" >&2; exit 1; }

pinned=$("$(dirname "$0")/wasm-bindgen-pin")
if ! command -v wasm-bindgen >/dev/null; then
  echo "error: wasm-bindgen not found; run ./lab build, which installs wasm-bindgen-cli $pinned" >&2
  exit 1
fi
installed=$(wasm-bindgen --version | awk '{print $2}')
if [[ "$installed" != "$pinned" ]]; then
  echo "error: wasm-bindgen-cli is $installed but Cargo.toml pins wasm-bindgen =$pinned;" >&2
  echo "       run ./lab build, which installs the matching CLI" >&2
  exit 1
fi

wasm_opt="${WASM_OPT:-wasm-opt}"
opt_version=$("$wasm_opt" --version 2>/dev/null | sed -nE 's/.*version ([0-9]+).*/\1/p' || true)

# build LABS DIR [NOREF]: cargo, wasm-bindgen, wasm-opt, a load check, the sizes. LABS: the
# ids the build holds (comma-separated; empty for every lab); NOREF: 1 to leave the
# reference solution out (DELIVERY_LAB_NO_REFERENCE, in a target dir of its own). Each set of labs builds
# in a target dir of its own: build.rs reads DELIVERY_LAB_ONLY, and a change of it
# would rebuild the crate in a shared one at every build. A new one starts from the
# every-lab build's dependencies (scripts/seed-target-dir), and target/'s seed a new
# TARGET_DIR (--no-hidden's), so the dependencies compile once.
build() {
  local only=$1 dir=$2 nr=${3:-}
  local tdir="$target_dir${only:+/only-$only}${nr:+-no-reference}"
  if [[ -n "$only" ]]; then
    scripts/seed-target-dir "$tdir" "$target_dir" release
  elif [[ "$target_dir" != "$default_target_dir" ]]; then
    scripts/seed-target-dir "$target_dir" "$default_target_dir" release
  fi
  # Set only when asked: cargo reruns build.rs when the variable's value changes.
  env -u DELIVERY_LAB_NO_REFERENCE ${nr:+DELIVERY_LAB_NO_REFERENCE=1} \
    DELIVERY_LAB_ONLY="$only" \
    cargo build --lib --target wasm32-unknown-unknown --release \
    --target-dir "$tdir" \
    --no-default-features ${hidden:+--features $hidden}

  mkdir -p "$dir"
  # Names are stripped: they are 40% of the raw module, and a panic (a bug; none is
  # expected) is replayed natively with the report's seed anyway.
  wasm-bindgen --target web --out-dir "$dir" --out-name delivery_lab \
    --remove-name-section --remove-producers-section \
    "$tdir/wasm32-unknown-unknown/release/delivery_lab.wasm"

  local wasm="$dir/delivery_lab_bg.wasm"
  # wasm-opt -O3 (for speed, as the cargo build), only from binaryen 116 on (WASM_OPT
  # may point at one off PATH, e.g. npm's binaryen): 108 (Debian 12's) re-points
  # wasm-bindgen's `__wbindgen_externrefs` export at the funcref table, so the module
  # no longer instantiates (fixed in 110). Not on this machine kind, so its effect is
  # not measured here; the module is correct without it.
  if [[ -z "$opt_version" ]]; then
    echo "note: no wasm-opt found; the module is as cargo and wasm-bindgen made it" >&2
  elif ((opt_version < 116)); then
    echo "note: skipping wasm-opt $opt_version (< 116 breaks this module)" >&2
  else
    # The post-MVP features Rust's wasm32 target emits, which wasm-opt must be told of.
    "$wasm_opt" -O3 \
      --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
      --enable-mutable-globals --enable-multivalue --enable-reference-types \
      "$wasm" -o "$wasm.opt"
    mv "$wasm.opt" "$wasm"
  fi

  # A module that builds but does not instantiate is the failure the steps above can
  # cause; node, when present, catches it here rather than in the page.
  if command -v node >/dev/null; then
    node --input-type=module -e "
      import { readFileSync } from 'node:fs';
      import { initSync, Grader } from '$(realpath "$dir")/delivery_lab.js';
      initSync({ module: readFileSync('$(realpath "$wasm")') });
      const g = new Grader();
      for (const { id } of JSON.parse(g.labs())) JSON.parse(g.lab(id));
    " || { echo "error: $wasm does not load in node" >&2; exit 1; }
  fi

  local raw gz
  raw=$(wc -c <"$wasm")
  gz=$(gzip -9 -c "$wasm" | wc -c)
  echo "$wasm: $raw bytes raw, $gz bytes gzip -9"
}

build "" "$out"
for lab in "${labs[@]}"; do
  build "$lab" "$out/labs/$lab" "$noref"
done
