#!/bin/sh
# git clone of this project's own repository, without hard links: a pack copied (git fsyncs
# packs and their index by default), then ~700 files checked out, buffered.
set -e
repo=$(git -C "$CORPUS" rev-parse --show-toplevel)
git -c safe.directory='*' clone -q --no-hardlinks "$repo" "$D/clone"
