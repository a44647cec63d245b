-- Parley's initial schema. Every secret column is sealed (AES-256-GCM, key id inside
-- the value, associated data naming the row); client tokens and flow secrets are SHA-256.

CREATE TABLE registrations (
    id                        uuid PRIMARY KEY,
    destination               text NOT NULL,
    client_token_hash         bytea NOT NULL UNIQUE,
    status                    text NOT NULL CHECK (status IN ('active', 'login_required')),
    appcid_sealed             bytea,
    device_type               text,
    device_model              text,
    user_hint                 text,
    return_url                text,
    credentials_sealed        bytea,
    client_certificate_sealed bytea,
    created_at                timestamptz NOT NULL DEFAULT now(),
    updated_at                timestamptz NOT NULL DEFAULT now(),
    last_used_at              timestamptz
);
CREATE INDEX registrations_created ON registrations (created_at DESC, id DESC);
CREATE INDEX registrations_destination_created ON registrations (destination, created_at DESC, id DESC);
CREATE INDEX registrations_user_hint ON registrations (user_hint);

-- OAuth2 tokens. Client-credentials tokens belong to the destination (registration_id NULL).
CREATE TABLE tokens (
    id                   uuid PRIMARY KEY,
    registration_id      uuid REFERENCES registrations (id) ON DELETE CASCADE,
    destination          text NOT NULL,
    kind                 text NOT NULL,
    scope_key            text NOT NULL,
    access_token_sealed  bytea NOT NULL,
    refresh_token_sealed bytea,
    token_type           text NOT NULL DEFAULT 'Bearer',
    scopes               text,
    expires_at           timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    last_used_at         timestamptz,
    UNIQUE NULLS NOT DISTINCT (destination, registration_id, scope_key)
);
CREATE INDEX tokens_registration ON tokens (registration_id);

-- The registration's upstream cookie jar, one row per cookie (RFC 6265 identity).
CREATE TABLE cookies (
    registration_id uuid NOT NULL REFERENCES registrations (id) ON DELETE CASCADE,
    domain          text NOT NULL,
    path            text NOT NULL,
    name            text NOT NULL,
    value_sealed    bytea NOT NULL,
    host_only       boolean NOT NULL DEFAULT true,
    secure          boolean NOT NULL DEFAULT false,
    http_only       boolean NOT NULL DEFAULT false,
    expires_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (registration_id, domain, path, name)
);

-- Interactive steps (oauth2, saml2, otp, basic). The URL secret and the OAuth2 state
-- are stored as hashes; the PKCE verifier is sealed.
CREATE TABLE flows (
    id                   uuid PRIMARY KEY,
    registration_id      uuid NOT NULL REFERENCES registrations (id) ON DELETE CASCADE,
    kind                 text NOT NULL CHECK (kind IN ('oauth2', 'saml2', 'otp', 'basic')),
    purpose              text NOT NULL DEFAULT 'login',
    secret_hash          bytea NOT NULL,
    state_hash           bytea,
    pkce_verifier_sealed bytea,
    scope_key            text,
    status               text NOT NULL CHECK (status IN ('pending', 'completed', 'failed', 'expired')),
    error                text,
    return_url           text,
    expires_at           timestamptz NOT NULL,
    created_at           timestamptz NOT NULL DEFAULT now(),
    completed_at         timestamptz
);
CREATE UNIQUE INDEX flows_state_hash ON flows (state_hash) WHERE state_hash IS NOT NULL;
CREATE INDEX flows_registration ON flows (registration_id);

-- Who did what, when. No foreign key: events outlive the registrations they name.
CREATE TABLE audit_events (
    id              bigserial PRIMARY KEY,
    at              timestamptz NOT NULL DEFAULT now(),
    actor           text NOT NULL CHECK (actor IN ('client', 'admin', 'system')),
    action          text NOT NULL,
    registration_id uuid,
    destination     text,
    detail          jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_events_at ON audit_events (at DESC, id DESC);
