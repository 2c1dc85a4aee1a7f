#!/bin/sh
# git unpack-objects of 3,002 objects into loose objects, with core.fsync=all and
# core.fsyncMethod=$1: "fsync" (an fsync per object file), "writeout-only"
# (sync_file_range(WAIT_BEFORE|WRITE|WAIT_AFTER) per object: written out and waited for,
# never committed or flushed) or "batch" (that write-out per object, then one fsync that
# flushes them all).
set -e
cd "$D/repo"
exec git -c core.fsync=all -c core.fsyncMethod="$1" unpack-objects -q <"$CACHE/git-3000.pack"
