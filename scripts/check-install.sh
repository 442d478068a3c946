#!/usr/bin/env bash
# Checks `make install`: DESTDIR=tmp PREFIX=/usr lays out exactly the binary,
# the unit, the sysusers snippet and the config; a second install keeps an
# edited config; and `systemd-analyze verify` passes on the installed unit
# (and on it with the GPU drop-in), warnings included. .ci/run runs it.
# Without systemd-analyze (Debian: apt-get install systemd) the verify step
# fails unless BATCHD_SKIP_SYSTEMD_VERIFY=1, which skips it and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/root
fail() { echo "check-install.sh: $*" >&2; exit 1; }

make -s install DESTDIR="$dest" PREFIX=/usr >/dev/null

want='etc/batchd/config.yaml
lib/systemd/system/batchd.service
usr/bin/batchd
usr/lib/sysusers.d/batchd.conf'
got=$(cd "$dest" && find . -type f | sed 's|^\./||' | LC_ALL=C sort)
[ "$got" = "$want" ] || fail "installed files:
$got
want:
$want"
[ -x "$dest/usr/bin/batchd" ] || fail "usr/bin/batchd is not executable"
unit=$dest/lib/systemd/system/batchd.service
grep -qx 'ExecStart=/usr/bin/batchd run --config /etc/batchd/config.yaml' "$unit" ||
  fail "the unit's ExecStart does not run /usr/bin/batchd: $(grep ExecStart "$unit")"
cmp -s deploy/config.example.yaml "$dest/etc/batchd/config.yaml" || fail "etc/batchd/config.yaml is not the example"

# An operator's config survives a second install.
echo "# edited" >>"$dest/etc/batchd/config.yaml"
make -s install DESTDIR="$dest" PREFIX=/usr >/dev/null
grep -q '^# edited$' "$dest/etc/batchd/config.yaml" || fail "a second make install replaced the operator's config"

if ! command -v systemd-analyze >/dev/null; then
  [ "${BATCHD_SKIP_SYSTEMD_VERIFY:-}" = 1 ] || fail "systemd-analyze is missing (Debian: apt-get install systemd); BATCHD_SKIP_SYSTEMD_VERIFY=1 skips the verify step"
  echo "check-install.sh: systemd-analyze missing: skipped systemd-analyze verify"
  exit 0
fi
# verify checks that ExecStart exists, so it runs on a copy that points at
# the binary under DESTDIR; the rest of the unit is as installed. Any output
# (an unknown or misspelt key is only a warning) fails.
units=$tmp/units
mkdir -p "$units/batchd.service.d"
sed "s|^ExecStart=/usr/bin/batchd |ExecStart=$dest/usr/bin/batchd |" "$unit" >"$units/batchd.service"
verify() {
  local out
  out=$(cd "$units" && SYSTEMD_UNIT_PATH="$units:" systemd-analyze verify batchd.service 2>&1) ||
    fail "systemd-analyze verify ($1) failed:
$out"
  [ -z "$out" ] || fail "systemd-analyze verify ($1) warned:
$out"
}
verify "the installed unit"
cp deploy/systemd/batchd.service.d/gpu.conf.example "$units/batchd.service.d/gpu.conf"
verify "with the GPU drop-in"
echo "check-install.sh: make install layout and systemd-analyze verify: ok"
