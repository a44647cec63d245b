.PHONY: run test bench build
run:          ## Parley + the upstream simulator as a demo (local PostgreSQL when PARLEY_DATABASE_URL is unset)
	scripts/run.sh
test:         ## every test, against a real PostgreSQL and the simulator
	scripts/test.sh
bench:        ## benchmarks, printed as ratios against baselines measured in the same run
	scripts/bench.sh
build:
	swift build
