#!/bin/sh
# python3 -m compileall: each module read, its .pyc written beside it (buffered, renamed
# into place, never synced).
python3 -m compileall -q -j 1 "$D/py" > /dev/null
exit 0
