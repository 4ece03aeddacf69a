"""An OTLP/HTTP receiver on 127.0.0.1 that decodes what exporters send (protobuf), for tests.

Spans and metric data points are kept as plain dicts: names, attributes (decoded from OTLP's
AnyValue), ids, kinds and statuses, so a test can assert what a collector would receive.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def any_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in pairs}


class OTLPReceiver:
    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.metrics: dict[str, list[dict[str, Any]]] = {}  # name -> data points (attributes, value)
        self.resources: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver._receive(self.path, body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def _receive(self, path: str, body: bytes) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        with self._lock:
            self.paths.append(path)
            if path == "/v1/traces":
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    self.resources.append(attributes(resource_spans.resource.attributes))
                    for scope in resource_spans.scope_spans:
                        for span in scope.spans:
                            self.spans.append(
                                {
                                    "name": span.name,
                                    "attributes": attributes(span.attributes),
                                    "trace_id": span.trace_id.hex(),
                                    "span_id": span.span_id.hex(),
                                    "parent_span_id": span.parent_span_id.hex(),
                                    "kind": span.kind,
                                    "status": span.status.code,
                                    "start": span.start_time_unix_nano,
                                    "end": span.end_time_unix_nano,
                                }
                            )
            elif path == "/v1/metrics":
                request = ExportMetricsServiceRequest.FromString(body)
                for resource_metrics in request.resource_metrics:
                    for scope in resource_metrics.scope_metrics:
                        for metric in scope.metrics:
                            data = getattr(metric, metric.WhichOneof("data"))
                            points = self.metrics.setdefault(metric.name, [])
                            for point in data.data_points:
                                value = (
                                    point.as_int
                                    if hasattr(point, "as_int") and point.HasField("as_int")
                                    else getattr(point, "sum", None)
                                )
                                points.append({"attributes": attributes(point.attributes), "value": value})

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> OTLPReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
