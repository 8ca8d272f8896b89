-- The course subscription example of dcb.events with esrc (README.md):
-- define a course, change its capacity, subscribe a student; a course
-- holds at most its capacity, a student takes at most 3 courses.  Every
-- decision reads the events of its query up to the horizon and appends
-- with a condition on that query after that horizon.
\set ON_ERROR_STOP 1
\set VERBOSITY terse
CREATE EXTENSION IF NOT EXISTS esrc;
CREATE SCHEMA IF NOT EXISTS courses;

-- The events a decision about a course (and, optionally, a student) depends on.
CREATE FUNCTION courses.query(course text, student text DEFAULT NULL) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_build_object('items',
        jsonb_build_array(jsonb_build_object(
            'types', jsonb_build_array('CourseDefined', 'CourseCapacityChanged', 'StudentSubscribed'),
            'tags', jsonb_build_array('course:' || course)))
        || CASE WHEN student IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(jsonb_build_object(
            'types', jsonb_build_array('StudentSubscribed'),
            'tags', jsonb_build_array('student:' || student))) END)
$$;

-- Append one event under the condition "nothing matching query after after".
CREATE FUNCTION courses.append(stream text, type text, data jsonb, tags text[],
                               query jsonb, after bigint) RETURNS void
LANGUAGE sql AS $$
    SELECT esrc.append_if(stream,
        jsonb_build_array(jsonb_build_object('type', type, 'data', data, 'tags', to_jsonb(tags))),
        jsonb_build_object('fail_if_events_match', query, 'after', after));
$$;

CREATE FUNCTION courses.define(course text, capacity int) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    after bigint := esrc.safe_position();
BEGIN
    IF EXISTS (SELECT FROM esrc.read_query(courses.query(course), 0, NULL, after)) THEN
        RETURN format('course %s exists already', course);
    END IF;
    PERFORM courses.append('course-' || course, 'CourseDefined',
                           jsonb_build_object('capacity', capacity), ARRAY['course:' || course],
                           courses.query(course), after);
    RETURN format('course %s defined with capacity %s', course, capacity);
END
$$;

CREATE FUNCTION courses.change_capacity(course text, capacity int) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    after bigint := esrc.safe_position();
    defined boolean;
    subscribed int;
BEGIN
    SELECT bool_or(e.type = 'CourseDefined'), count(*) FILTER (WHERE e.type = 'StudentSubscribed')
      INTO defined, subscribed
      FROM esrc.read_query(courses.query(course), 0, NULL, after) e;
    IF NOT coalesce(defined, false) THEN
        RETURN format('course %s does not exist', course);
    ELSIF capacity < subscribed THEN
        RETURN format('course %s has %s students, more than %s', course, subscribed, capacity);
    END IF;
    PERFORM courses.append('course-' || course, 'CourseCapacityChanged',
                           jsonb_build_object('capacity', capacity), ARRAY['course:' || course],
                           courses.query(course), after);
    RETURN format('course %s now has capacity %s', course, capacity);
END
$$;

CREATE FUNCTION courses.subscribe(student text, course text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    after bigint := esrc.safe_position();
    capacity int;
    in_course int := 0;
    already boolean := false;
    courses_of_student int := 0;
    e record;
BEGIN
    FOR e IN SELECT * FROM esrc.read_query(courses.query(course, student), 0, NULL, after) LOOP
        IF e.type IN ('CourseDefined', 'CourseCapacityChanged') THEN
            capacity := (e.data->>'capacity')::int;
        ELSIF 'course:' || course = ANY (e.tags) THEN
            in_course := in_course + 1;
            already := already OR 'student:' || student = ANY (e.tags);
        END IF;
        IF e.type = 'StudentSubscribed' AND 'student:' || student = ANY (e.tags) THEN
            courses_of_student := courses_of_student + 1;
        END IF;
    END LOOP;
    IF capacity IS NULL THEN
        RETURN format('course %s does not exist', course);
    ELSIF already THEN
        RETURN format('student %s is in course %s already', student, course);
    ELSIF in_course >= capacity THEN
        RETURN format('course %s is full', course);
    ELSIF courses_of_student >= 3 THEN
        RETURN format('student %s takes 3 courses already', student);
    END IF;
    PERFORM courses.append('student-' || student, 'StudentSubscribed',
                           jsonb_build_object('course', course),
                           ARRAY['student:' || student, 'course:' || course],
                           courses.query(course, student), after);
    RETURN format('student %s subscribed to course %s', student, course);
END
$$;

SELECT courses.define('c1', 2);
SELECT courses.define('c1', 5);
SELECT courses.subscribe('ann', 'c1');
SELECT courses.subscribe('ann', 'c1');
SELECT courses.subscribe('bob', 'c1');
SELECT courses.subscribe('cid', 'c1');
SELECT courses.change_capacity('c1', 1);
SELECT courses.change_capacity('c1', 3);
SELECT courses.subscribe('cid', 'c1');
SELECT courses.define('c2', 10);
SELECT courses.define('c3', 10);
SELECT courses.define('c4', 10);
SELECT courses.subscribe('ann', 'c2');
SELECT courses.subscribe('ann', 'c3');
SELECT courses.subscribe('ann', 'c4');
SELECT courses.subscribe('dan', 'c9');

-- A decision made on a stale read fails: a subscription committed after
-- the read matches the condition (SQLSTATE 40001); the caller reads again.
SELECT esrc.safe_position() AS stale \gset
SELECT courses.subscribe('dan', 'c2');
\set ON_ERROR_STOP 0
\set VERBOSITY sqlstate
SELECT courses.append('student-eve', 'StudentSubscribed', '{"course": "c2"}',
                      ARRAY['student:eve', 'course:c2'], courses.query('c2', 'eve'), :stale);
\set ON_ERROR_STOP 1
\set VERBOSITY terse
SELECT courses.subscribe('eve', 'c2');

-- Every event keeps its stream: the entity it is mainly about.
SELECT stream, type, data, tags FROM esrc.read_query(
    '{"items": [{"tags": ["student:ann"]}]}') ORDER BY position;
