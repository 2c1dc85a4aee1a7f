#!/bin/busybox sh
# /init of an arm64 guest of `cargo xtask kernels` (busybox, the static aarch64 iotop-bpf,
# the as-nobody and dsync-writes helpers, the kernel's loop and ext4 modules). It runs `check` and the smoke
# set's workloads under the tool, once as root and once as nobody with the documented
# capabilities, and prints every result file gzipped and base64-encoded between markers on
# the serial console; the smoke set's own judge reads them on the host. Workloads run by
# path: busybox's shell would run a NOFORK applet inside itself, under the comm "sh".
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tracefs nodev /sys/kernel/tracing
mount -t debugfs nodev /sys/kernel/debug
mount -t securityfs nodev /sys/kernel/security
mkdir -p /dev/shm /mnt/ext4 /out
mount -t tmpfs -o size=768m tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
# Kernel messages stay off the console the results go through.
echo 1 > /proc/sys/kernel/printk
up() { echo "@$1 $(cut -d' ' -f1 /proc/uptime)" >> /out/timing.txt; }
up init
for m in $(cat /modules/order); do insmod /modules/$m || echo "insmod $m failed" >> /out/modules.txt; done
# Debian's own setting (SECURITY_PERF_EVENTS_RESTRICT), said explicitly all the same.
echo 3 > /proc/sys/kernel/perf_event_paranoid
BIN=/bin/iotop-bpf
OUT=/out
uname -r > $OUT/uname.txt
# ARM's mapping symbols ($x, $d) among the modules' symbols: the tool skips them.
grep -c ' [tT] \$[xd]' /proc/kallsyms > $OUT/kallsyms-mapping-symbols.txt
$BIN --version > $OUT/version.txt 2>&1; echo "rc=$?" >> $OUT/version.txt
$BIN check --facts > $OUT/facts.json 2> /dev/null
up check
$BIN check > $OUT/check.txt 2>&1; echo "rc=$?" >> $OUT/check.txt
grep -q '^rc=0' $OUT/check.txt || $BIN check --verbose > $OUT/check-verbose.txt 2>&1
up check-done
gunzip -c /ext4.img.gz > /dev/shm/ext4.img
EXT4=$(losetup -f)
losetup $EXT4 /dev/shm/ext4.img
mount -t ext4 $EXT4 /mnt/ext4 || { echo "mount ext4 failed:" && dmesg | tail -5; } >> $OUT/modules.txt
echo x > /mnt/ext4/synced

# The first line of file $1 within 300 s (loading takes long under emulation).
first_line() {
    i=0
    while [ $i -lt 300 ]; do [ -s "$1" ] && return 0; sleep 1; i=$((i + 1)); done
    return 1
}
# (reads, writes) completed on disk $1, from /proc/diskstats.
diskstats() { awk -v n="$1" '$3 == n { print $4, $8 }' /proc/diskstats; }
# The pid of a workload from its first line, `pid N: ...`.
workload_pid() { sed -n '1s/^pid \([0-9]*\):.*/\1/p'; }

# smoke MODE COMMAND...: the smoke set's workloads under `COMMAND --json`; the pids and the
# bare device's counts go to MODE.pids.
smoke() {
    mode=$1
    shift
    pids=$OUT/$mode.pids
    truncate -s 64M /dev/shm/bare.img
    BARE=$(losetup -f)
    losetup $BARE /dev/shm/bare.img
    name=${BARE#/dev/}
    echo "bare $name $(cat /sys/class/block/$name/dev)" > $pids
    up "$mode-start"
    "$@" --procs 10000 --json -d 1 > $OUT/$mode.json 2> $OUT/$mode.err &
    tool=$!
    first_line $OUT/$mode.json || echo "no first snapshot within 300 s" >> $OUT/$mode.err
    up "$mode-first"
    echo "before $(diskstats $name)" >> $pids
    /bin/dd if=/dev/zero of=$BARE bs=4k count=300 oflag=direct 2> /dev/null &
    p=$!; wait $p; echo "dd_write $p" >> $pids
    /bin/dd if=$BARE of=/dev/null bs=4k count=200 iflag=direct 2> /dev/null &
    p=$!; wait $p; echo "dd_read $p" >> $pids
    sleep 1
    echo "after $(diskstats $name)" >> $pids
    i=0
    while [ $i -lt 20 ]; do
        /bin/sync /mnt/ext4/synced &
        p=$!; wait $p; echo "syncer $p" >> $pids
        i=$((i + 1))
    done
    /bin/dsync-writes /mnt/ext4/dsync-$mode 100 128 &
    p=$!; wait $p; echo "dsync $p" >> $pids
    mkdir -p /mnt/ext4/lab001-$mode
    echo "lab001 $($BIN workload lab001 --dir /mnt/ext4/lab001-$mode --count 300 | workload_pid)" >> $pids
    # The parent's stack as the kernel shows it, midway through its wait: the frames worth
    # hiding are seen here, not guessed.
    $BIN workload dstate --seconds 3 > /tmp/dstate.out &
    w=$!
    sleep 1
    p=$(workload_pid < /tmp/dstate.out)
    cat /proc/$p/stack > $OUT/$mode-dstate-stack.txt 2>&1
    wait $w
    echo "dstate $p" >> $pids
    sleep 2
    kill -INT $tool
    wait $tool
    echo "rc=$?" >> $OUT/$mode.err
    losetup -d $BARE
    rm -f /dev/shm/bare.img
    up "$mode-done"
}

smoke root $BIN
# As in the smoke set: the capabilities' run sums requests in the kernel from the start.
export IOTOP_BPF_AGGREGATE_ABOVE=0
smoke capabilities /bin/as-nobody +bpf,+perfmon,+dac_read_search,+sys_ptrace,+syslog $BIN
umount /mnt/ext4
losetup -d $EXT4
up end
for f in $OUT/*; do
    echo "==KM-BEGIN ${f#$OUT/}=="
    gzip -c "$f" | base64
    echo "==KM-END=="
done
echo "==KM-DONE=="
poweroff -f
