#!/usr/bin/env bash
# The workspace's `rust-version` must tell the truth: no locked package
# may need a newer Rust (cargo only checks this when an older compiler
# actually builds, which CI's never is). Prints the packages that need the
# most; fails naming any that need more than the workspace says.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo metadata --format-version 1 --locked --offline | python3 -c '
import json, sys
meta = json.load(sys.stdin)
def version(v):
    return tuple(int(x) for x in (v or "0").split("."))[:2]
members = set(meta["workspace_members"])
declared = max(version(p.get("rust_version")) for p in meta["packages"] if p["id"] in members)
needs = sorted(((version(p.get("rust_version")), p["name"], p["version"])
                for p in meta["packages"] if p["id"] not in members), reverse=True)
top = needs[0][0]
print("workspace rust-version %d.%d; locked dependencies need at most %d.%d (%s)" % (
    declared + top + (", ".join("%s %s" % (n, v) for r, n, v in needs if r == top),)))
over = [(r, n, v) for r, n, v in needs if r > declared]
if over:
    for r, n, v in over:
        print("  %s %s needs Rust %d.%d" % ((n, v) + r))
    sys.exit("raise the workspace rust-version, or pin those packages lower")
'
