-- A revocation that sticks. Revoking a verified user (or an agent's client, or a registration that
-- has a user) records a not-before: identity and agent tokens issued (`iat`) before it are refused,
-- propagation grants are not run with them and implicit registrations are not created again, until a
-- token issued after it is shown. A row names a user (client ''), a client ('' for issuer and
-- subject), or a user with one client (an agent's registration deleted). Every instance keeps the
-- table in memory and reloads it on the cache channel's 'n:' notification.
CREATE TABLE identity_not_before (
    issuer     text NOT NULL,
    subject    text NOT NULL,
    client     text NOT NULL,
    not_before timestamptz NOT NULL,
    PRIMARY KEY (issuer, subject, client)
);

-- OpenID Connect Back-Channel Logout: each logout token is taken once (its `jti` per issuer),
-- remembered until it expires.
CREATE TABLE logout_tokens_seen (
    issuer     text NOT NULL,
    jti        text NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (issuer, jti)
);
