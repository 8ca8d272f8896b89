-- esrc.set_stream_rules(stream, truncate_before, max_count, max_age, reason)
-- hides events from every read function: truncate_before T hides versions
-- below T, max_count N all but the last N versions, max_age A every version
-- up to the last one recorded before statement_timestamp() - A.  The
-- visible versions keep their numbers and have no hole; a null argument
-- means no such rule; each call replaces the stream's rules and is
-- recorded in esrc.erasures.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
SELECT count(*) FROM (SELECT esrc.append('rules-' || s, 'E', jsonb_build_object('i', g))
                      FROM generate_series(1, 3) s, generate_series(0, 9) g) a;
CREATE OR REPLACE FUNCTION versions(s text) RETURNS text LANGUAGE sql AS
    $$SELECT coalesce(string_agg(version::text, ','), '') FROM esrc.read_stream(s)$$;
CREATE OR REPLACE FUNCTION backward(s text) RETURNS text LANGUAGE sql AS
    $$SELECT coalesce(string_agg(version::text, ','), '') FROM esrc.read_stream_backward(s)$$;
CREATE OR REPLACE FUNCTION category(c text) RETURNS text LANGUAGE sql AS
    $$SELECT coalesce(string_agg(substr(stream, 7) || ':' || version, ','), '')
      FROM esrc.read_category(c)$$;

-- truncate_before: versions below it are hidden, the others keep their numbers
SELECT esrc.set_stream_rules('rules-1', truncate_before => 4, reason => 'ticket 1');
SELECT versions('rules-1'), backward('rules-1');
SELECT version FROM esrc.read_stream('rules-1', 2, 2);
SELECT version FROM esrc.read_stream('rules-1', 6, 2);
SELECT version FROM esrc.read_stream_backward('rules-1', 5);
SELECT version FROM esrc.read_stream_backward('rules-1', 3);
-- stream_version is the stream's version, hidden events or not
SELECT esrc.stream_version('rules-1');
-- global reads skip the hidden events; max_count counts visible ones only
SELECT category('rules');
SELECT count(*) FROM esrc.read_all((SELECT min(position) - 1 FROM esrc.events WHERE stream = 'rules-1'))
WHERE stream = 'rules-1';
SELECT substr(stream, 7) || ':' || version AS event FROM esrc.read_category('rules', 0, 3);

-- max_count: the last N versions, by the stream's version at read time
SELECT esrc.set_stream_rules('rules-2', max_count => 3, reason => 'ticket 2');
SELECT versions('rules-2'), backward('rules-2');
SELECT esrc.append('rules-2', 'E', '{}');
SELECT versions('rules-2');
SELECT category('rules');

-- both: the higher bound wins
SELECT esrc.set_stream_rules('rules-1', truncate_before => 4, max_count => 8, reason => 'ticket 3');
SELECT versions('rules-1');
SELECT esrc.set_stream_rules('rules-1', truncate_before => 4, max_count => 2, reason => 'ticket 3');
SELECT versions('rules-1');

-- max_age: the clock is statement_timestamp(); events recorded before the
-- cutoff are hidden
SELECT esrc.set_stream_rules('rules-3', max_age => '1 hour', reason => 'ticket 4');
SELECT versions('rules-3');
SELECT esrc.set_stream_rules('rules-3', max_age => '1 microsecond', reason => 'ticket 4');
SELECT versions('rules-3'), category('rules');
SELECT esrc.append('rules-3', 'E', '{}');
SELECT versions('rules-3') = '' AS hidden_in_a_later_statement;

-- the rules are readable by esrc_reader: why are events hidden?
SELECT stream, truncate_before, max_count, max_age, hard_deleted
FROM esrc.stream_rules ORDER BY stream;
SELECT has_table_privilege('esrc_reader', 'esrc.stream_rules', 'SELECT') AS reader_reads,
       has_table_privilege('esrc_reader', 'esrc.stream_rules', 'INSERT') AS reader_writes;

-- all arguments null: the stream has no rules any more
SELECT esrc.set_stream_rules('rules-3', reason => 'ticket 5');
SELECT versions('rules-3');
SELECT count(*) FROM esrc.stream_rules WHERE stream = 'rules-3';

