# The two commands of the README: `make demo` and `make test`. Everything else is a step of theirs.
PYTHON ?= python3

.PHONY: test demo bundle demo-down venv docker images unit lint sanity molecule bench bench-peer bench-fleet bench-monitoring

test:  ## every check, in order, with each stage's time (what CI runs)
	@$(PYTHON) tests/harness/stages/run_stages.py

# AIRGAP=1: the lab's nodes on an internal network with no route out, the store their only way out
# (docs/airgapped-install.md).
AIRGAP ?= 0

demo: venv images  ## the simulated lab: create it, run site.yml against it, print what changed (AIRGAP=1: air-gapped)
	@AIRGAP=$(AIRGAP) tests/harness/lab/demo.sh up

bundle: venv  ## the offline bundle of the lab (after make demo, or make demo AIRGAP=1), on the store and its manifest in .cache/demo
	@.venv/bin/ansible-playbook playbooks/bundle.yml -i inventories/sim -i tests/fixtures/airgap_hosts.yml -e bundle_host=sim-store

demo-down:  ## remove the simulated lab
	@tests/harness/lab/demo.sh down

venv:
	@tests/harness/setup/ensure_venv.sh

docker:
	@tests/harness/setup/ensure_docker.sh

images: docker
	@tests/harness/setup/build_images.sh

lint: venv
	@$(PYTHON) tests/harness/stages/run_stages.py --only yamllint ansible-lint changelog argument-specs

unit: venv images  ## tests/unit and tests/integration (the peer benchmark's quick mode runs in the lab's image)
	@$(PYTHON) tests/harness/stages/run_stages.py --only unit

sanity: venv
	@$(PYTHON) tests/harness/stages/run_stages.py --only sanity

molecule: venv images
	@$(PYTHON) tests/harness/stages/run_stages.py --only molecule

bench: venv  ## the full staging benchmark (~20 min, ~9 GiB free disk and ~5 GiB in /dev/shm): the table and the issue's targets
	@.venv/bin/python benchmarks/staging/run.py --json benchmarks/staging/results/full.json

bench-peer: venv images  ## peer-assisted staging: 1, 2 and 4 nodes in containers, direct vs peer-assisted (~4 min)
	@.venv/bin/python benchmarks/peer/run.py --json benchmarks/peer/results/full.json

bench-monitoring: venv  ## gpu_monitoring's collector CPU and RSS, node exporter's RSS, Prometheus with 1,000 nodes (~15 s)
	@.venv/bin/python benchmarks/monitoring/run.py --json benchmarks/monitoring/results/monitoring.json

bench-fleet: venv  ## a no-op site.yml on the lab of make demo: controller CPU and tasks per converged node (~10 min)
	@.venv/bin/python benchmarks/fleet/run.py --json benchmarks/fleet/results/fleet.json
