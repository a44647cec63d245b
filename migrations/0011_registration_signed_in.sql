-- Step-up: when a person last completed an interactive sign-in (any flow) for the registration.
-- A destination's stepUp rules compare it with their maxAgeSeconds; NULL: never.
ALTER TABLE registrations ADD COLUMN signed_in_at timestamptz;
