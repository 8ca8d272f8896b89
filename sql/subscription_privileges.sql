-- Subscriptions: who may create, consume, manage; nobody moves another
-- owner's checkpoints.
CREATE EXTENSION IF NOT EXISTS esrc;
\set SHOW_CONTEXT never
CREATE ROLE sub_alice LOGIN IN ROLE esrc_subscriber, esrc_reader;
CREATE ROLE sub_bob LOGIN IN ROLE esrc_reader;
CREATE ROLE sub_carol LOGIN IN ROLE esrc_subscriber;
CREATE ROLE sub_team;
GRANT sub_team TO sub_bob;
SELECT esrc.append('priv-1', 'Created', '{}');

-- bob may not create; alice may, and owns it
SET ROLE sub_bob;
SELECT esrc.create_subscription('bobs');
\echo SQLSTATE :SQLSTATE
RESET ROLE;
SET ROLE sub_alice;
SELECT esrc.create_subscription('alices', start => 'end');
SELECT name, owner FROM esrc.subscriptions WHERE name = 'alices';
SELECT count(*) FROM esrc.poll('alices', 'a1');
RESET ROLE;

-- bob may not consume alice's subscription, nor manage it
SET ROLE sub_bob;
SELECT * FROM esrc.poll('alices', 'b1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.ack('alices', 'a1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.reset_subscription('alices', 0);
\echo SQLSTATE :SQLSTATE
SELECT esrc.drop_subscription('alices');
SELECT esrc.grant_subscription('alices', 'sub_bob');
-- nor write the catalog around the functions
UPDATE esrc.subscription_checkpoints SET checkpoint = 0;
\echo SQLSTATE :SQLSTATE
INSERT INTO esrc.subscriptions (name, owner, partitions) VALUES ('forged', 'sub_bob', 1);
DELETE FROM esrc.subscriptions;
-- but may look
SELECT subscription, partition, member FROM esrc.subscription_status WHERE subscription = 'alices';
RESET ROLE;

-- a grant to a group lets its members consume, not manage
SET ROLE sub_alice;
SELECT esrc.grant_subscription('alices', 'sub_team');
SELECT esrc.grant_subscription('alices', 'sub_team');
SELECT consumers FROM esrc.subscriptions WHERE name = 'alices';
RESET ROLE;
SET ROLE sub_bob;
SELECT count(*) FROM esrc.poll('alices', 'b1');
SELECT esrc.reset_subscription('alices', 0);
RESET ROLE;
SET ROLE sub_alice;
SELECT esrc.revoke_subscription('alices', 'sub_team');
SELECT consumers FROM esrc.subscriptions WHERE name = 'alices';
RESET ROLE;
SET ROLE sub_bob;
SELECT count(*) FROM esrc.poll('alices', 'b1');
\echo SQLSTATE :SQLSTATE
RESET ROLE;

-- another subscriber may not manage alice's subscription either
SET ROLE sub_carol;
SELECT esrc.reset_subscription('alices', 0);
\echo SQLSTATE :SQLSTATE
SELECT esrc.drop_subscription('alices');
SELECT esrc.grant_subscription('alices', 'sub_carol');
RESET ROLE;

-- carol (no esrc_reader) may create, but not consume, even her own
SET ROLE sub_carol;
SELECT esrc.create_subscription('carols');
SELECT count(*) FROM esrc.poll('carols', 'c1');
\echo SQLSTATE :SQLSTATE
SELECT esrc.drop_subscription('carols');
RESET ROLE;

-- nobody else can run anything
CREATE ROLE sub_nobody LOGIN;
SET ROLE sub_nobody;
SELECT count(*) FROM esrc.poll('alices', 'n1');
\echo SQLSTATE :SQLSTATE
SELECT * FROM esrc.subscriptions;
RESET ROLE;

-- a superuser manages every subscription
SELECT esrc.reset_subscription('alices', 0);
SELECT esrc.drop_subscription('alices');
DROP ROLE sub_alice, sub_bob, sub_carol, sub_team, sub_nobody;
