-- The live instances, for limits that hold for the cluster: each instance records itself every
-- few seconds and counts the instances seen lately; a registration's or destination's rate limit,
-- in-flight cap and token-endpoint budget is then shared out among them (each takes its part).
-- A stopped instance removes its row; a killed one ages out.
CREATE TABLE instances (
    id      uuid PRIMARY KEY,
    seen_at timestamptz NOT NULL DEFAULT now()
);
