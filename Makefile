.PHONY: run test bench build fuzz
run:          ## Parley + the upstream simulator as a demo (local PostgreSQL when PARLEY_DATABASE_URL is unset)
	scripts/run.sh
test:         ## every test, against a real PostgreSQL and the simulator
	scripts/test.sh
fuzz:         ## every fuzz target under libFuzzer for 300 s each (FUZZ_SECONDS=N to change); crashes fail it
	scripts/fuzz.sh $(or $(FUZZ_SECONDS),300)
bench:        ## benchmarks, printed as ratios against baselines measured in the same run
	scripts/bench.sh
build:
	swift build
