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
ESRC_FILES = {f for f in os.listdir(SRC) if f.endswith(('.c', '.h'))} if os.path.isdir(SRC) else set()
LINE = re.compile(r'^==(\d+)== ?(.*)$')


def blocks(path):
    """Yield (message, frames, suppression) for each error in one log."""
    msg, frames, supp = None, [], []
    in_supp = False
    with open(path, errors='replace') as f:
        for raw in f:
            raw = raw.rstrip('\n')
            if in_supp:
                supp.append(raw)
                if raw == '}':
                    in_supp = False
                    yield msg, frames, '\n'.join(supp)
                    msg, frames, supp = None, [], []
                continue
            if raw == '{':
                in_supp = True
                supp = [raw]
                continue
            m = LINE.match(raw)
            if not m:
                continue
            text = m.group(2)
            if not text.strip():
                continue
            if text.lstrip().startswith(('at 0x', 'by 0x')):
                frames.append(text.strip())
            elif msg is None:
                msg = text.strip()
            else:
                frames.append(text.strip())


def is_esrc(frames):
    for fr in frames:
        if 'esrc.so' in fr:
            return True
        m = re.search(r'\(([^():]+\.[ch]):\d+\)', fr)
        if m and m.group(1) in ESRC_FILES and 'postgres' not in fr:
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
