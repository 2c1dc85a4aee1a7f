#!/bin/sh
# grep -r through a cold tree of small files for a word that is not there: every file read
# whole, once, through readahead sized to the file.
grep -r -c -F zzqqxxnotthere "$D/tree" > /dev/null
exit 0
