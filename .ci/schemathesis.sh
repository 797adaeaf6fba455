#!/usr/bin/env bash
# Property-based run of schemathesis (from PyPI) against a real `vouch serve`
# on 127.0.0.1:0, driven by the served OpenAPI document, with every check
# schemathesis has (`--checks all`: no server error; status codes, content
# types, headers and bodies as documented; schema-valid data accepted and
# schema-invalid data rejected; 405 with `Allow` for undeclared methods;
# auth not ignored; stateful use-after-free and resource availability) and
# every phase (examples, coverage, fuzzing, stateful).
#
# The stream (`/api/v1/events/stream`) is left out: Server-Sent Events never
# end, so no response would ever be complete.
#
# Safety harness: the run creates plans and runs them, and a backup reads
# its source on this machine. A hook puts every plain-path `source` that
# the server would accept under a directory that does not exist, so no
# backup reads this machine's files (a backup of `/` would read all of it,
# /proc included). The value stays a valid absolute path of the same
# validity, so the checks judge the server exactly as before.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/debug/vouch}
venv=${VOUCH_ST_VENV:-/tmp/vouch-schemathesis}
if [ ! -x "$venv/bin/st" ]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip >/dev/null
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis>=4,<5"
fi
work=$(mktemp -d)
out="$work/stdout"
cat >"$work/vouch_ci_hooks.py" <<'EOF'
import schemathesis

ABSENT = "/nonexistent/vouch-schemathesis"
MAX_SOURCE = 4096


@schemathesis.hook
def before_call(context, case, kwargs):
    body = case.body
    if not isinstance(body, dict):
        return
    source = body.get("source")
    if not isinstance(source, str):
        return
    # A guest of a cluster: the only cluster configured is `ci`.
    if source.startswith("pve:") and source.count("/") == 2:
        body["source"] = "pve:ci/" + source.split("/", 1)[1]
        return
    # A dump storage (`vzdump:/path`) is judged by its path: the same.
    prefix = "vzdump:" if source.startswith("vzdump:/") else ""
    path = source[len(prefix):]
    # Only sources the server accepts are rewritten, and into sources it
    # accepts: absolute, no NUL, at most MAX_SOURCE characters.
    if not path.startswith("/") or "\x00" in path:
        return
    if len(source) > MAX_SOURCE:
        return
    if len(source) + len(ABSENT) <= MAX_SOURCE:
        body["source"] = prefix + ABSENT + path
    else:
        # As long as the original, still plain components below ABSENT.
        body["source"] = prefix + ABSENT + "/" + "x" * (len(path) - len(ABSENT) - 1)
EOF
# Every rewritten source lies below ABSENT: the only root plans may use.
# No limit on refused tokens: the auth checks send many from one address.
printf '[sources]\nallow = ["/nonexistent/vouch-schemathesis"]\n\n[api]\nfailed_auth_per_minute = 0\n\n[jobs]\nmin_every = "1ns"\n' >"$work/vouch.toml"
# One Proxmox VE cluster, never reached (no plan runs): `pve:ci/...`
# sources name it.
printf 'secret\n' >"$work/pve.token"
chmod 600 "$work/pve.token"
printf '\n[[proxmox]]\nname = "ci"\nurl = "https://127.0.0.1:9"\ntoken_id = "vouch@pve!ci"\ntoken_secret_file = "%s"\nstorage = "dump"\nmount = "/nonexistent/vouch-schemathesis-pve"\n' "$work/pve.token" >>"$work/vouch.toml"
"$bin" serve --listen 127.0.0.1:0 --data-dir "$work/data" --config "$work/vouch.toml" >"$out" 2>"$work/stderr" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 300); do
  grep -q '^listening on ' "$out" && break
  kill -0 $pid 2>/dev/null || { cat "$work/stderr"; echo "vouch serve exited"; exit 1; }
  sleep 0.2
done
addr=$(sed -n 's/^listening on //p' "$out")
token=$(cat "$work/data/initial-admin-token" 2>/dev/null)
[ -n "$addr" ] && [ -n "$token" ] || { echo "vouch serve did not come up"; exit 1; }
PYTHONPATH="$work" SCHEMATHESIS_HOOKS=vouch_ci_hooks \
"$venv/bin/st" run "$addr/api/v1/openapi.json" \
  --header "Authorization: Bearer $token" \
  --checks all \
  --exclude-path /api/v1/events/stream \
  --max-examples 100 --seed 1 \
  --no-color
