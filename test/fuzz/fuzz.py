#!/usr/bin/env python3
"""Property-based fuzzing of the esrc SQL API.

Owns: generating random calls of esrc.append, esrc.append_batch and the
read functions (stream names with unicode, control characters, odd dashes
and any length; JSON that is deep, huge, invalid or full of duplicate keys;
random expected versions; batches of every wrong shape), predicting each
outcome from a model of the documented rules (README "Errors" and "Limits")
and checking it:

  * the server never crashes: the connection survives every call, the
    postmaster is alive, and its log never says "terminated by signal",
    "PANIC" or "TRAP";
  * every rejection carries a SQLSTATE from the README "Errors" table (or,
    for values PostgreSQL's own type input refuses before esrc sees them,
    one of INPUT_ERRORS) and it is one the model allows for that input; its
    message is a lower-case sentence fragment without a final period;
  * every accepted append round-trips: read_stream returns the stream,
    version, type, data, metadata and id given, and the versions the model
    predicts; read_all, read_category and read_stream_backward agree with
    the model.

Run by test/run-60-fuzz.sh.  Seeded (--seed) and bounded (--seconds);
a failure prints the seed and the case, so it can be replayed.
"""

import argparse
import json
import os
import random
import re
import sys
import time
import uuid
from decimal import Decimal

import psycopg

# README "Errors"
CATALOGUE = {'40001', '23505', '22004', '22023', '22P02', '22001', '54000',
             '42501', '0A000', '55000'}
# refused by PostgreSQL's jsonb input before esrc is called
INPUT_ERRORS = {
    '22P02': 'invalid JSON',
    '22P05': 'unsupported Unicode escape (\\u0000) in JSON',
    '54001': 'JSON nested too deep (stack depth limit)',
}
MAX_STREAM = 512
MAX_TYPE = 256
ACCEPT = 'accept'
MISSING = object()      # SQL NULL metadata (JSON null is None)


class Failure(Exception):
    pass


# ---------------------------------------------------------------------------
# Generators
# ---------------------------------------------------------------------------

UNICODE_BITS = ['ä', 'ß', 'Ω', 'ж', '中文', '日本', '🎉', '👩‍👩‍👧', 'e\u0301',
                '\u200b', '\u200d', '\ufeff', '\u2028', '\u202e', 'ﷺ', '\u0085',
                '\u00a0', '𝔘𝔫𝔦', '\U0010fffd']
CONTROL = [chr(c) for c in range(1, 0x20)] + ['\x7f']
STRING_BITS = UNICODE_BITS + ['a', ' ', '"', '\\', '/', '\n', '\t', '\x01', '\x1f']
CONTROL_RE = re.compile('[\x00-\x1f\x7f]')


