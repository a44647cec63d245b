.PHONY: run tour test bench build fuzz soak
run:          ## Parley + the upstream simulator as a demo (local PostgreSQL when PARLEY_DATABASE_URL is unset)
	scripts/run.sh
tour:         ## the demo's whole walk-through in headless Chromium, one line per step, axe-core on every hosted page (TOUR_ARGS="--screenshots docs/screenshots")
	scripts/tour.sh $(TOUR_ARGS)
test:         ## every test, against a real PostgreSQL and the simulator
	scripts/test.sh
fuzz:         ## every fuzz target under libFuzzer for 300 s each (FUZZ_SECONDS=N to change); crashes fail it
	scripts/fuzz.sh $(or $(FUZZ_SECONDS),300)
bench:        ## benchmarks, printed as ratios against baselines measured in the same run
	scripts/bench.sh
soak:         ## 3 instances behind HAProxy at 70 % of the measured maximum, SIGKILLs and a PostgreSQL restart, for 1 h (SOAK_SECONDS=N to change)
	SOAK_SECONDS=$(or $(SOAK_SECONDS),3600) scripts/soak.sh
build:
	swift build
