#!/bin/sh
# Makes the recordings the render tests replay (view/tests.rs, `recorded`): short real runs
# of the probes against real programs on loop-backed filesystems. Needs root. Usage:
#   IOTOP_BPF_BIN=target/x86_64-unknown-linux-musl/release/iotop-bpf \
#       sh tui/tests/data/recordings/make.sh [git-loop|incident]...
#
# - git-loop: a loop of `git unpack-objects` with core.fsync=all on ext4 (mq-deadline on its
#   loop device, so the btt split shows), each a short-lived process with small fsyncs; a buffered
#   writer whose pages the flusher kworkers write back; the loop devices' backing files on
#   the root disk, so loop's kworkers do I/O of their own there; an XFS and a third loop
#   device written once at the start, idle after.
# - incident: small-sync (lab001's 128-byte writes, each fsynced, ~50 a second) on ext4 (mq-deadline), dio-tail (O_DIRECT
#   appends off a block boundary) and dstate (a parent stuck in vfork) on XFS, a disk busy at
#   the start only.
#
# Each file is a few intervals: tens of KB (zstd), a few thousand requests.
set -eu
BIN=${IOTOP_BPF_BIN:-target/x86_64-unknown-linux-musl/release/iotop-bpf}
BIN=$(realpath "$BIN")
OUT=$(realpath "$(dirname "$0")")
WORK=$(mktemp -d /var/tmp/iotop-bpf-recordings.XXXXXX)
DEVICES=""
PIDS=""

# Each workload runs in a session of its own: stopping it stops its children too.
stop() {
    for pid in $PIDS; do kill -TERM "-$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    PIDS=""
}

cleanup() {
    stop
    for mnt in "$WORK"/mnt-*; do [ -d "$mnt" ] && umount "$mnt" 2>/dev/null || true; done
    # A detached loop device keeps its scheduler for the next user of its number.
    for dev in $DEVICES; do
        echo none >"/sys/block/${dev#/dev/}/queue/scheduler" 2>/dev/null || true
        losetup -d "$dev" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# loopfs NAME FS SCHEDULER: a 512 MiB (XFS wants 300) filesystem (FS: ext4, xfs or none) on a
# loop device backed by a file on the root disk, mounted at $WORK/mnt-NAME; the device is
# left in $RAW.
loopfs() {
    img="$WORK/$1.img"
    truncate -s 512M "$img"
    dev=$(losetup -f --show --direct-io=off "$img")
    DEVICES="$DEVICES $dev"
    echo "$3" >"/sys/block/${dev#/dev/}/queue/scheduler"
    mkdir -p "$WORK/mnt-$1"
    RAW=$dev
    case "$2" in
    ext4) mkfs.ext4 -q -F -b 4096 -E lazy_itable_init=0,lazy_journal_init=0 "$dev" ;;
    xfs) mkfs.xfs -q -f "$dev" ;;
    none) return 0 ;;
    esac
    mount "$dev" "$WORK/mnt-$1"
}

background() {
    setsid "$@" >/dev/null 2>&1 &
    PIDS="$PIDS $!"
}

# record NAME INTERVALS: the probes for INTERVALS seconds, then the workloads stop.
record() {
    rm -f "$OUT/$1.rec"
    "$BIN" --json -n "$2" --record "$OUT/$1.rec" >/dev/null
    stop
    chmod 0644 "$OUT/$1.rec"
    ls -l "$OUT/$1.rec"
}

git_loop() {
    loopfs git ext4 mq-deadline
    loopfs idle-xfs xfs none
    loopfs idle-raw none none
    # A pack of 40 small objects, unpacked again and again into a fresh repository by one
    # short-lived git process after another, each object fsynced (the corpus' git-fsync,
    # smaller and in a loop).
    src="$WORK/src"
    git init -q "$src"
    i=0
    while [ $i -lt 38 ]; do
        echo "file $i: one line of text" >"$src/f$i.txt"
        i=$((i + 1))
    done
    git -C "$src" add .
    git -C "$src" -c user.name=rec -c user.email=rec@localhost commit -q -m rec
    git -C "$src" rev-list --objects --all | git -C "$src" pack-objects --stdout -q >"$WORK/objects.pack"
    cat >"$WORK/unpack.sh" <<EOF
cd "$WORK/mnt-git"
while true; do
    rm -rf repo
    git init -q repo
    git -C repo -c core.fsync=all -c core.fsyncMethod=fsync unpack-objects -q <"$WORK/objects.pack"
    sleep 0.6
done
EOF
    cat >"$WORK/dirty.sh" <<EOF
while true; do
    dd if=/dev/zero of="$WORK/mnt-git/bulk" bs=1M count=4 2>/dev/null
    sleep 2
done
EOF
    background sh "$WORK/unpack.sh"
    background sh "$WORK/dirty.sh"
    # The XFS and the raw device are busy for the first interval only, then idle.
    cat >"$WORK/once.sh" <<EOF
sleep 1.3
dd if=/dev/zero of="$WORK/mnt-idle-xfs/once" bs=1M count=4 conv=fsync 2>/dev/null
dd if=/dev/zero of="$RAW" bs=1M count=2 oflag=direct 2>/dev/null
sleep 60
EOF
    background sh "$WORK/once.sh"
    sleep 1
    record git-loop 5
}

incident() {
    loopfs lab ext4 mq-deadline
    loopfs tail xfs none
    loopfs idle-raw none none
    # lab001's shape (128-byte appends, each fsynced) at ~50 a second: at full speed it
    # makes 30,000 records a second, megabytes in seconds.
    background "$BIN" workload small-sync --dir "$WORK/mnt-lab" --count 100000000 --interval-ms 20
    cat >"$WORK/tail.sh" <<EOF
while true; do
    "$BIN" workload dio-tail --dir "$WORK/mnt-tail" --count 8 --size 65536
    sleep 0.3
done
EOF
    background sh "$WORK/tail.sh"
    background "$BIN" workload dstate --seconds 30
    # The third device is busy for the first interval only, then idle.
    cat >"$WORK/once.sh" <<EOF
sleep 1.3
dd if=/dev/zero of="$RAW" bs=1M count=2 oflag=direct 2>/dev/null
sleep 60
EOF
    background sh "$WORK/once.sh"
    sleep 1
    record incident 6
}

[ $# -gt 0 ] || set -- git-loop incident
for s in "$@"; do
    case "$s" in
    git-loop) git_loop ;;
    incident) incident ;;
    *) echo "unknown scenario $s" >&2; exit 2 ;;
    esac
    cleanup
    WORK=$(mktemp -d /var/tmp/iotop-bpf-recordings.XXXXXX)
    DEVICES=""
done
