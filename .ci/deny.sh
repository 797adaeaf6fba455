#!/usr/bin/env bash
# Supply-chain gate: cargo-deny checks advisories, licences, bans and
# sources (deny.toml) without the network, against the RustSec advisory
# database copied in shared/ (`../shared/vendor/rustsec-advisory-db` from
# the project root; VOUCH_ADVISORY_DB overrides it).
#
# cargo-deny reads a database from a git checkout at
# `<db-path>/<name>-<hash of its url>` and dates it by its commit. The copy
# is files only, so a scratch checkout is made of it under target/, its
# commit dated with the copy's own date (VENDORED.txt): the staleness limit
# of deny.toml then measures the copy's real age.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.20.2
if [ "$(cargo-deny --version 2>/dev/null)" != "cargo-deny $version" ]; then
  # About 3.5 CPU-minutes, once per machine.
  cargo install cargo-deny --version "$version" --locked --quiet
fi
src=${VOUCH_ADVISORY_DB:-../shared/vendor/rustsec-advisory-db}
if [ ! -d "$src/crates" ]; then
  echo "no advisory database at $src" >&2
  exit 1
fi
when=$(grep -o '([0-9-]*)' "$src/VENDORED.txt" | head -1 | tr -d '()')
[ -n "$when" ] || { echo "no date in $src/VENDORED.txt" >&2; exit 1; }
# The directory name cargo-deny derives from the default database's url.
db=target/advisory-dbs/advisory-db-3157b0e258782691
rm -rf "$db"
mkdir -p "$db"
cp -R "$src/." "$db/"
(
  cd "$db"
  export GIT_AUTHOR_DATE="${when}T00:00:00Z" GIT_COMMITTER_DATE="${when}T00:00:00Z"
  git init -q -b main .
  git add -A
  git -c user.name=vendored -c user.email=vendored@localhost commit -q -m "vendored advisory-db ($when)"
  # cargo-deny takes the newer of the commit and .git/HEAD's mtime.
  touch -d "${when}T00:00:00Z" .git/HEAD
)
# cargo-deny reads `cargo metadata` for every platform of the lock file:
# fetch the crates a Linux build never downloads (a no-op once cached).
cargo fetch --locked --quiet
cargo deny --offline --locked check advisories licenses bans sources
