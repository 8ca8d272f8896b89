# test/lifecycle/common.sh: helpers shared by the erasure tests
# (test/run-63-erase-bytes.sh, test/run-65-erase-under-load.sh) that look
# for erased bytes in the data files of esrc.events, not through SQL.
# Source after test/lib.sh.
#
#   erase_relfiles SQLFN DATADIR   every segment file of the heap and of
#                                  the TOAST relation of esrc.events
#   erase_found SQLFN DATADIR MARKER
#                                  occurrences of MARKER in those files
#
# SQLFN is the name of a shell function that runs psql -At with its
# arguments (-c "...") against the database that holds the extension.

erase_relfiles() {
    local sqlfn=$1 datadir=$2 p
    for p in $("$sqlfn" -c "SELECT pg_relation_filepath('esrc.events')" \
                        -c "SELECT pg_relation_filepath(reltoastrelid) FROM pg_class
                            WHERE oid = 'esrc.events'::regclass"); do
        ls "$datadir/$p" "$datadir/$p".[0-9]* 2>/dev/null || true
    done
}

erase_found() {
    local f n=0 c
    for f in $(erase_relfiles "$1" "$2"); do
        c=$(grep -a -o -F -- "$3" "$f" | wc -l)
        n=$((n + c))
    done
    echo "$n"
}
