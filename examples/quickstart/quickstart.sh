#!/usr/bin/env bash
# Generate orders, materialize them into SQLite exactly once, show the view.
set -euo pipefail
cd "$(dirname "$0")"
rm -rf data customers.db .tidemark
python generate.py
tidemark check spec.yaml
tidemark run spec.yaml --available-now
python show.py
# More input arrives: run again and the view moves forward exactly once.
python generate.py --files 2 --seed 8
tidemark run spec.yaml --available-now
tidemark status spec.yaml
python show.py
