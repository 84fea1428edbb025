"""The Grafana dashboard for the rules of ``monitoring_rules`` (pure: a dict
that is the dashboard's JSON model).

Two rows that never mix: **availability** (who holds the GPUs, by state as
the review counts them; what is free; what waits and why) reads only the
recorded ``gpuaudit:*`` series; **activity** (what the held GPUs do) reads
only the DCGM exporter's own series, each panel titled with the metric it
shows (``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, never "SM" or "utilisation").
Variables: datasource, cluster, namespace (the team view), GPU model.
"""

from __future__ import annotations

from typing import Any

from gpuaudit.report.monitoring_rules import GPUS_FREE, GPUS_PENDING, POD_GPUS

UID = "gpuaudit-gpus"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# A selector every availability query carries.
AVAIL_SEL = 'cluster=~"$cluster", namespace=~"$namespace", gpu_model=~"$gpu_model"'
NODE_SEL = 'cluster=~"$cluster", gpu_model=~"$gpu_model"'


def dcgm(metric: str, agg: str = "avg", by: str = "namespace") -> str:
    """``agg by (by)`` of a DCGM series for the selected namespaces, whichever
    label carries the pod's namespace: ``exported_namespace`` behind a
    ServiceMonitor with honorLabels: false, else ``namespace``."""
    exported = (
        f'label_replace({metric}{{cluster=~"$cluster", exported_namespace=~"$namespace"}}, '
        f'"namespace", "$1", "exported_namespace", "(.+)")'
    )
    plain = f'{metric}{{cluster=~"$cluster", exported_namespace="", namespace=~"$namespace"}}'
    return f"{agg} by ({by}) ({exported} or {plain})"


class _Layout:
    """Panels on Grafana's 24-column grid, rows full width."""

    def __init__(self) -> None:
        self.y = 0
        self.x = 0
        self.row_h = 0
        self.next_id = 1
        self.panels: list[dict[str, Any]] = []

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def row(self, title: str) -> None:
        self.newline()
        self.panels.append(
            {
                "type": "row",
                "id": self._id(),
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                "panels": [],
            }
        )
        self.y += 1

    def newline(self) -> None:
        if self.x:
            self.y += self.row_h
            self.x = 0
            self.row_h = 0

    def panel(
        self,
        kind: str,
        title: str,
        description: str,
        targets: list[tuple[str, str]],
        *,
        w: int = 8,
        h: int = 8,
        unit: str = "short",
        stacked: bool = False,
        instant: bool = False,
    ) -> None:
        if self.x + w > 24:
            self.newline()
        defaults: dict[str, Any] = {"unit": unit}
        if kind == "timeseries":
            defaults["custom"] = {
                "stacking": {"mode": "normal" if stacked else "none", "group": "A"},
                "fillOpacity": 30 if stacked else 0,
            }
        panel: dict[str, Any] = {
            "type": kind,
            "id": self._id(),
            "title": title,
            "description": description,
            "datasource": DATASOURCE,
            "gridPos": {"h": h, "w": w, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "options": {},
            "targets": [
                {
                    "refId": chr(ord("A") + i),
                    "datasource": DATASOURCE,
                    "expr": expr,
                    "legendFormat": legend,
                    **({"instant": True, "range": False, "format": "table"} if instant else {"range": True}),
                }
                for i, (expr, legend) in enumerate(targets)
            ],
        }
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": f"{name}-values"},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"text": "All", "value": "$__all"},
        "sort": 1,
    }


def availability_row(layout: _Layout, window: str) -> None:
    layout.row("Availability: who holds the GPUs, what is free, what waits")
    layout.panel(
        "timeseries",
        "GPUs allocated, by state",
        f"GPUs held by running pods (kube-state-metrics requests), in the review's classes over the last "
        f"{window}: active, resident_idle (a model resident in VRAM, compute under the idle threshold), "
        "idle, no_data (too few samples: never counted as idle).",
        [(f"sum by (state) ({POD_GPUS}{{{AVAIL_SEL}}})", "{{state}}")],
        w=12,
        stacked=True,
    )
    layout.panel(
        "timeseries",
        "GPUs free, by GPU model",
        "Allocatable GPUs no pod holds, on schedulable nodes (a cordoned node's are not free).",
        [(f"sum by (gpu_model) ({GPUS_FREE}{{{NODE_SEL}}})", "{{gpu_model}}")],
        w=6,
    )
    layout.panel(
        "timeseries",
        "GPUs pending, by cause",
        "GPUs requested by pods not yet bound to a node: 'unschedulable' when the scheduler said so "
        "(kube_pod_status_unschedulable), else 'not_yet_scheduled'. `gpuaudit audit` names each pod's cause.",
        [(f'sum by (reason) ({GPUS_PENDING}{{cluster=~"$cluster", namespace=~"$namespace"}})', "{{reason}}")],
        w=6,
        stacked=True,
    )
    layout.panel(
        "timeseries",
        "GPUs pending, by the scheduler's cause (last gpuaudit audit)",
        "The daily audit's metrics (the report server's /metrics, gpuaudit_pending_gpus): allocation, "
        "placement, quota, dra, gated, unknown, as `gpuaudit audit` reads each pod's scheduling message.",
        [('sum by (cause) (gpuaudit_pending_gpus{cluster=~"$cluster", namespace=~"$namespace"})', "{{cause}}")],
        w=6,
        stacked=True,
    )
    layout.panel(
        "table",
        "Per team (namespace): GPUs by state",
        "Who holds the GPUs and in which class, now.",
        [(f"sum by (namespace, state) ({POD_GPUS}{{{AVAIL_SEL}}})", "")],
        w=6,
        instant=True,
    )
    layout.panel(
        "timeseries",
        "Per team (namespace): GPUs resident-idle",
        "GPUs held with a model resident and compute under the idle threshold (GPA-ME-001's class).",
        [(f'sum by (namespace) ({POD_GPUS}{{{AVAIL_SEL}, state="resident_idle"}})', "{{namespace}}")],
        w=6,
    )
    layout.panel(
        "timeseries",
        "Per team (namespace): GPUs pending",
        "GPUs requested by the namespace's unbound pods.",
        [(f'sum by (namespace) ({GPUS_PENDING}{{cluster=~"$cluster", namespace=~"$namespace"}})', "{{namespace}}")],
        w=6,
    )
    layout.panel(
        "table",
        "Per node: GPUs by state and free",
        "Allocation per node and GPU model.",
        [
            (f"sum by (node, gpu_model, state) ({POD_GPUS}{{{AVAIL_SEL}}})", ""),
            (f"sum by (node, gpu_model) ({GPUS_FREE}{{{NODE_SEL}}})", ""),
        ],
        w=24,
        instant=True,
    )


