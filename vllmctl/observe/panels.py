"""The PromQL of each dashboard panel of one model: (title, unit, [(legend, query)]) with the model's own
metric names; a panel whose metric the model's engines do not export is left out."""

from __future__ import annotations

from vllmctl.observe.fleet import DCGM, GATEWAY, RATE, ModelView, quantile

Query = tuple[str, str]  # (legend, PromQL)
PanelSpec = tuple[str, str, list[Query]]  # (title, Grafana unit, queries)
QUANTILES = (0.5, 0.9, 0.99)


def _percentiles(view: ModelView, histogram: str | None) -> list[Query]:
    if histogram is None:
        return []
    return [(f"p{round(q * 100)} {{{{instance}}}}", quantile(q, histogram)) for q in QUANTILES]


def engine_panels(view: ModelView, replicas: str) -> list[PanelSpec]:
    """The engine's own figures, per replica (`replicas`: the row's replica variable)."""
    sel = view.selector(replicas)
    by = "sum by (instance)"

    def rate(pick_name: str | None) -> str | None:
        return None if pick_name is None else f"{by} (rate({pick_name}[{RATE}]))"

    finished = view.series(lambda m: m.finished, sel=sel)
    errors = view.series(lambda m: m.finished, sel=sel[:-1] + ', finished_reason=~"abort|error"}')
    if not all(m.finished.startswith("vllm:") for m in view.metrics):  # only vLLM labels the reason
        errors = None
    kv = view.series(lambda m: m.kv_usage, sel=sel)
    preempt = view.series(lambda m: m.preemptions, sel=sel)
    hits = view.series(lambda m: m.prefix_hits, sel=sel)
    queries = view.series(lambda m: m.prefix_queries, sel=sel)
    specs: list[PanelSpec] = [
        ("Requests finished per replica", "reqps", [("{{instance}}", f"{rate(finished)}")]),
        (
            "Requests aborted or failed per replica",
            "reqps",
            [("{{instance}}", f"{rate(errors)}")] if errors else [],
        ),
        ("Time to first token", "s", _percentiles(view, view.series(lambda m: m.ttft, "_bucket", sel))),
        ("Inter-token latency", "s", _percentiles(view, view.series(lambda m: m.itl, "_bucket", sel))),
        ("End-to-end latency", "s", _percentiles(view, view.series(lambda m: m.e2e, "_bucket", sel))),
        (
            "Requests running and waiting",
            "short",
            [
                ("running {{instance}}", f"{by} ({view.series(lambda m: m.running, sel=sel)})"),
                ("waiting {{instance}}", f"{by} ({view.series(lambda m: m.waiting, sel=sel)})"),
            ],
        ),
        ("KV cache usage", "percentunit", [("{{instance}}", f"max by (instance) ({kv})")]),
        ("Preemptions per second", "short", [("{{instance}}", f"{rate(preempt)}")] if preempt else []),
        (
            "Prefix-cache hit rate",
            "percentunit",
            [("{{instance}}", f"{rate(hits)} / {rate(queries)}")] if hits and queries else [],
        ),
        (
            "Tokens per second",
            "short",
            [
                ("prompt {{instance}}", f"{rate(view.series(lambda m: m.prompt_tokens, sel=sel))}"),
                ("generation {{instance}}", f"{rate(view.series(lambda m: m.generation_tokens, sel=sel))}"),
            ],
        ),
        (
            f"Engine up and restarts ({', '.join(view.releases)})",
            "short",
            [
                ("up {{instance}}", f"up{sel}"),
                ("restarts in 1h {{instance}}", f"changes(process_start_time_seconds{sel}[1h])"),
            ],
        ),
    ]
    return [spec for spec in specs if spec[2]]


def gateway_panels(view: ModelView) -> list[PanelSpec]:
    """HAProxy's view of the model: its backend is named after the model, a server `<host>-<port>`."""
    if not view.gateway:
        return []
    backend = f'{{{GATEWAY}, proxy="{view.name}"}}'
    five = f'{{{GATEWAY}, proxy="{view.name}", code="5xx"}}'
    return [
        (
            "Gateway requests and 5xx",
            "reqps",
            [
                ("requests", f"sum (rate(haproxy_backend_http_requests_total{backend}[{RATE}]))"),
                ("5xx", f"sum (rate(haproxy_backend_http_responses_total{five}[{RATE}]))"),
            ],
        ),
        (
            "Gateway 5xx per server",
            "reqps",
            [("{{server}}", f"sum by (server) (rate(haproxy_server_http_responses_total{five}[{RATE}]))")],
        ),
        ("Gateway server state", "short", [("{{server}} {{state}}", f"haproxy_server_status{backend} == 1")]),
        ("Gateway queue per server", "short", [("{{server}}", f"haproxy_server_current_queue{backend}")]),
    ]


def gpu_panels(view: ModelView) -> list[PanelSpec]:
    """DCGM Exporter's per-GPU figures on the model's hosts."""
    if not view.dcgm:
        return []
    sel = f'{{{DCGM}, host=~"{view.hosts_regex()}"}}'
    legend = "{{host}} GPU {{gpu}}"
    return [
        ("GPU utilisation", "percent", [(legend, f"DCGM_FI_DEV_GPU_UTIL{sel}")]),
        ("GPU memory used", "decmbytes", [(legend, f"DCGM_FI_DEV_FB_USED{sel}")]),
        ("GPU temperature", "celsius", [(legend, f"DCGM_FI_DEV_GPU_TEMP{sel}")]),
        ("GPU power", "watt", [(legend, f"DCGM_FI_DEV_POWER_USAGE{sel}")]),
        ("GPU last Xid", "short", [(legend, f"DCGM_FI_DEV_XID_ERRORS{sel}")]),
        (
            "GPU uncorrectable ECC (remapped rows)",
            "short",
            [(legend, f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{sel}")],
        ),
    ]
