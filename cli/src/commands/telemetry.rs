//! OpenTelemetry traces over OTLP/gRPC, for `airlock serve --otlp-endpoint`
//! (the `otlp` cargo feature, on by default).
//!
//! [`otlp_layer`] makes the exporter (a lazy tonic channel to the
//! endpoint: it needs the tokio runtime entered), a tracer provider with a
//! batch processor (its own thread, exporting every few seconds) and the
//! `tracing` layer that turns the spans of Airlock's crates into
//! OpenTelemetry spans. [`Telemetry::shutdown`] exports what is left when
//! the command ends. Only the flags configure it: the resource is the
//! service's name and version, not `OTEL_SERVICE_NAME` or
//! `OTEL_RESOURCE_ATTRIBUTES` (the exporter still reads its own
//! `OTEL_EXPORTER_OTLP_*` headers, timeout and compression).
//!
//! Built without the feature, asking for OTLP is an error that says so.

use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The layer [`otlp_layer`] makes.
pub type BoxedLayer<S> = Box<dyn Layer<S> + Send + Sync + 'static>;

/// Why the traces cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[cfg(not(feature = "otlp"))]
    #[error(
        "this airlock was built without OTLP (cargo feature `otlp`); \
         build it with default features to use --otlp-endpoint"
    )]
    NotBuilt,
    #[cfg(feature = "otlp")]
    #[error(
        "--otlp-endpoint {endpoint:?} is not a plain http://HOST:PORT URL (an OTLP/gRPC \
         receiver; for TLS, run an OpenTelemetry Collector beside the server)"
    )]
    Endpoint { endpoint: String },
    #[cfg(feature = "otlp")]
    #[error("cannot make the OTLP exporter")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
}

/// The exporter, kept so that the end of the command can flush it.
#[derive(Debug, Default)]
pub struct Telemetry {
    #[cfg(feature = "otlp")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans still queued (for 5 s at most) and stops the
    /// exporter. Call it outside the runtime's tasks, while the runtime
    /// runs: the export goes through its channel.
    pub fn shutdown(self) {
        #[cfg(feature = "otlp")]
        if let Some(provider) = self.provider {
            if let Err(error) = provider.shutdown() {
                tracing::warn!(%error, "cannot send the last traces");
            }
        }
    }
}

/// The target prefix of the spans exported: Airlock's crates (`airlock`,
/// `airlock_server`, `airlock_gateway`, ...).
#[cfg(feature = "otlp")]
const EXPORTED_TARGETS: &str = "airlock";

/// Checks `endpoint`: `http://HOST:PORT`.
#[cfg(feature = "otlp")]
fn check_endpoint(endpoint: &str) -> Result<(), TelemetryError> {
    let refused = || TelemetryError::Endpoint {
        endpoint: endpoint.to_owned(),
    };
    let uri: tonic::transport::Uri = endpoint.parse().map_err(|_| refused())?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(_)) => Ok(()),
        _ => Err(refused()),
    }
}

/// The layer that exports the spans of Airlock's crates (INFO and above,
/// whatever `RUST_LOG` says) to `endpoint` as `service_name`, and the
/// handle that flushes it.
#[cfg(feature = "otlp")]
pub fn otlp_layer<S>(
    endpoint: &str,
    service_name: &str,
) -> Result<(BoxedLayer<S>, Telemetry), TelemetryError>
where
    S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::WithExportConfig as _;

    check_endpoint(endpoint)?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(TelemetryError::Exporter)?;
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_service_name(service_name.to_owned())
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("airlock");
    let filter = tracing_subscriber::filter::Targets::new()
        .with_target(EXPORTED_TARGETS, tracing::Level::INFO);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_threads(false)
        .with_filter(filter)
        .boxed();
    tracing::debug!(endpoint, service_name, "exporting traces over OTLP");
    Ok((
        layer,
        Telemetry {
            provider: Some(provider),
        },
    ))
}

/// Built without the `otlp` feature: always `TelemetryError::NotBuilt`.
#[cfg(not(feature = "otlp"))]
pub fn otlp_layer<S>(
    _endpoint: &str,
    _service_name: &str,
) -> Result<(BoxedLayer<S>, Telemetry), TelemetryError>
where
    S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    Err(TelemetryError::NotBuilt)
}

#[cfg(all(test, feature = "otlp"))]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_http_endpoint_is_taken() {
        assert!(check_endpoint("http://127.0.0.1:4317").is_ok());
        assert!(check_endpoint("http://collector:4317").is_ok());
        for refused in ["https://collector:4317", "127.0.0.1:4317", "", "http://"] {
            assert!(check_endpoint(refused).is_err(), "{refused:?}");
        }
    }
}
