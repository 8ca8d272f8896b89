#!/usr/bin/env python3
"""Scan valgrind memcheck logs (one per server process) written by
test/valgrind.sh.  An error whose stack has a frame in esrc.so or in one of
esrc's source files is esrc's: any such error fails the run.  Other errors
are summarised by their top frames, with the suppression valgrind
generated for them, so that one can be added to pg15-debian.supp after a
review.  Exit status 1 when esrc has an error."""

import collections
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'src')
# every .c and .h of src/ and its subsystem folders, by file name
ESRC_FILES = {f for _, _, fs in os.walk(SRC) for f in fs if f.endswith(('.c', '.h'))}
LINE = re.compile(r'^==(\d+)== ?(.*)$')


def blocks(path):
    """The errors of one log as [message, frames, suppression] lists.  An
    error runs from its message to the next "==PID== " line with no text;
    the suppression valgrind generated (--gen-suppressions=all) follows it."""
    errors = []
    msg, frames = None, []
    supp = None
    with open(path, errors='replace') as f:
        for raw in f:
            raw = raw.rstrip('\n')
            if supp is not None:
                supp.append(raw)
                if raw == '}':
                    if errors:
                        errors[-1][2] = '\n'.join(supp)
                    supp = None
                continue
            if raw == '{':
                supp = [raw]
                continue
            m = LINE.match(raw)
            if not m:
                continue
            text = m.group(2).strip()
            if not text:
                if msg is not None:
                    errors.append([msg, frames, ''])
                msg, frames = None, []
            elif msg is None:
                msg = text
            else:
                frames.append(text)
    if msg is not None:
        errors.append([msg, frames, ''])
    return errors


def is_esrc(frames):
    """Does a frame lie in esrc.so or in one of esrc's source files?  The
    server runs with --fullpath-after=, so those show as .../src/log/append.c
    (a PostgreSQL file of the same name would be .../src/backend/...)."""
    for fr in frames:
        if 'esrc.so' in fr:
            return True
        m = re.search(r'\((?:.*/)?src/(?:[a-z]+/)?([^/():]+\.[ch]):\d+\)', fr)
        if m and m.group(1) in ESRC_FILES:
            return True
        m = re.search(r'\(([^/():]+\.[ch]):\d+\)', fr)
        if m and m.group(1) in ESRC_FILES and '(in /' not in fr:
            return True
    return False


def main(paths):
    total = 0
    esrc = []
    other = collections.Counter()
    example = {}
    for p in paths:
        for msg, frames, supp in blocks(p):
            total += 1
            if is_esrc(frames):
                esrc.append((p, msg, frames))
            else:
                key = (msg, tuple(re.sub(r'0x[0-9A-F]+: ', '', f) for f in frames[:4]))
                other[key] += 1
                example.setdefault(key, supp)
    print(f'valgrind: {len(paths)} process logs, {total} errors after suppressions, '
          f'{len(esrc)} with an esrc frame, {total - len(esrc)} in PostgreSQL itself')
    for key, n in other.most_common():
        print(f'  not esrc ({n}x): {key[0]}\n    ' + '\n    '.join(key[1]))
        print('    suppression:\n      ' + example[key].replace('\n', '\n      '))
    for p, msg, frames in esrc[:20]:
        print(f'ESRC ERROR in {os.path.basename(p)}: {msg}\n    ' + '\n    '.join(frames[:25]))
    return 1 if esrc else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
