#!/usr/bin/env bash
# The peers' servers, from Debian's packages: Redis, NATS (JetStream), RabbitMQ.
# The suite starts its own server processes on loopback in temporary
# directories, so the packages' own services are stopped and left disabled.
# Not part of the test command; run it once before `python -m benchmarks --peers`.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server nats-server rabbitmq-server
for service in redis-server nats-server rabbitmq-server; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$service" 2>/dev/null; then
    $SUDO systemctl disable --now "$service" || true
  fi
done
redis-server --version
nats-server --version
dpkg-query -W rabbitmq-server