def activity_row(layout: _Layout) -> None:
    layout.row("Activity: what the held GPUs do (DCGM exporter)")
    ratio = "percentunit"
    layout.panel(
        "timeseries",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE by namespace",
        "Share of time the graphics/compute engine was active (ratio; on by default, per MIG instance).",
        [(dcgm("DCGM_FI_PROF_GR_ENGINE_ACTIVE"), "{{namespace}}")],
        unit=ratio,
    )
    layout.panel(
        "timeseries",
        "DCGM_FI_PROF_SM_ACTIVE by namespace",
        "Share of cycles an SM had at least one warp assigned (ratio; not in the exporter's default CSV).",
        [(dcgm("DCGM_FI_PROF_SM_ACTIVE"), "{{namespace}}")],
        unit=ratio,
    )
    layout.panel(
        "timeseries",
        "DCGM_FI_PROF_SM_OCCUPANCY by namespace",
        "Resident warps over the SM's maximum (ratio; not in the default CSV).",
        [(dcgm("DCGM_FI_PROF_SM_OCCUPANCY"), "{{namespace}}")],
        unit=ratio,
    )
    layout.panel(
        "timeseries",
        "DCGM_FI_DEV_GPU_UTIL by namespace (fallback)",
        "Percent of time a kernel was running: the coarsest signal, the audit's fallback when the "
        "profiling metrics are absent; not reported for MIG instances.",
        [(dcgm("DCGM_FI_DEV_GPU_UTIL"), "{{namespace}}")],
        unit="percent",
    )
    layout.panel(
        "timeseries",
        "DCGM_FI_DEV_FB_USED by namespace",
        "Framebuffer (VRAM) used, summed over the namespace's GPUs.",
        [(dcgm("DCGM_FI_DEV_FB_USED", "sum"), "{{namespace}}")],
        unit="decmbytes",
    )
    layout.panel(
        "timeseries",
        "DCGM_FI_PROF_PCIE_TX_BYTES + RX_BYTES by namespace",
        "PCIe traffic, bytes per second (gauges). High PCIe at low engine activity: work waiting on the host.",
        [
            (
                dcgm("DCGM_FI_PROF_PCIE_TX_BYTES", "sum") + " + " + dcgm("DCGM_FI_PROF_PCIE_RX_BYTES", "sum"),
                "{{namespace}}",
            )
        ],
        unit="Bps",
    )
    layout.panel(
        "timeseries",
        "DCGM_FI_PROF_NVLINK_TX_BYTES + RX_BYTES by namespace",
        "NVLink traffic, bytes per second (not in the default CSV).",
        [
            (
                dcgm("DCGM_FI_PROF_NVLINK_TX_BYTES", "sum") + " + " + dcgm("DCGM_FI_PROF_NVLINK_RX_BYTES", "sum"),
                "{{namespace}}",
            )
        ],
        unit="Bps",
    )


def dashboard(*, window: str) -> dict[str, Any]:
    """The dashboard's JSON model. ``window``: the rules' judging window, for
    the descriptions."""
    layout = _Layout()
    availability_row(layout, window)
    activity_row(layout)
    return {
        "uid": UID,
        "title": "GPUs: availability and activity (gpuaudit)",
        "description": "Availability and activity kept apart, from gpuaudit's recording rules and the DCGM "
        "exporter. `gpuaudit monitoring dashboard` writes it.",
        "tags": ["gpuaudit", "gpu"],
        "timezone": "utc",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "time": {"from": "now-24h", "to": "now"},
        "refresh": "5m",
        "templating": {
            "list": [
                {
                    "type": "datasource",
                    "name": "datasource",
                    "label": "Prometheus",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                _variable("cluster", "Cluster", "label_values(kube_node_status_allocatable, cluster)"),
                _variable("namespace", "Namespace (team)", f"label_values({POD_GPUS}, namespace)"),
                _variable("gpu_model", "GPU model", f"label_values({GPUS_FREE}, gpu_model)"),
            ]
        },
        "annotations": {"list": []},
        "panels": layout.panels,
    }


def panel_queries(model: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of the dashboard."""
    return [(p["title"], t["expr"]) for p in model["panels"] if p.get("type") != "row" for t in p["targets"]]
