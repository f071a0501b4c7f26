#!/usr/bin/env bash
# make k8s-validate: the manifests against the Kubernetes API schemas, offline.
#
# 1. Renders deploy/k8s the way `kubectl apply -k` would (kubectl kustomize, or
#    a standalone kustomize); without either, validates each resource file the
#    kustomization lists.
# 2. kubernetes-validate --strict (unknown fields are errors) against every
#    Kubernetes version in K8S_VERSIONS (default: 1.30 and 1.37, the newest
#    schemas it bundles). A kind without a schema is an error, except KEDA's.
# 3. KEDA's ScaledObject and TriggerAuthentication, which kubernetes-validate
#    has no schema for: keda-schema.json (the keda.sh/v1alpha1 fields, unknown
#    fields rejected) via Python's jsonschema.
# Takes about two seconds. deploy/local/tools.sh installs kubernetes-validate.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
VERSIONS="${K8S_VERSIONS:-1.30 1.37}"
say() { printf 'k8s-validate: %s\n' "$*"; }

validator=$(command -v kubernetes-validate || true)
[ -n "$validator" ] || validator="$ROOT/var/tools/k8s-validate/bin/kubernetes-validate"
[ -x "$validator" ] || { say "kubernetes-validate not found: run deploy/local/tools.sh"; exit 1; }
# The Python that runs kubernetes-validate has jsonschema and PyYAML (its dependencies).
python=$(head -n 1 "$validator" | sed -n 's/^#! *//p' | awk '{print $1}')
"$python" -c 'import jsonschema, yaml' 2>/dev/null || python=python3

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if command -v kubectl >/dev/null 2>&1; then
  kubectl kustomize "$HERE" > "$out/rendered.yaml"
  files=("$out/rendered.yaml")
  say "rendered with kubectl kustomize: $(grep -c '^kind:' "$out/rendered.yaml") objects"
elif command -v kustomize >/dev/null 2>&1; then
  kustomize build "$HERE" > "$out/rendered.yaml"
  files=("$out/rendered.yaml")
  say "rendered with kustomize: $(grep -c '^kind:' "$out/rendered.yaml") objects"
else
  mapfile -t files < <(sed -n 's/^  - \([a-z0-9.-]*\.yaml\).*/\1/p' "$HERE/kustomization.yaml" | sed "s|^|$HERE/|")
  say "no kubectl or kustomize: validating the ${#files[@]} files the kustomization lists, one by one"
fi

# Applied by hand after a roll, not through the kustomization (see the file).
files+=("$HERE/migrate-finish-job.yaml")

status=0
for v in $VERSIONS; do
  report=$("$validator" --strict -k "$v" "${files[@]}" 2>&1) || status=1
  # A missing schema is only a warning to kubernetes-validate; here only KEDA's may be missing.
  if echo "$report" | grep -v 'with api version keda.sh/' | grep -q "Couldn't find schema"; then status=1; fi
  if [ "$status" -ne 0 ]; then echo "$report"; say "FAILED against Kubernetes $v"; exit 1; fi
  say "Kubernetes $v: $(echo "$report" | grep -c ' passed for resource ') objects pass (strict)"
done

"$python" - "$HERE/keda-schema.json" "${files[@]}" <<'PY'
import json, sys, yaml, jsonschema
schemas = json.load(open(sys.argv[1]))
checked = 0
for path in sys.argv[2:]:
    for doc in yaml.safe_load_all(open(path)):
        if not doc or not str(doc.get("apiVersion", "")).startswith("keda.sh/"):
            continue
        schema = schemas.get(doc["kind"])
        if schema is None:
            sys.exit(f"k8s-validate: no schema for KEDA kind {doc['kind']}")
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(doc), key=str)
        for e in errors:
            print(f"k8s-validate: {doc['kind']}/{doc['metadata']['name']}: {'/'.join(map(str, e.absolute_path))}: {e.message}")
        if errors:
            sys.exit(1)
        checked += 1
if checked == 0:
    sys.exit("k8s-validate: expected KEDA objects, found none")
print(f"k8s-validate: {checked} KEDA objects pass keda-schema.json (strict)")
PY
