#!/usr/bin/env bash
# Builds the engine for JavaScript hosts:
#   OUT/delivery_lab.{js,wasm,d.ts}             every lab (Node: the CLI, the tests, the bench)
#   OUT/labs/LAB/delivery_lab.{js,wasm,d.ts}    one lab each (the page loads only its lab's)
# Usage: scripts/build-wasm.sh [--no-hidden] [--out DIR] [--target-dir DIR]
#   --no-hidden   leave the hidden tests out (for a page whose hidden tests stay on
#                 the course's server)
#   --out         where the packages go (default www/pkg)
#   --target-dir  cargo's target dir (default target/)
# No wasm-pack: cargo, then wasm-bindgen-cli, then wasm-opt when it is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

hidden=hidden
out=www/pkg
target_dir=target
while (($#)); do
  case "$1" in
    --no-hidden) hidden= ;;
    --out) out=$2; shift ;;
    --target-dir) target_dir=$2; shift ;;
    *) echo "usage: $0 [--no-hidden] [--out DIR] [--target-dir DIR]" >&2; exit 2 ;;
  esac
  shift
done
# Each lab is a cargo feature; a page's grader holds its lab only.
mapfile -t labs < <("$(dirname "$0")/labs")
((${#labs[@]})) || { echo "error: scripts/labs named no lab" >&2; exit 1; }

pinned=$(sed -nE 's/^wasm-bindgen[[:space:]]*=[[:space:]]*"=([0-9.]+)".*/\1/p' Cargo.toml | head -n1)
if [[ -z "$pinned" ]]; then
  echo "error: no exact pin wasm-bindgen = \"=x.y.z\" found in Cargo.toml" >&2
  exit 1
fi
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

# build FEATURES DIR: cargo, wasm-bindgen, wasm-opt, a load check, the sizes.
build() {
  local features=$1 dir=$2
  CARGO_PROFILE_RELEASE_OPT_LEVEL=z \
    cargo build --lib --target wasm32-unknown-unknown --release --target-dir "$target_dir" \
    --no-default-features --features "$features"

  mkdir -p "$dir"
  # Names are stripped: they are 40% of the raw module, and a panic (a bug; none is
  # expected) is replayed natively with the report's seed anyway.
  wasm-bindgen --target web --out-dir "$dir" --out-name delivery_lab \
    --remove-name-section --remove-producers-section \
    "$target_dir/wasm32-unknown-unknown/release/delivery_lab.wasm"

  local wasm="$dir/delivery_lab_bg.wasm"
  # wasm-opt, only from binaryen 116 on (WASM_OPT may point at one off PATH, e.g. npm's
  # binaryen): 108 (Debian 12's) re-points wasm-bindgen's `__wbindgen_externrefs` export at
  # the funcref table, so the module no longer instantiates (fixed in 110), and
  # --skip-pass arrived in 116. Binaryen's inlining is skipped: with it -Oz makes the
  # raw module smaller but the gzip 16 KB larger (measured); without it -Oz saves ~2 KB gzip.
  if [[ -z "$opt_version" ]]; then
    echo "note: no wasm-opt found; the module is not size-optimized (about 2 KB more gzip)" >&2
  elif ((opt_version < 116)); then
    echo "note: skipping wasm-opt $opt_version (< 116 breaks or bloats this module); about 2 KB more gzip" >&2
  else
    # The post-MVP features Rust's wasm32 target emits, which wasm-opt must be told of.
    "$wasm_opt" -Oz --skip-pass=inlining-optimizing \
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

all=$(IFS=,; echo "${labs[*]}")
build "${hidden:+$hidden,}$all" "$out"
for lab in "${labs[@]}"; do
  build "${hidden:+$hidden,}$lab" "$out/labs/$lab"
done
