-- Lifecycle events and their webhook deliveries: a transactional outbox. An event row is written
-- in the same statement (or transaction) as the change it reports, so a change is never lost
-- without its event nor an event sent for a change that rolled back. Any instance fans an event
-- out to the webhook endpoints configured for it (one delivery row each) and sends the due
-- deliveries; a delivery is leased (`locked_until`) while one instance sends it, so it is never
-- sent twice at once. No secret is ever stored here: `detail` holds ids and reasons.
CREATE TABLE events (
    id              uuid PRIMARY KEY,
    seq             bigserial UNIQUE,
    type            text NOT NULL,
    at              timestamptz NOT NULL DEFAULT now(),
    -- No foreign key: an event outlives the registration it names (registration.revoked).
    registration_id uuid,
    destination     text,
    user_issuer     text,
    user_subject    text,
    user_verified   boolean,
    detail          jsonb NOT NULL DEFAULT '{}',
    fanned_out      boolean NOT NULL DEFAULT false
);
CREATE INDEX events_fan_out ON events (seq) WHERE NOT fanned_out;
CREATE INDEX events_registration ON events (registration_id);

CREATE TABLE event_deliveries (
    event_id        uuid NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    endpoint        text NOT NULL,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    locked_until    timestamptz,
    last_attempt_at timestamptz,
    last_status     integer,
    last_error      text,
    delivered_at    timestamptz,
    -- Every attempt, oldest first (the last 20): [{"at", "status", "error"}].
    attempt_log     jsonb NOT NULL DEFAULT '[]',
    PRIMARY KEY (event_id, endpoint)
);
CREATE INDEX event_deliveries_due ON event_deliveries (next_attempt_at) WHERE status = 'pending';