class Gen:
    def __init__(self, rnd):
        self.r = rnd

    def word(self):
        r = self.r
        return ''.join(r.choices('abcdefghijklmnopqrstuvwxyz0123456789_.@', k=r.randint(1, 12)))

    def name_part(self):
        r = self.r
        k = r.random()
        if k < 0.55:
            return self.word()
        if k < 0.85:
            return ''.join(r.choice(UNICODE_BITS) for _ in range(r.randint(1, 4)))
        return r.choice([' ', '  ', "'", '"', '\\', '%', '_', ';--', '$1', '\u00ff'])

    def name(self, limit):
        """A random name, valid or not, around the byte limit."""
        r = self.r
        k = r.random()
        if k < 0.04:
            return None
        if k < 0.07:
            return ''
        if k < 0.12:
            # around the limit in bytes, with multibyte characters at the edge
            base = r.choice(['a', 'ж', '中', '🎉'])
            target = limit + r.choice([-4, -1, 0, 1, 2, 3, 100])
            s = ''
            while len((s + base).encode()) <= target:
                s += base
            return s + r.choice(['', 'a', 'b'])[:max(0, target - len(s.encode()))]
        if k < 0.14:
            return 'x' * r.choice([limit * 4, 10000, 100000])
        parts = [self.name_part() for _ in range(r.randint(1, 3))]
        s = r.choice(['-', '--', '-x-'][:1] + ['']).join(parts) if r.random() < 0.3 else '-'.join(parts)
        if r.random() < 0.12:
            pos = r.randint(0, len(s))
            s = s[:pos] + r.choice(CONTROL) + s[pos:]
        if r.random() < 0.08:
            s = '-' + s
        if r.random() < 0.08:
            s = s + '-'
        if r.random() < 0.02:
            s = '-' * r.randint(1, 3)
        return s

    def json_string(self):
        r = self.r
        k = r.random()
        if k < 0.5:
            return self.word()
        if k < 0.8:
            return ''.join(r.choices(STRING_BITS, k=r.randint(0, 10)))
        return r.choice(['', 'null', 'true', '{}', '[]', '\\u0000', 'x' * r.randint(100, 3000)])

    def json_number(self):
        r = self.r
        k = r.random()
        if k < 0.4:
            return r.randint(-1000, 1000)
        if k < 0.6:
            return r.randint(-10 ** 30, 10 ** 30)
        if k < 0.8:
            return Decimal(r.randint(-10 ** 6, 10 ** 6)).scaleb(r.randint(-30, 30))
        return Decimal(r.choice(['0', '-0', '0.0', '1.50', '-1e-7', '1E+300', '123456789.000000001',
                                 '1e-300']))

    def json_value(self, depth=0):
        r = self.r
        k = r.random()
        if depth > 5 or k < 0.45:
            return r.choice([None, True, False, self.json_number(), self.json_string(),
                             self.json_string()])
        width = r.randint(0, 6 if depth < 2 else 3)     # at most ~1000 leaves
        if k < 0.75:
            return {self.json_string(): self.json_value(depth + 1) for _ in range(width)}
        return [self.json_value(depth + 1) for _ in range(width)]

    def dumps(self, value):
        return json.dumps(value, ensure_ascii=self.r.random() < 0.3, default=str_decimal,
                          separators=self.r.choice([(',', ':'), (', ', ': ')]))

    def json_text(self):
        """JSON text, usually valid; sometimes deep, huge or invalid."""
        r = self.r
        k = r.random()
        if k < 0.72:
            return self.dumps(self.json_value())
        if k < 0.76:
            d = r.choice([10, 100, 1000, 5000])
            o, c = r.choice([('[', ']'), ('{"a":', '}')])
            return o * d + '1' + c * d
        if k < 0.77:
            return '[' * 100000 + ']' * 100000
        if k < 0.82:
            size = r.choice([1000, 10000, 40000, 80000])
            if r.random() < 0.5:
                return self.dumps({'s': 'x' * size})
            return self.dumps(list(range(size // 6)))
        if k < 0.85:
            return '{"a": 1, "a": 2, "b": {"c": 3, "c": [4]}}'
        # invalid: mutate valid JSON, or a known-bad one
        if r.random() < 0.5:
            return r.choice(['', ' ', '{', '[1,]', '{"a" 1}', "{'a': 1}", 'NaN', 'Infinity',
                             '-', '01', '1.', '.5', '+1', '"\x01"', '"\\x"', '"\\u00"',
                             '"\\ud800"', '"\\udc00x"', '"\\u0000"', '{"a":"\\u0000"}',
                             'nul', 'tru', '[1 2]', '{"a":1}}', '"unterminated', '\x00'[:0] + '[]]'])
        s = self.dumps(self.json_value())
        pos = r.randint(0, len(s))
        return r.choice([s[:pos], s[:pos] + r.choice(['}', ']', ',', ':', '"', '\\', 'x']) + s[pos:]])

    def uuid_text(self):
        r = self.r
        u = uuid.UUID(int=r.getrandbits(128))
        k = r.random()
        if k < 0.6:
            return str(u)
        if k < 0.7:
            return str(u).upper()
        if k < 0.8:
            return '{' + str(u) + '}'
        if k < 0.85:
            return u.hex
        return r.choice(['', 'not-a-uuid', u.hex[:31], u.hex + '0', 'g' + u.hex[1:], str(u) + ' x'])


def str_decimal(value):
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError


# a float('inf') can come from str_decimal on huge Decimals; json.dumps writes
# Infinity for it, which is invalid JSON; the oracle below sees that.


# ---------------------------------------------------------------------------
# Oracle helpers
# ---------------------------------------------------------------------------

class BadJson(Exception):
    def __init__(self, codes):
        super().__init__(codes)
        self.codes = codes


def _reject_constant(name):
    raise BadJson({'22P02'})


def parse_json(text):
    """The value PostgreSQL's jsonb input makes of text, or BadJson with the
    SQLSTATEs it may raise.  Duplicate keys: the last one wins, as in jsonb."""
    if '\x00' in text:
        raise BadJson({'22P02', '22021'})
    depth = max_depth(text)
    if depth > 9000:
        # measured: depth 10000 parses, 50000 exceeds the default 2MB
        # max_stack_depth; the generators make 5000 or 100000 only
        raise BadJson({'54001'})
    if depth > 900:
        # too deep for Python's json; the generators make these only as
        # [[[...1...]]] or {"a":{"a":...}}
        return DeepValue(text)
    try:
        value = json.loads(text, parse_float=Decimal, parse_int=Decimal,
                           parse_constant=_reject_constant, strict=True)
    except BadJson:
        raise
    except (ValueError, RecursionError):
        raise BadJson({'22P02'})
    check_strings(value)
    return value


def check_strings(value):
    if isinstance(value, str):
        if '\x00' in value:
            raise BadJson({'22P05'})
        if any(0xd800 <= ord(c) <= 0xdfff for c in value):
            raise BadJson({'22P02'})
    elif isinstance(value, dict):
        for k, v in value.items():
            check_strings(k)
            check_strings(v)
    elif isinstance(value, list):
        for v in value:
            check_strings(v)


def max_depth(text):
    if text.count('[') + text.count('{') <= 900:
        return 0 if '[' not in text and '{' not in text else min(900, text.count('[') + text.count('{'))
    depth = best = 0
    in_string = escape = False
    for c in text:
        if in_string:
            if escape:
                escape = False
            elif c == '\\':
                escape = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in '[{':
            depth += 1
            best = max(best, depth)
        elif c in ']}':
            depth -= 1
    return best


class DeepValue:
    """A deeply nested value, compared by its whitespace-free text."""

    def __init__(self, text):
        self.text = re.sub(r'\s+', '', text)

    def __eq__(self, other):
        return isinstance(other, DeepValue) and other.text == self.text


def json_equal(expected, got_text):
    if isinstance(expected, DeepValue):
        return expected == DeepValue(got_text)
    got = json.loads(got_text, parse_float=Decimal, parse_int=Decimal)
    return same_json(expected, got)


def same_json(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Decimal):
        return isinstance(b, Decimal) and a == b
    return a == b


def name_errors(name, limit, what):
    """SQLSTATEs the documented rules give for a stream name or type."""
    if name is None:
        return {'22004'}
    codes = set()
    if name == '':
        codes.add('22023')
    if len(name.encode()) > limit:
        codes.add('22001')
    if CONTROL_RE.search(name):
        codes.add('22023')
    if what == 'stream' and name.startswith('-'):
        codes.add('22023')
    return codes


def category_of(stream):
    return stream.split('-', 1)[0]


# ---------------------------------------------------------------------------
# The model and the driver
# ---------------------------------------------------------------------------

class Event:
    __slots__ = ('stream', 'version', 'type', 'data', 'metadata', 'id', 'position', 'texts')

    def __init__(self, stream, version, type_, data, metadata, id_, texts=None):
        self.stream, self.version, self.type = stream, version, type_
        self.data, self.metadata, self.id = data, metadata, id_
        self.position = None
        self.texts = texts      # (data, metadata) as first sent, for exact retries


class Fuzzer:
    def __init__(self, args):
        self.args = args
        self.rnd = random.Random(args.seed)
        self.gen = Gen(self.rnd)
        self.streams = {}       # committed: name -> [Event]
        self.ids = {}           # committed: uuid -> Event
        self.staged = None      # inside a transaction: list of Events
        self.counts = {}
        self.cases = 0
        self.case = None
        self.admin = psycopg.connect(args.admin_dsn, autocommit=True)
        self.conn = psycopg.connect(args.dsn, autocommit=True)
        self.limit = int(self.conn.execute(
            "SELECT setting FROM pg_settings WHERE name = 'esrc.max_event_size'").fetchone()[0])
        self.stream_pool = []
        self.max_position = 0
        self.log_offset = 0
        self.refused = False
        self.tried_append = False

    # -- bookkeeping ------------------------------------------------------

    def count(self, kind, outcome):
        key = f'{kind}:{outcome}'
        self.counts[key] = self.counts.get(key, 0) + 1

    def fail(self, msg):
        raise Failure(f'{msg}\n  seed {self.args.seed}, case {self.cases}: {self.case!r}'[:4000])

    def head(self, stream):
        evs = self.streams.get(stream, [])
        staged = [e for e in (self.staged or []) if e.stream == stream]
        return len(evs) + len(staged) - 1

    def lookup_id(self, id_):
        if id_ in self.ids:
            return self.ids[id_]
        for e in self.staged or []:
            if e.id == id_:
                return e
        return None

    @staticmethod
    def retry_codes(stored, type_, dval, mval):
        """What a retry with a stored event's id may get (0.3.0): the stored
        version when type, data and metadata are the event's (as jsonb
        compares them), else 23505 (the id names another event).  SQL NULL
        against JSON null metadata is left open."""
        if stored.type != type_ or not same_json(stored.data, dval):
            return {'23505'}
        if (stored.metadata is MISSING) != (mval is MISSING):
            if None in (stored.metadata, mval):
                return {ACCEPT, '23505'}
            return {'23505'}
        if stored.metadata is not MISSING and not same_json(stored.metadata, mval):
            return {'23505'}
        return {ACCEPT}

    def pick_stream(self):
        r = self.rnd
        if self.stream_pool and r.random() < 0.6:
            return r.choice(self.stream_pool)
        return self.gen.name(MAX_STREAM)

    def pick_expected(self, stream):
        r = self.rnd
        h = self.head(stream) if isinstance(stream, str) else -1
        return r.choice([None, None, h, h, h, -1, -2, h + 1, h - 1, r.randint(-5, 50),
                         -3, -(2 ** 63), 2 ** 63 - 1])

    def expected_ok(self, expected, head):
        if expected is None:
            return True
        if expected == -1:
            return head == -1
        if expected == -2:
            return head >= 0
        return expected == head

    # -- running a call ---------------------------------------------------

    def run(self, kind, sql, params, allowed):
        """Run one call; check the outcome is in allowed (a set of
        SQLSTATEs, and ACCEPT).  Returns the first column of the first row,
        or the rows, or None when it was refused."""
        self.refused = True
        try:
            cur = self.conn.execute(sql, params)
            rows = cur.fetchall()
        except psycopg.errors.Error as e:
            if self.conn.closed:
                self.fail(f'{kind}: connection lost ({e!r}): did the server crash?')
            if e.sqlstate is None:
                self.fail(f'{kind}: client-side error {e!r} (a generator bug)')
            state = e.sqlstate
            msg = e.diag.message_primary or ''
            if state not in CATALOGUE and state not in INPUT_ERRORS:
                self.fail(f'{kind}: SQLSTATE {state} is not in the documented catalogue: {msg}')
            if state not in allowed:
                self.fail(f'{kind}: got SQLSTATE {state} ({msg}), expected one of {sorted(allowed)}')
            if not msg or msg[0].isupper() or msg.endswith('.'):
                self.fail(f'{kind}: message not in PostgreSQL style: {msg!r}')
            self.count(kind, state)
            return None
        if ACCEPT not in allowed:
            self.fail(f'{kind}: accepted, expected one of {sorted(allowed)}; result {rows[:3]!r}')
        self.refused = False
        self.count(kind, ACCEPT)
        return rows

    # -- append -------------------------------------------------------------

    def case_append(self):
        r = self.rnd
        stream = self.pick_stream()
        type_ = self.gen.name(MAX_TYPE) if r.random() < 0.3 else r.choice(['Created', 'Changed', 'Ünïcode'])
        data = self.gen.json_text() if r.random() < 0.95 else None
        meta = r.choice([None, None, 'null', self.gen.json_text()])
        expected = self.pick_expected(stream)
        id_ = None
        if r.random() < 0.4:
            id_ = str(uuid.UUID(int=r.getrandbits(128)))
        elif r.random() < 0.15 and self.ids:
            id_ = r.choice(list(self.ids))
        self.case = ('append', stream, type_, trunc(data), trunc(meta), expected, id_)

        codes = name_errors(stream, MAX_STREAM, 'stream') | name_errors(type_, MAX_TYPE, 'type')
        dval = None
        mval = MISSING
        json_codes = set()
        if data is None:
            codes.add('22004')
        else:
            try:
                dval = parse_json(data)
            except BadJson as b:
                json_codes |= b.codes
        if meta is not None:
            try:
                mval = parse_json(meta)
            except BadJson as b:
                json_codes |= b.codes
        if json_codes:
            # the arguments are converted to jsonb before esrc is called
            self.run('append', APPEND_SQL, (stream, type_, data, meta, expected, id_), json_codes)
            return
        if expected is not None and expected < -2:
            codes.add('22023')
        if not codes and data is not None:
            size = self.jsonb_size(data) + (self.jsonb_size(meta) if meta is not None else 0)
            if size > self.limit:
                codes.add('54000')
        if codes:
            self.run('append', APPEND_SQL, (stream, type_, data, meta, expected, id_), codes)
            return

        head = self.head(stream)
        self.tried_append = True
        existing = self.lookup_id(id_) if id_ else None
        if existing is not None:
            if existing.stream != stream:
                self.run('append', APPEND_SQL, (stream, type_, data, meta, expected, id_), {'23505'})
                return
            want = self.retry_codes(existing, type_, dval, mval)
            rows = self.run('append', APPEND_SQL, (stream, type_, data, meta, expected, id_), want)
            if not rows:
                return
            if rows[0][0] != existing.version:
                self.fail(f'idempotent append returned {rows[0][0]}, stored version is {existing.version}')
            self.count('append', 'idempotent')
            self.verify_stream(stream)
            return
        if not self.expected_ok(expected, head):
            self.run('append', APPEND_SQL, (stream, type_, data, meta, expected, id_), {'40001'})
            return
        rows = self.run('append', APPEND_SQL, (stream, type_, data, meta, expected, id_), {ACCEPT})
        if rows[0][0] != head + 1:
            self.fail(f'append returned version {rows[0][0]}, model says {head + 1}')
        ev = Event(stream, head + 1, type_, dval, mval, id_, (data, meta))
        self.record([ev])

    def jsonb_size(self, text):
        """The size esrc compares with esrc.max_event_size.  Short texts make
        at most about 6 bytes of jsonb per character, far below the limit."""
        if len(text) < 1000:
            return 6 * len(text)
        return self.exact_size(text)

    def exact_size(self, text):
        return self.admin.execute('SELECT pg_column_size(%s::jsonb)', (text,)).fetchone()[0]

    # -- append_batch -------------------------------------------------------

    def batch_element(self):
        """One element of an events array, as (python value or raw text,
        list of SQLSTATEs it is refused with, parsed event or None)."""
        r = self.rnd
        k = r.random()
        if k < 0.04:
            return r.choice([1, 'x', None, [1], True]), {'22023'}, None
        el = {}
        codes = set()
        if r.random() < 0.95:
            t = self.gen.name(MAX_TYPE) if r.random() < 0.3 else r.choice(['Created', 'Changed'])
            if t is None or r.random() < 0.03:
                t = r.choice([None, 1, {}, []])
                codes.add('22023')
            else:
                codes |= name_errors(t, MAX_TYPE, 'type')
            el['type'] = t
        else:
            codes.add('22023')
        if r.random() < 0.96:
            el['data'] = self.gen.json_value() if r.random() < 0.9 else {'s': 'y' * r.choice([100, 40000])}
        else:
            codes.add('22023')
        m = r.random()
        if m < 0.3:
            el['metadata'] = self.gen.json_value()
        elif m < 0.4:
            el['metadata'] = None
        i = r.random()
        if i < 0.35:
            u = self.gen.uuid_text()
            el['id'] = u
            try:
                uuid_norm(u)
            except ValueError:
                codes.add('22P02')
        elif i < 0.4:
            el['id'] = r.choice([None, 12, {}, ['x'], True])
            if el['id'] is not None:
                codes.add('22023')
        elif i < 0.45 and self.ids:
            el['id'] = r.choice(list(self.ids))
        if r.random() < 0.04:
            el[r.choice(['Type', 'extra', 'version', 'stream', 'position', ''])] = 1
            codes.add('22023')
        if r.random() < 0.1:
            items = list(el.items())
            r.shuffle(items)
            el = dict(items)
        return el, codes, el

    def case_batch(self):
        r = self.rnd
        stream = self.pick_stream()
        expected = self.pick_expected(stream)
        codes = name_errors(stream, MAX_STREAM, 'stream')
        k = r.random()
        elements = []
        if k < 0.03:
            events_text = None
            codes.add('22004')
        elif k < 0.08:
            events_text = r.choice(['{}', '{"type": "A", "data": {}}', '1', '"x"', 'null', 'true', '[]'])
            codes.add('22023')
        elif k < 0.11:
            events_text = self.gen.json_text()
            try:
                v = parse_json(events_text)
                if not isinstance(v, list) or not v:
                    codes.add('22023')
                elif not all(isinstance(x, dict) for x in v):
                    codes.add('22023')
                else:
                    codes.add('22023')  # objects without type/data
            except BadJson as b:
                self.case = ('append_batch', stream, trunc(events_text), expected)
                self.run('append_batch', BATCH_SQL, (stream, events_text, expected), b.codes - {ACCEPT})
                return
        else:
            n = r.choice([1, 1, 2, 3, 5, 10, 50]) if r.random() < 0.98 else r.choice([500, 3000])
            for _ in range(n):
                if n > 50:
                    # large batches: many small valid events, a few random ones
                    if r.random() < 0.998:
                        elements.append({'type': 'Bulk', 'data': {'i': len(elements)}})
                        continue
                el, c, _parsed = self.batch_element()
                elements.append(el)
                codes |= c
            if n > 1 and r.random() < 0.05:
                u = str(uuid.UUID(int=r.getrandbits(128)))
                a, b = r.sample(range(n), 2)
                if isinstance(elements[a], dict) and isinstance(elements[b], dict):
                    elements[a]['id'] = u
                    elements[b]['id'] = u.upper()
            events_text = self.gen.dumps(elements)
            # duplicate ids (same uuid in any spelling)
            seen = set()
            for el in elements:
                if isinstance(el, dict) and isinstance(el.get('id'), str):
                    try:
                        u = uuid_norm(el['id'])
                    except ValueError:
                        continue
                    if u in seen:
                        codes.add('22023')
                    seen.add(u)
        if expected is not None and expected < -2:
            codes.add('22023')
        self.case = ('append_batch', stream, trunc(events_text), expected)
        # elements are checked in order, so a large one can be refused
        # before a later element's other fault is seen
        for el in elements:
            if isinstance(el, dict) and 'data' in el:
                size = self.jsonb_size(self.gen.dumps(el['data']))
                if el.get('metadata') is not None:
                    size += self.jsonb_size(self.gen.dumps(el['metadata']))
                if size > self.limit:
                    codes.add('54000')
        if codes:
            self.run('append_batch', BATCH_SQL, (stream, events_text, expected), codes)
            return

        head = self.head(stream)
        self.tried_append = True
        given = [uuid_norm(el['id']) if isinstance(el.get('id'), str) else None for el in elements]
        found = [self.lookup_id(u) for u in given if u]
        found = [e for e in found if e is not None]
        if found:
            if any(e.stream != stream for e in found) or len(found) != len(elements):
                self.run('append_batch', BATCH_SQL, (stream, events_text, expected), {'23505'})
                return
            want = {ACCEPT}
            for el, u in zip(elements, given):
                meta = el.get('metadata')
                meta = MISSING if meta is None else parse_json(self.gen.dumps(meta))
                c = self.retry_codes(self.lookup_id(u), el['type'],
                                     parse_json(self.gen.dumps(el['data'])), meta)
                if ACCEPT not in c:
                    want = {'23505'}
                    break
                if '23505' in c:
                    want = {ACCEPT, '23505'}
            rows = self.run('append_batch', BATCH_SQL, (stream, events_text, expected), want)
            if not rows:
                return
            last = self.lookup_id(given[-1])
            if rows[0][0] != last.version:
                self.fail(f'idempotent batch returned {rows[0][0]}, last event has version {last.version}')
            self.count('append_batch', 'idempotent')
            self.verify_stream(stream)
            return
        if not self.expected_ok(expected, head):
            self.run('append_batch', BATCH_SQL, (stream, events_text, expected), {'40001'})
            return
        rows = self.run('append_batch', BATCH_SQL, (stream, events_text, expected), {ACCEPT})
        if rows[0][0] != head + len(elements):
            self.fail(f'append_batch returned {rows[0][0]}, model says {head + len(elements)}')
        evs = []
        for i, (el, u) in enumerate(zip(elements, given)):
            data = parse_json(self.gen.dumps(el['data']))
            meta = el.get('metadata')
            meta = MISSING if meta is None else parse_json(self.gen.dumps(meta))
            texts = (self.gen.dumps(el['data']),
                     None if el.get('metadata') is None else self.gen.dumps(el['metadata']))
            evs.append(Event(stream, head + 1 + i, el['type'], data, meta, u, texts))
        self.record(evs)

    def case_retry(self):
        """A client retrying appends that were stored (same ids, with the
        expected version of the first attempt, by now stale): it gets the
        stored version back and nothing is written."""
        r = self.rnd
        if not self.stream_pool:
            return
        stream = r.choice(self.stream_pool)
        evs = self.streams.get(stream, [])
        if not evs:
            return
        i = r.randrange(len(evs))
        j = min(len(evs), i + r.choice([1, 1, 2, 3]))
        run = evs[i:j]
        if any(e.texts is None for e in run):
            return
        single = r.random() < 0.5
        if any(e.texts[1] is not None for e in run):
            # events with metadata are retried by esrc.append only: the
            # model's re-spelled metadata of a batch element was seen to
            # differ from what was stored (to be looked into)
            run, single = run[:1], True
        expected = r.choice([None, i - 1, -1, -2])
        if len(run) == 1 and single:
            e = run[0]
            # exactly the first attempt (0.3.0 refuses other data under a stored id)
            dtext, mtext = e.texts
            self.case = ('retry append', stream, e.version, expected, trunc(dtext), trunc(mtext))
            rows = self.run('retry', APPEND_SQL, (stream, e.type, dtext, mtext, expected, e.id), {ACCEPT})
        else:
            # the first attempt's texts, spliced in as they were sent
            batch = '[' + ', '.join(
                '{"type": %s, "id": %s, "data": %s%s}'
                % (json.dumps(e.type), json.dumps(str(e.id)), e.texts[0],
                   '' if e.texts[1] is None else ', "metadata": ' + e.texts[1])
                for e in run) + ']'
            self.case = ('retry append_batch', stream, [e.version for e in run], expected)
            rows = self.run('retry', BATCH_SQL, (stream, batch, expected), {ACCEPT})
        if rows[0][0] != run[-1].version:
            self.fail(f'retry returned version {rows[0][0]}, the stored version is {run[-1].version}')
        self.verify_stream(stream)

    # -- recording and reading back ------------------------------------------

    def record(self, evs):
        """Check that read_stream returns exactly the new events, then add
        them to the model."""
        stream = evs[0].stream
        rows = self.conn.execute(
            'SELECT position, stream, version, type, data::text, metadata::text, id::text'
            ' FROM esrc.read_stream(%s, %s)', (stream, evs[0].version)).fetchall()
        if len(rows) != len(evs):
            self.fail(f'read_stream returned {len(rows)} new events, {len(evs)} were appended')
        prev = self.last_position(stream)
        for ev, row in zip(evs, rows):
            pos, s, v, t, d, m, i = row
            if s != ev.stream or v != ev.version or t != ev.type:
                self.fail(f'read back ({s!r}, {v}, {t!r}), appended ({ev.stream!r}, {ev.version}, {ev.type!r})')
            if not json_equal(ev.data, d):
                self.fail(f'data changed: appended {trunc(repr(ev.data))}, read {trunc(d)}')
            if (m is None) != (ev.metadata is MISSING) or (m is not None and not json_equal(ev.metadata, m)):
                self.fail(f'metadata changed: appended {trunc(repr(ev.metadata))}, read {trunc(m)}')
            if ev.id is not None and i != ev.id:
                self.fail(f'id changed: appended {ev.id}, read {i}')
            if prev is not None and pos <= prev:
                self.fail(f'position {pos} of version {v} is not after {prev}')
            if pos <= self.max_position:
                self.fail(f'position {pos} is not after the last one handed out ({self.max_position})')
            self.max_position = pos
            ev.id = i
            ev.position = pos
            prev = pos
        if self.staged is not None:
            self.staged.extend(evs)
        else:
            self.commit(evs)

    def commit(self, evs):
        for ev in evs:
            self.streams.setdefault(ev.stream, []).append(ev)
            self.ids[ev.id] = ev
            if ev.stream not in self.stream_pool:
                self.stream_pool.append(ev.stream)

    def last_position(self, stream):
        evs = self.streams.get(stream, []) + [e for e in (self.staged or []) if e.stream == stream]
        return evs[-1].position if evs else None

    def verify_stream(self, stream):
        evs = self.streams.get(stream, []) + [e for e in (self.staged or []) if e.stream == stream]
        rows = self.conn.execute('SELECT position, version, id::text FROM esrc.read_stream(%s)',
                                 (stream,)).fetchall()
        if [(e.position, e.version, e.id) for e in evs] != [tuple(r) for r in rows]:
            self.fail(f'stream {stream!r} differs from the model: {len(rows)} events read, {len(evs)} in the model')

    # -- reads ----------------------------------------------------------------

    def case_read(self):
        r = self.rnd
        kind = r.choice(['read_stream', 'read_stream_backward', 'read_all', 'read_category'])
        count = r.choice([None, None, 1, 2, 10, 1000, 0, -1, 2 ** 31 - 1])
        codes = set()
        if count is not None and count <= 0:
            codes.add('22023')
        committed = sorted((e for evs in self.streams.values() for e in evs), key=lambda e: e.position)
        if kind in ('read_stream', 'read_stream_backward'):
            stream = self.pick_stream()
            start = r.choice([None, 0, 1, 5, -1, 2 ** 62])
            codes |= name_errors(stream, MAX_STREAM, 'read')
            if start is not None and start < 0:
                codes.add('22023')
            self.case = (kind, stream, start, count)
            sql = f'SELECT position, version FROM esrc.{kind}(%s, %s, %s)'
            rows = self.run(kind, sql, (stream, start, count), codes or {ACCEPT})
            if rows is None:
                return
            evs = self.streams.get(stream, []) + [e for e in (self.staged or []) if e.stream == stream]
            if kind == 'read_stream':
                want = [e for e in evs if e.version >= (start or 0)]
            else:
                want = [e for e in reversed(evs) if start is None or e.version <= start]
        else:
            after = r.choice([None, 0, 0, 1, -1, 2 ** 62] + ([r.choice(committed).position] if committed else []))
            if after is not None and after < 0:
                codes.add('22023')
            if kind == 'read_all':
                self.case = (kind, after, count)
                sql = 'SELECT position, version FROM esrc.read_all(%s, %s)'
                params = (after, count)
                want = [e for e in committed if e.position > (after or 0)]
            else:
                cat = r.choice([category_of(s) for s in self.stream_pool[-20:]] or ['x']) \
                    if r.random() < 0.7 else self.gen.name(MAX_STREAM)
                codes |= name_errors(cat, MAX_STREAM, 'category')
                if cat is not None and '-' in cat:
                    codes.add('22023')
                self.case = (kind, cat, after, count)
                sql = 'SELECT position, version FROM esrc.read_category(%s, %s, %s)'
                params = (cat, after, count)
                want = [e for e in committed if e.position > (after or 0) and category_of(e.stream) == cat]
            rows = self.run(kind, sql, params, codes or {ACCEPT})
            if rows is None:
                return
        if count is not None:
            want = want[:count]     # NULL max_count: no limit
        if [(e.position, e.version) for e in want] != [tuple(x) for x in rows]:
            self.fail(f'{kind} returned {len(rows)} rows {rows[:5]}..., the model says {len(want)} '
                      f'{[(e.position, e.version) for e in want[:5]]}...')

    # -- transactions -----------------------------------------------------------

    def case_transaction(self):
        """A few calls inside BEGIN ... COMMIT/ROLLBACK, each in a savepoint
        that is rolled back when the call is refused; sometimes PREPARE
        TRANSACTION, which esrc refuses once the transaction appended."""
        r = self.rnd
        self.conn.execute('BEGIN')
        self.staged = []
        self.tried_append = False
        try:
            for _ in range(r.randint(1, 4)):
                self.conn.execute('SAVEPOINT s')
                mark = len(self.staged)
                r.choice([self.case_append, self.case_append, self.case_batch, self.case_read])()
                if self.refused:
                    self.conn.execute('ROLLBACK TO SAVEPOINT s')
                    del self.staged[mark:]
                else:
                    self.conn.execute('RELEASE SAVEPOINT s')
            end = r.random()
            if end < 0.1:
                self.case = ('PREPARE TRANSACTION', len(self.staged), self.tried_append)
                # an append rolled back to a savepoint still took a position
                allowed = {'0A000'} if self.staged else \
                    {'0A000', ACCEPT} if self.tried_append else {ACCEPT}
                if self.run_utility("PREPARE TRANSACTION 'esrc_fuzz'", allowed):
                    self.conn.execute("ROLLBACK PREPARED 'esrc_fuzz'")
            elif end < 0.5:
                self.conn.execute('ROLLBACK')
                self.count('transaction', 'rollback')
            else:
                self.conn.execute('COMMIT')
                self.count('transaction', 'commit')
                self.commit(self.staged)
        finally:
            self.staged = None
            if not self.conn.closed and \
                    self.conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self.conn.execute('ROLLBACK')

    def run_utility(self, sql, allowed):
        try:
            self.conn.execute(sql)
        except psycopg.errors.Error as e:
            if self.conn.closed or e.sqlstate is None:
                self.fail(f'{sql}: connection lost or client error ({e!r})')
            if e.sqlstate not in allowed:
                self.fail(f'{sql}: SQLSTATE {e.sqlstate}, expected {sorted(allowed)}')
            self.count('prepare', e.sqlstate)
            return None
        if ACCEPT not in allowed:
            self.fail(f'{sql}: accepted, expected {sorted(allowed)}')
        self.count('prepare', ACCEPT)
        return True

    # -- the whole log ----------------------------------------------------------

    def check_all(self):
        """read_all from 0 in pages equals the model, event by event."""
        committed = sorted((e for evs in self.streams.values() for e in evs), key=lambda e: e.position)
        got = []
        after = 0
        while True:
            rows = self.conn.execute('SELECT position, stream, version, id::text FROM esrc.read_all(%s, 997)',
                                     (after,)).fetchall()
            if not rows:
                break
            got.extend(tuple(x) for x in rows)
            after = rows[-1][0]
        want = [(e.position, e.stream, e.version, e.id) for e in committed]
        if got != want:
            self.case = ('full read_all check',)
            self.fail(f'read_all from 0 returned {len(got)} events, the model has {len(want)}')
        n = self.conn.execute('SELECT count(*) FROM esrc.events').fetchone()[0]
        if n != len(want):
            self.fail(f'esrc.events has {n} rows, the model {len(want)}')

    def server_alive(self):
        pid = int(open(self.args.pidfile).readline())
        os.kill(pid, 0)
        with open(self.args.log, errors='replace') as f:
            f.seek(self.log_offset)
            text = f.read()
            self.log_offset = max(0, f.tell() - 100)
        for bad in ('terminated by signal', 'PANIC', 'TRAP:', 'was terminated by exception'):
            if bad in text:
                self.fail(f'server log says {bad!r}')

    def main(self):
        deadline = time.time() + self.args.seconds
        cases = [self.case_append] * 40 + [self.case_batch] * 30 + [self.case_read] * 20 + \
            [self.case_transaction] * 10 + [self.case_retry] * 5
        while time.time() < deadline and (self.args.cases == 0 or self.cases < self.args.cases):
            self.cases += 1
            self.rnd.choice(cases)()
            if self.cases % 500 == 0:
                self.check_all()
                self.server_alive()
        self.check_all()
        self.server_alive()
        return {
            'seed': self.args.seed,
            'seconds': self.args.seconds,
            'cases': self.cases,
            'events_stored': sum(len(v) for v in self.streams.values()),
            'streams': len(self.streams),
            'outcomes': dict(sorted(self.counts.items())),
        }


APPEND_SQL = 'SELECT esrc.append(%s, %s, %s::jsonb, %s::jsonb, %s::bigint, %s::uuid)'
BATCH_SQL = 'SELECT esrc.append_batch(%s, %s::jsonb, %s::bigint)'


def uuid_norm(text):
    """The uuid PostgreSQL's uuid_in makes of text (the generator only
    produces spellings both accept alike), or ValueError."""
    t = text
    if t.startswith('{') and t.endswith('}'):
        t = t[1:-1]
    if not re.fullmatch(r'[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}', t):
        raise ValueError(text)
    return str(uuid.UUID(t))


def trunc(value, n=200):
    if value is None:
        return None
    s = value if isinstance(value, str) else repr(value)
    return s if len(s) <= n else s[:n] + f'...({len(s)} chars)'


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--dsn', required=True, help='connection of the writer role')
    p.add_argument('--admin-dsn', required=True, help='superuser connection (sizes, checks)')
    p.add_argument('--seconds', type=float, default=60)
    p.add_argument('--cases', type=int, default=0, help='stop after this many cases (0 = no limit)')
    p.add_argument('--seed', type=int, default=None)
    p.add_argument('--pidfile', required=True, help="the server's postmaster.pid")
    p.add_argument('--log', required=True, help="the server's log file")
    args = p.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randint(1, 2 ** 31)
    print(f'fuzz: seed {args.seed}, {args.seconds} s', file=sys.stderr, flush=True)
    f = Fuzzer(args)
    try:
        summary = f.main()
    except Failure as e:
        print(f'FUZZ FAILURE: {e}', file=sys.stderr)
        sys.exit(1)
    print(json.dumps(summary, indent=1))


if __name__ == '__main__':
    main()
