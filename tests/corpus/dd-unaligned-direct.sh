#!/bin/sh
# dd with O_DIRECT and a 3.5 KiB block: every write appends off a filesystem block boundary.
exec dd if=/dev/zero of="$D/dd.out" bs=3584 count=400 oflag=direct status=none
