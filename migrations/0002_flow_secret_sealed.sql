-- The flow URL secret is verified by its hash; its owner may read the URL again
-- (GET /v1/flows/{id}), so it is also kept sealed, bound to the flow row.
ALTER TABLE flows ADD COLUMN secret_sealed bytea;
