"""An OTLP/HTTP traces receiver for the telemetry test (tests/telemetry.rs).

No registry ships the OpenTelemetry Collector, so this stands in for it: it takes
`POST /v1/traces` with an `application/x-protobuf` ExportTraceServiceRequest, decodes it with the
official protobuf definitions (PyPI's opentelemetry-proto), answers an empty
ExportTraceServiceResponse, and appends each span to the file named by argv[1] as one JSON line.
It prints the port it listens on (loopback, chosen by the OS) as its first line of output.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Lock

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = sys.argv[1]
LOCK = Lock()


def value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind is None:
        return None
    return getattr(v, kind)


def attributes(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.send_response(415 if self.path == "/v1/traces" else 404)
            self.end_headers()
            return
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except DecodeError:
            self.send_response(400)
            self.end_headers()
            return
        lines = []
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(
                        json.dumps(
                            {
                                "resource": resource,
                                "scope": scope_spans.scope.name,
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent_span_id": span.parent_span_id.hex(),
                                "name": span.name,
                                "kind": span.kind,
                                "start_ns": span.start_time_unix_nano,
                                "end_ns": span.end_time_unix_nano,
                                "attributes": attributes(span.attributes),
                                "events": [
                                    {"name": e.name, "time_ns": e.time_unix_nano, "attributes": attributes(e.attributes)}
                                    for e in span.events
                                ],
                                "status": {"code": span.status.code, "message": span.status.message},
                            }
                        )
                    )
        with LOCK, open(OUT, "a", encoding="utf-8") as out:
            for line in lines:
                out.write(line + "\n")
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
