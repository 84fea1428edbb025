"""Fixtures for telemetry tests: real Prometheus servers loaded by promtool.

Use them by listing this module in ``pytest_plugins``
(``pytest_plugins = ["tests.conftest_telemetry"]``, in a test module or the top
conftest). Everything skips cleanly when
promtool/prometheus or the GenTD26 data are absent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

import pytest

from tests import genai_trace as genai
from tests.prometheus_server import (
    Family,
    PrometheusProcess,
    backfill,
    tools_available,
    write_openmetrics,
)

__all__ = ["GenaiPrometheus", "genai_prometheus", "genai_trace", "prometheus_factory"]


@pytest.fixture(scope="session")
def prometheus_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[Iterable[Family], str], str]]:
    """``start(families, name) -> url``: backfill the families into a fresh TSDB
    and serve it; every server started is stopped at the end of the session."""
    if not tools_available():
        pytest.skip("promtool/prometheus not installed (Debian package 'prometheus')")
    started: list[PrometheusProcess] = []

    def start(families: Iterable[Family], name: str = "prometheus") -> str:
        work = tmp_path_factory.mktemp(name)
        text = work / "series.om"
        write_openmetrics(text, families)
        backfill(text, work / "tsdb")
        text.unlink()  # the blocks hold it now; keep tmp small
        server = PrometheusProcess(work / "tsdb", work)
        started.append(server)
        return server.start()

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def genai_trace() -> genai.Trace:
    """The GenTD26 trace, shifted to end about an hour ago."""
    if not genai.available():
        pytest.skip(f"GenTD26 data not found in {genai.DATA_DIR}")
    return genai.load()


@dataclass(frozen=True)
class GenaiPrometheus:
    url: str
    trace: genai.Trace

    @property
    def end(self) -> datetime:
        return datetime.fromtimestamp(self.trace.end, tz=timezone.utc)

    def window_seconds(self, margin_s: int = 720) -> int:
        """A window that holds the whole trace, starting a little before it."""
        return int(self.trace.end - self.trace.start) + margin_s


@pytest.fixture(scope="session")
def genai_prometheus(
    prometheus_factory: Callable[[Iterable[Family], str], str], genai_trace: genai.Trace
) -> GenaiPrometheus:
    """A Prometheus holding the 143 GenTD26 pods as dcgm-exporter series
    (namespace genai, pods sd-serving-000..142)."""
    return GenaiPrometheus(prometheus_factory(genai.families(genai_trace), "genai"), genai_trace)
