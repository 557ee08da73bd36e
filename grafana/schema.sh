#!/usr/bin/env bash
# Builds the JSON Schema of Grafana's dashboard model from Grafana's own TypeScript types
# (@grafana/schema), for tests/test_grafana.py. Needs npm and the npm registry once; the tests
# themselves run offline and only read the generated file.
#   grafana/schema.sh [DIR]    (default: $GW_GRAFANA_SCHEMA_DIR or ~/.cache/gangwatch/grafana-schema)
set -euo pipefail
GRAFANA_SCHEMA_VERSION=11.6.16
GENERATOR_VERSION=2.4.0
DIR=${1:-${GW_GRAFANA_SCHEMA_DIR:-$HOME/.cache/gangwatch/grafana-schema}}
OUT=$DIR/dashboard-$GRAFANA_SCHEMA_VERSION.schema.json
[ -s "$OUT" ] && { echo "$OUT"; exit 0; }
command -v npm >/dev/null || { echo "npm not installed: cannot build the Grafana dashboard schema" >&2; exit 1; }
mkdir -p "$DIR"
cd "$DIR"
[ -f package.json ] || npm init -y >/dev/null
npm install --no-audit --no-fund --silent "@grafana/schema@$GRAFANA_SCHEMA_VERSION" "ts-json-schema-generator@$GENERATOR_VERSION" >/dev/null
npx --no-install ts-json-schema-generator --no-type-check --type Dashboard \
  --path node_modules/@grafana/schema/dist/esm/raw/dashboard/x/dashboard_types.gen.d.ts -o "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "$OUT"
