#!/usr/bin/env bash
# Make sure a Docker engine answers: install docker.io when root and it is missing,
# start dockerd when no daemon answers, then wait until `docker info` succeeds.
set -euo pipefail

log=${DOCKERD_LOG:-/var/log/dlinfra-dockerd.log}

die() {
  echo "ensure_docker: $*" >&2
  exit 1
}

answers() { docker info >/dev/null 2>&1; }

answers && exit 0

if ! command -v dockerd >/dev/null 2>&1; then
  [ "$(id -u)" -eq 0 ] || die "no Docker engine and not root: install docker.io (sudo apt-get install docker.io) and start it, or re-run as root"
  echo "ensure_docker: installing docker.io"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >/dev/null
fi

if ! answers; then
  if [ "$(id -u)" -eq 0 ]; then
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
      systemctl start docker || true
    fi
    # This host's own dockerd, by its pid file: `pgrep dockerd` would also find the engines inside test containers.
    if ! answers && ! { [ -s /var/run/docker.pid ] && kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; }; then
      echo "ensure_docker: starting dockerd (log: $log)"
      # In a session of its own: stopping the job that started it (a stage, a shell) must not stop the engine.
      setsid nohup dockerd >"$log" 2>&1 < /dev/null &
    fi
  else
    die "Docker is installed but no daemon answers and we are not root: start it (sudo systemctl start docker) or add $(id -un) to the docker group"
  fi
fi

for _ in $(seq 1 60); do
  answers && exit 0
  sleep 1
done
die "dockerd did not answer within 60 s; see $log"
