#!/usr/bin/env bash
# Makes sure the command-line tools `make test` needs beyond cargo are
# installed: promtool (Debian's `prometheus` package), which unit-tests the
# alert rules in deploy/observability/, PgBouncer, which the pipeline's
# tests run through once (transaction mode), and chromium with chromedriver,
# which drive the operators' console in tests/tests/console_browser.rs, and
# kubernetes-validate (PyPI), which checks deploy/k8s against the Kubernetes
# schemas. Installs with apt on Debian/Ubuntu, the way services.sh installs
# PostgreSQL (kubernetes-validate with pip into var/tools/). Idempotent; says
# what it did. Also schemathesis (PyPI, into var/tools/), for `make api-schema-test`.
set -euo pipefail

say() { printf 'tools: %s\n' "$*"; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else say "need root to run: $*"; return 1; fi
}
apt_install() {
  command -v apt-get >/dev/null 2>&1 || { say "apt-get not found: install $* by hand"; return 1; }
  say "installing $* with apt"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}

if command -v promtool >/dev/null 2>&1; then
  say "promtool is installed ($(promtool --version 2>&1 | head -n 1))"
else
  apt_install prometheus || {
    say "could not install promtool: install Debian's prometheus package (or promtool from prometheus.io), then retry"
    exit 1
  }
fi

if [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1; then
  say "pgbouncer is installed"
else
  apt_install pgbouncer || {
    say "could not install pgbouncer: install Debian's pgbouncer package, then retry"
    exit 1
  }
  # The package starts a system instance on 6432; the tests start their own.
  as_root service pgbouncer stop >/dev/null 2>&1 || true
fi

if command -v chromedriver >/dev/null 2>&1 && { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }; then
  say "chromium and chromedriver are installed ($(chromedriver --version 2>&1 | head -n 1))"
else
  apt_install chromium chromium-driver || {
    say "could not install chromium: install Debian's chromium and chromium-driver packages, then retry"
    exit 1
  }
fi

# kubernetes-validate (PyPI: offline OpenAPI schemas of Kubernetes 1.25-1.37)
# for `make k8s-validate`. Debian's Python refuses system-wide pip installs
# (PEP 668), so it goes into a virtualenv of its own under var/tools/ unless
# one is on the PATH already.
K8S_VENV="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/var/tools/k8s-validate"
if command -v kubernetes-validate >/dev/null 2>&1; then
  say "kubernetes-validate is installed ($(kubernetes-validate --version 2>&1 | head -n 1))"
elif [ -x "$K8S_VENV/bin/kubernetes-validate" ]; then
  say "kubernetes-validate is installed in $K8S_VENV"
else
  python3 -m venv --help >/dev/null 2>&1 && python3 -c 'import ensurepip' 2>/dev/null || apt_install python3-venv
  say "installing kubernetes-validate from PyPI into $K8S_VENV"
  python3 -m venv "$K8S_VENV" && "$K8S_VENV/bin/pip" install -q kubernetes-validate || {
    rm -rf "$K8S_VENV"
    say "could not install kubernetes-validate: pip install kubernetes-validate (PyPI), then retry"
    exit 1
  }
fi

# schemathesis (PyPI) for `make api-schema-test`: the shop API tested
# against its own OpenAPI document. Into a virtualenv of its own under
# var/tools/, like kubernetes-validate.
ST_VENV="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/var/tools/schemathesis"
if command -v st >/dev/null 2>&1 && st --version >/dev/null 2>&1; then
  say "schemathesis is installed ($(st --version 2>&1 | head -n 1))"
elif [ -x "$ST_VENV/bin/st" ]; then
  say "schemathesis is installed in $ST_VENV"
else
  python3 -m venv --help >/dev/null 2>&1 && python3 -c 'import ensurepip' 2>/dev/null || apt_install python3-venv
  say "installing schemathesis from PyPI into $ST_VENV"
  python3 -m venv "$ST_VENV" && "$ST_VENV/bin/pip" install -q schemathesis || {
    rm -rf "$ST_VENV"
    say "could not install schemathesis: pip install schemathesis (PyPI), then retry"
    exit 1
  }
fi
