-- Propagation: the identity token a registration's verified user proved themselves with, kept
-- sealed (bound to the row) while a destination's propagation grant (token_exchange,
-- jwt_bearer) speaks for that user, and renewed by PUT /v1/registrations/me/identity.
ALTER TABLE registrations ADD COLUMN identity_token_sealed bytea;
