"""`gpuaudit serve`: the reports folder and the last run's metrics over HTTP, read-only."""

from __future__ import annotations

from pathlib import Path

import click

from gpuaudit.cli.options import stop


@click.command()
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--port", type=click.IntRange(1, 65535), default=8080, show_default=True, help="Port to listen on.")
@click.option("--bind", "host", default="0.0.0.0", show_default=True, help="Address to listen on.")
def serve(folder: Path, port: int, host: str) -> int:
    """Serve FOLDER read-only over HTTP (GET and HEAD): its files and folder
    listings, and FOLDER/metrics.txt at /metrics as OpenMetrics (what
    `audit -o openmetrics=FOLDER/metrics.txt` writes) for Prometheus to
    scrape. Nothing outside FOLDER is served, not even through a link."""
    from gpuaudit.pipelines.serve import server

    try:
        httpd = server(folder, host, port)
    except OSError as exc:
        stop(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    click.echo(f"gpuaudit: serving {folder} on http://{host}:{port}/ (metrics at /metrics)", err=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0
