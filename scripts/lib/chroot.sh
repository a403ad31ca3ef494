# shellcheck shell=bash
# A fresh minimal Debian chroot for the clean-machine checks (scripts/check-deb,
# scripts/check-demo): sourced, not run. The caller sets NAME (its name in messages),
# LOGS (a folder for the logs), KEEP (1: leave the chroot for a look around) and a die()
# that names the failing step, then calls chroot_trap once before chroot_create.
#   chroot_create        debootstrap --variant=minbase CODENAME into a new CHROOT, CODENAME
#                        from the host's /etc/os-release, from TANDEM_DEB_MIRROR (default
#                        http://deb.debian.org/debian); sources: CODENAME, -updates and
#                        -security main, as a fresh Debian machine has them; debootstrap is
#                        installed on the host when missing
#   chroot_mount         /proc, /sys, /dev and a /dev/shm of its own into CHROOT, unmounted by
#                        the trap (only what was mounted, in reverse order) before CHROOT is
#                        removed
#   in_chroot COMMAND    runs a bash command inside, with a clean environment
MIRROR="${TANDEM_DEB_MIRROR:-http://deb.debian.org/debian}"
CHROOT=""
MOUNTED=()

chroot_cleanup() {
  local rc=$? i
  for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTED[i]}" || umount -l "${MOUNTED[i]}" || echo "$NAME: could not unmount ${MOUNTED[i]}" >&2
  done
  if [ -n "$CHROOT" ]; then
    if [ "$KEEP" -eq 1 ]; then
      echo "$NAME: the chroot is left in $CHROOT (--keep)"
    elif ! findmnt -rn -o TARGET | grep -q "^$CHROOT/"; then  # never rm -rf through a mount
      rm -rf "$CHROOT"
    else
      echo "$NAME: something is still mounted under $CHROOT: left in place" >&2
    fi
  fi
  if [ "$rc" -ne 0 ] && [ "${STEP:-setup}" != setup ]; then echo "$NAME: step '$STEP' failed (exit $rc)" >&2; fi
  exit "$rc"
}

chroot_trap() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "$NAME: needs root (debootstrap, chroot and mount); run it as root or under sudo" >&2
    exit 2
  fi
  trap chroot_cleanup EXIT
  trap 'exit 130' INT TERM
}

chroot_create() {
  local codename security
  # shellcheck disable=SC1091  # the host's, read for its codename
  codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
  [ -n "$codename" ] || die "no VERSION_CODENAME in /etc/os-release: not a Debian host?"
  if ! command -v debootstrap >/dev/null; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap; } ||
      die "could not install debootstrap"
  fi
  CHROOT="$(mktemp -d "${TMPDIR:-/tmp}/tandem-$NAME.XXXXXX")"
  debootstrap --variant=minbase "$codename" "$CHROOT" "$MIRROR" >"$LOGS/debootstrap.log" 2>&1 ||
    { tail -20 "$LOGS/debootstrap.log"; die "debootstrap $codename (log: $LOGS/debootstrap.log)"; }
  security="${MIRROR%/debian}/debian-security"
  cat >"$CHROOT/etc/apt/sources.list" <<SOURCES
deb $MIRROR $codename main
deb $MIRROR $codename-updates main
deb $security $codename-security main
SOURCES
  cat "$CHROOT/etc/apt/sources.list"
  cp /etc/resolv.conf "$CHROOT/etc/resolv.conf"
}

mount_into() {  # mount_into TARGET MOUNT-ARGS...: mounts, and records TARGET for the trap
  local target="$1"; shift
  mkdir -p "$target"
  mount "$@" "$target" || die "mount $* $target"
  MOUNTED+=("$target")
}

chroot_mount() {
  mount_into "$CHROOT/proc" -t proc proc
  mount_into "$CHROOT/sys" -t sysfs sysfs
  mount_into "$CHROOT/dev" --bind /dev
  # Private, so that the tmpfs below stays in the chroot where / is a shared mount (systemd's
  # default) instead of covering the host's /dev/shm through the bind's peer.
  mount --make-private "$CHROOT/dev" || die "mount --make-private $CHROOT/dev"
  mount_into "$CHROOT/dev/shm" -t tmpfs tmpfs  # the shm backend's segments, the chroot's own
}

in_chroot() {
  chroot "$CHROOT" /usr/bin/env -i HOME=/srv/check PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    bash -euo pipefail -c "$1"
}
