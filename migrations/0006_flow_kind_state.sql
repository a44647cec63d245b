-- A flow kind keeps its own state: one sealed, opaque column instead of a column per
-- kind, and no list of kinds in the schema (a new kind is code only).
-- kind_state_sealed: the kind's state, sealed and bound to the row (associated data
--   flows.kind_state:<id>); state_hash stays the one lookup a kind's callback may need
--   (OAuth2's `state`), as a hash.
-- The columns the kinds used before (pkce_verifier_sealed, failed_attempts, second_factor)
-- stay, so instances of the previous version keep working during a rolling upgrade; nothing
-- reads them any more. A flow begun on an old instance and finished on a new one fails and
-- is started again (flows live ten minutes).
ALTER TABLE flows DROP CONSTRAINT flows_kind_check;
ALTER TABLE flows ADD COLUMN kind_state_sealed bytea;
