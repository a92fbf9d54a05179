//! `[telemetry]`: the OpenTelemetry SDK's tracer provider with a batch span processor and the OTLP/HTTP
//! (protobuf) exporter, sending through this process's reqwest on its tokio runtime (no second HTTP
//! stack). The runtime makes the spans ([`tollgate_agent_runtime::telemetry`]); this only ships them.
//! Off unless `[telemetry] endpoint` is set. Delivery never blocks a run: spans queue in the batch
//! processor (2,048 at most; more are dropped and counted by the SDK) and are sent from its own thread.

use crate::AppError;
use bytes::Bytes;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tollgate_agent_config::TelemetryConfig;
use tollgate_agent_runtime::Telemetry;

/// The running exporter of a process: flushed and stopped by [`Exporter::shutdown`].
#[derive(Debug)]
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Sends the spans still queued (within the export timeout) and stops the exporter's thread. Run on a
    /// blocking thread: the SDK waits for its thread, whose export runs on this tokio runtime.
    pub async fn shutdown(&self) {
        let provider = self.provider.clone();
        let stopped = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        match stopped {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "could not send the last spans to the telemetry endpoint"),
            Err(error) => tracing::warn!(%error, "the telemetry exporter did not stop cleanly"),
        }
    }
}

/// The runtime's telemetry and its exporter, from `config`; `None` when `[telemetry] endpoint` is unset.
/// Must be called inside a tokio runtime (the exporter sends on it).
///
/// # Errors
/// [`AppError::Telemetry`] when the exporter cannot be built (an endpoint the HTTP client refuses).
pub fn start(config: &TelemetryConfig) -> Result<Option<(Telemetry, Exporter)>, AppError> {
    let Some(endpoint) = &config.endpoint else { return Ok(None) };
    let failed = |message: String| AppError::Telemetry { endpoint: endpoint.clone(), message };
    let client = reqwest::Client::builder().timeout(config.timeout).build().map_err(|e| failed(e.to_string()))?;
    let client = OnTokio { client, handle: tokio::runtime::Handle::current() };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint.clone())
        .with_timeout(config.timeout)
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let resource = Resource::builder()
        .with_service_name(config.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
    let tracer = provider.tracer("tollgate");
    let telemetry = Telemetry::new(tracer, config.sample_ratio, config.content);
    Ok(Some((telemetry, Exporter { provider })))
}

/// OTLP's HTTP client: each request is made by reqwest on the process's tokio runtime, awaited from the
/// batch processor's thread.
#[derive(Debug)]
struct OnTokio {
    client: reqwest::Client,
    handle: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for OnTokio {
    async fn send_bytes(&self, request: http::Request<Bytes>) -> Result<http::Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let request = self.client.request(parts.method, parts.uri.to_string()).headers(parts.headers).body(body);
        let sent = self.handle.spawn(async move {
            let response = request.send().await?;
            let (status, headers) = (response.status(), response.headers().clone());
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>((status, headers, body))
        });
        let (status, headers, body) = sent.await??;
        let mut response = http::Response::new(body);
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        Ok(response)
    }
}
