#!/bin/sh
exec fio "$CORPUS/fio-database.fio" >/dev/null