-- every call is recorded, with the rules it left
SELECT what, stream, events, reason, rules FROM esrc.erasures
WHERE stream LIKE 'rules-%' ORDER BY id;

-- rules change in a transaction: seen by it at once, rolled back with it
BEGIN;
SELECT esrc.set_stream_rules('rules-2', truncate_before => 10, reason => 'try');
SELECT versions('rules-2');
ROLLBACK;
SELECT versions('rules-2');

-- subscriptions skip hidden events, and their checkpoints move past them
SELECT esrc.create_subscription('rules_sub', categories => ARRAY['rules']);
SELECT string_agg(substr(stream, 7) || ':' || version, ',') AS events
FROM esrc.poll('rules_sub', 'm', 100);
SELECT esrc.ack('rules_sub', 'm') > 0 AS acked;
SELECT bool_and(checkpoint >= (SELECT max(position) FROM esrc.events WHERE category = 'rules')) AS past_all
FROM esrc.subscription_checkpoints c JOIN esrc.subscriptions s ON s.id = c.subscription_id
WHERE s.name = 'rules_sub';
SELECT esrc.drop_subscription('rules_sub');

-- snapshots: the table keeps the state folded from every event; snapshot_at
-- refuses a hidden version and folds every event up to a visible one
SELECT esrc.create_snapshot('rules_state', 'rules', 'esrc.merge(jsonb, esrc.event)');
SELECT stream, version, state FROM rules_state ORDER BY stream;
SELECT (esrc.load('rules_state', 'rules-1')).version;
SELECT esrc.snapshot_at('rules_state', 'rules-1', 9);
SELECT esrc.snapshot_at('rules_state', 'rules-1', 7);
SELECT esrc.snapshot_at('rules_state', 'rules-1', -1);
SELECT esrc.drop_snapshot('rules_state');

-- bad input
SELECT esrc.set_stream_rules('rules-1', truncate_before => -1, reason => 'x');
SELECT esrc.set_stream_rules('rules-1', max_count => 0, reason => 'x');
SELECT esrc.set_stream_rules('rules-1', max_count => -5, reason => 'x');
SELECT esrc.set_stream_rules('rules-1', max_age => '0', reason => 'x');
SELECT esrc.set_stream_rules('rules-1', max_age => '-1 day', reason => 'x');
SELECT esrc.set_stream_rules('rules-1', max_count => 1);
SELECT esrc.set_stream_rules('rules-1', max_count => 1, reason => '');
SELECT esrc.set_stream_rules('rules-nobody', max_count => 1, reason => 'x');
SELECT esrc.set_stream_rules(NULL, max_count => 1, reason => 'x');
SELECT esrc.set_stream_rules('', max_count => 1, reason => 'x');
-- nothing of that was recorded
SELECT count(*) FROM esrc.erasures WHERE reason = 'x';

-- only esrc_admin may set rules; the table is written only by the functions
CREATE ROLE rules_reader IN ROLE esrc_reader;
CREATE ROLE rules_admin IN ROLE esrc_admin;
SET ROLE rules_reader;
SELECT esrc.set_stream_rules('rules-1', reason => 'x');
INSERT INTO esrc.stream_rules (stream, max_count) VALUES ('rules-1', 1);
SELECT count(*) > 0 AS reader_sees_rules FROM esrc.stream_rules;
RESET ROLE;
SET ROLE rules_admin;
SELECT esrc.set_stream_rules('rules-1', truncate_before => 5, reason => 'by admin');
RESET ROLE;
SELECT session_user_name = session_user AS session, current_user_name
FROM esrc.erasures WHERE reason = 'by admin';
SELECT versions('rules-1');
-- a change made by hand (owner or superuser) reaches the readers too
UPDATE esrc.stream_rules SET truncate_before = 8 WHERE stream = 'rules-1';
SELECT versions('rules-1');
DROP ROLE rules_reader;
DROP ROLE rules_admin;
DROP FUNCTION versions(text), backward(text), category(text);
