"""`python -m detach_parity.shared.apps.bench --worker CONFIG_JSON OUT_PATH`: the bench's measuring process (internal)."""

import json
import sys

from .worker import main

if len(sys.argv) != 4 or sys.argv[1] != "--worker":
    sys.exit(
        "usage: python -m detach_parity.shared.apps.bench --worker CONFIG_JSON OUT_PATH (internal: run `detach-parity bench`)"
    )
main(json.loads(sys.argv[2]), sys.argv[3])
