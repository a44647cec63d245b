-- Cross-instance exclusivity for token-endpoint calls without holding a transaction
-- (or a pooled connection) across the network call: an instance that wants to refresh
-- or obtain a token takes the lease row for its key, calls the authorization server,
-- stores the answer in a short statement and deletes the lease. A lease whose holder
-- died is taken over once it expires.
CREATE TABLE token_leases (
    lock_key   text        PRIMARY KEY,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL
);
