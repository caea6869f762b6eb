#!/usr/bin/env bash
# Run before a cargo build: claims the build cache (CARGO_TARGET_DIR) for this clone. The Makefile
# shares one cache between every clone on the machine, and cargo judges freshness by file times, so
# a clone whose sources are older than another clone's last build would run that clone's test
# binaries, with that clone's paths compiled in (`env!("CARGO_MANIFEST_DIR")`: the tests then read
# another checkout, or one that is gone). When the cache was last built from another clone, this
# clone's crate sources are touched, so cargo rebuilds this crate and none of its dependencies.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
marker="$target/.built-from"

mkdir -p "$target"
if [[ "$(cat "$marker" 2>/dev/null || true)" != "$repo" ]]; then
  if [[ -s "$marker" ]]; then
    echo "cargo-target: $target was last built from $(cat "$marker"): this crate is rebuilt for $repo"
  fi
  find "$repo/src" "$repo/tests" "$repo/Cargo.toml" -type f -exec touch {} +
  echo "$repo" >"$marker"
fi
