#!/usr/bin/env bash
# Builds the Debian package `halite` from built binaries:
#   packaging/build-deb.sh BIN_DIR OUT_DIR      (BIN_DIR: target/release, say)
# It installs as Salt's packages do: salt-master, salt-api and the CLI tools in
# /usr/bin, systemd units for salt-master and salt-api, /etc/salt/master with
# /etc/salt/master.d/, and a `salt` system user that owns the master's directories.
# Prints the path of the .deb. Needs dpkg-deb only (no cargo-deb, no network).
# HALITE_DEB_COMPRESS picks dpkg-deb's compressor (default xz; the tests use none).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="${1:?usage: build-deb.sh BIN_DIR OUT_DIR}"
out="${2:?usage: build-deb.sh BIN_DIR OUT_DIR}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/../Cargo.toml" | head -1)"
arch="$(dpkg --print-architecture)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

install -d "$stage/DEBIAN" "$stage/usr/bin" "$stage/lib/systemd/system" "$stage/etc/salt/master.d" "$stage/usr/share/doc/halite"
for b in salt-master salt-api salt salt-key salt-run halite-ctl; do
    install -m 0755 "$bin/$b" "$stage/usr/bin/$b"
done
install -m 0644 "$here/debian/salt-master.service" "$here/debian/salt-api.service" "$stage/lib/systemd/system/"
install -m 0644 "$here/debian/master" "$stage/etc/salt/master"
install -m 0644 "$here/../README.md" "$here/../docs/operations.md" "$stage/usr/share/doc/halite/"
install -m 0755 "$here/debian/postinst" "$here/debian/postrm" "$here/debian/prerm" "$stage/DEBIAN/"
install -m 0644 "$here/debian/conffiles" "$stage/DEBIAN/conffiles"
size="$(du -sk --exclude=DEBIAN "$stage" | cut -f1)"
# Depends: the packages that hold the shared libraries the binaries link to.
depends="$(for b in "$stage"/usr/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    dpkg -S "$lib" 2>/dev/null || dpkg -S "/usr$lib" 2>/dev/null || dpkg -S "${lib#/usr}" 2>/dev/null || { echo "build-deb.sh: no package holds $lib" >&2; exit 1; }
done | cut -d: -f1 | sort -u | paste -sd, | sed 's/,/, /g')"
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@SIZE@/$size/" -e "s/@DEPENDS@/$depends/" "$here/debian/control" > "$stage/DEBIAN/control"

mkdir -p "$out"
deb="$out/halite_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Z"${HALITE_DEB_COMPRESS:-xz}" --build "$stage" "$deb" >/dev/null
echo "$deb"
