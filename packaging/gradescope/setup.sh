#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image from
# autograder.zip (unpacked in /autograder/source), not once per submission. It
# installs Node.js 24 (the current LTS line) or newer, the grader's one runtime (its Python is Pyodide,
# inside grader/), and bubblewrap, the grader's sandbox (used when this container
# lets it make user namespaces; else each sandbox is walled by a uid of its own
# alone), then checks that the grader passes the lab's reference solution, so that
# a broken image fails here and not on a learner's submission. That check also
# makes this package root's (platform.mjs: the grader private to root but for what
# a sandbox reads) and prints which wall it used.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
NEED_MAJOR=24

node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends nodejs ca-certificates curl xz-utils bubblewrap util-linux >/dev/null

if (( $(node_major) < NEED_MAJOR )); then
  # Ubuntu's own nodejs is 12 on 22.04 (Gradescope's default image) and 18 on
  # 24.04: too old (the grader runs its sandboxes under Node's --permission, 22.13
  # and later; Node 20 is past its end of life). Take the Node project's own Linux
  # build of the newest 24.x instead, checked against the
  # SHA-256 list published beside it.
  case "$(uname -m)" in
    x86_64) arch=x64 ;;
    aarch64) arch=arm64 ;;
    *) echo "setup.sh: no Node.js build for $(uname -m)" >&2; exit 1 ;;
  esac
  base=https://nodejs.org/dist/latest-v24.x
  work=$(mktemp -d)
  curl -fsSL "$base/SHASUMS256.txt" -o "$work/SHASUMS256.txt"
  tarball=$(awk -v a="linux-$arch.tar.xz" '$2 ~ a"$" { print $2 }' "$work/SHASUMS256.txt")
  curl -fsSL "$base/$tarball" -o "$work/$tarball"
  (cd "$work" && grep " $tarball\$" SHASUMS256.txt | sha256sum -c -)
  tar -xJf "$work/$tarball" -C /usr/local --strip-components=1 --no-same-owner
  rm -rf "$work"
  hash -r
fi
echo "setup.sh: Node.js $(node --version)"
(( $(node_major) >= NEED_MAJOR )) || { echo "setup.sh: Node.js $NEED_MAJOR or newer is needed" >&2; exit 1; }

node "$here/grader/grader/platform.mjs" --self-check --lab '@LAB@' --private "$here"
