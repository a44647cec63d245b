-- Agents: a registration created on first use by a JWT access token (RFC 9068) is the pair
-- (user, client) on one destination. agent_client is the token's client_id (or azp); NULL for
-- the registrations thin clients create with POST /v1/registrations. Such a registration has
-- no client token anybody knows (its client_token_hash is the hash of random bytes). The
-- unique index makes concurrent first calls on several instances create one registration.
ALTER TABLE registrations ADD COLUMN agent_client text;
CREATE UNIQUE INDEX registrations_agent ON registrations (destination, user_issuer, user_subject, agent_client)
    WHERE agent_client IS NOT NULL;
-- Admin listings and revocations by client.
CREATE INDEX registrations_agent_client ON registrations (agent_client, created_at DESC, id DESC)
    WHERE agent_client IS NOT NULL;
