"""One telemetry read, as the audit does it, in its own process (so the
benchmark can measure its wall time and peak RSS): every pod's aggregates over
the window from a Prometheus URL. Prints a one-line JSON summary.

    python bench/telemetry_query.py URL --window 3600 --end UNIX_TIME
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone

from gpuaudit.sources.prometheus import query_telemetry


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--window", type=int, required=True, help="seconds")
    parser.add_argument("--end", type=float, required=True, help="unix time")
    args = parser.parse_args()
    end = datetime.fromtimestamp(args.end, tz=timezone.utc)
    result = query_telemetry(args.url, window_seconds=args.window, end=end)
    summary = {
        "queries": result["queries"],
        "pods": len(result["pods"]),
        "gpus": len(result["gpus"]),
        "errors": result["errors"],
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
