//! How the `airlock` binary logs: the tracing subscriber it installs, on
//! stderr, as text (every command) or as JSON lines (`airlock serve
//! --log-format json`), and with `serve --otlp-endpoint` the OTLP exporter
//! of `telemetry` beside it.
//!
//! The log shows warnings, Airlock's progress with `--verbose`, anything
//! with `RUST_LOG`; the traces take the spans of Airlock's crates whatever
//! the log shows. [`notice`] says what a script reads off `serve`'s stderr
//! (the addresses it listens on) in the log's format.

use std::fmt::Display;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use super::telemetry::{self, BoxedLayer, Telemetry, TelemetryError};

/// The target of [`notice`]'s events, shown whatever the filter.
const NOTICE_TARGET: &str = "airlock::notice";

/// How the log is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON object a line: timestamp, level, target, fields, and the
    /// spans the event happened in.
    Json,
}

/// `airlock serve`'s options for its log and traces.
#[derive(Debug, Clone, clap::Args)]
pub struct LogOptions {
    /// How the log on stderr is written: text, or json (one object a line,
    /// with timestamp, level, target, fields and the current spans; the
    /// listening addresses too).
    #[arg(long, value_name = "FORMAT", default_value = "text")]
    pub log_format: LogFormat,

    /// Export traces (a span per API call, the parts of each sandbox's
    /// start under it) over OTLP/gRPC to this plain http://HOST:PORT (an
    /// OpenTelemetry Collector or Jaeger: http://127.0.0.1:4317). Nothing
    /// is exported without it.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// The `service.name` of the traces exported.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "airlock-server",
        requires = "otlp_endpoint"
    )]
    pub otlp_service_name: String,
}

/// Why the subscriber could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    #[error("cannot install the log")]
    Installed(#[source] tracing_subscriber::util::TryInitError),
}

/// Installs the subscriber: the log as `options` say (text without them),
/// and the OTLP exporter they ask for. Call it with the tokio runtime
/// entered; keep the [`Telemetry`] to flush at the end.
pub fn init(verbose: bool, options: Option<&LogOptions>) -> Result<Telemetry, LoggingError> {
    let format = options.map_or(LogFormat::Text, |options| options.log_format);
    let mut layers: Vec<BoxedLayer<Registry>> = vec![log_layer(verbose, format)];
    let mut telemetry = Telemetry::default();
    if let Some((endpoint, options)) =
        options.and_then(|o| o.otlp_endpoint.as_deref().map(|endpoint| (endpoint, o)))
    {
        let (layer, exporter) = telemetry::otlp_layer(endpoint, &options.otlp_service_name)?;
        layers.push(layer);
        telemetry = exporter;
    }
    tracing_subscriber::registry()
        .with(layers)
        .try_init()
        .map_err(LoggingError::Installed)?;
    Ok(telemetry)
}

/// The log on stderr, in `format`, filtered by `--verbose` or `RUST_LOG`.
fn log_layer(verbose: bool, format: LogFormat) -> BoxedLayer<Registry> {
    let default = if verbose { "airlock=info" } else { "warn" };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => {
            let filter = match NOTICE_TARGET.parse() {
                Ok(directive) => filter.add_directive(directive),
                Err(_) => filter,
            };
            tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(true)
                .with_span_list(true)
                .with_writer(std::io::stderr)
                .with_filter(filter)
                .boxed()
        }
    }
}

/// Says on stderr what `serve` has bound: `airlock: WHAT on ADDRESS` as
/// text, an INFO event of target `airlock::notice` with the field
/// `address` as JSON.
pub fn notice(format: LogFormat, what: &str, address: impl Display) {
    match format {
        LogFormat::Text => eprintln!("airlock: {what} on {address}"),
        LogFormat::Json => {
            tracing::info!(target: NOTICE_TARGET, %address, "{what} on {address}");
        }
    }
}

/// Says on stderr why `serve` failed: `airlock: MESSAGE` as text, an ERROR
/// event as JSON.
pub fn failure(format: LogFormat, message: &str) {
    match format {
        LogFormat::Text => eprintln!("airlock: {message}"),
        LogFormat::Json => tracing::error!(target: NOTICE_TARGET, "{message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Args {
        #[command(flatten)]
        log: LogOptions,
    }

    #[test]
    fn the_log_is_text_and_nothing_is_exported_by_default() {
        let args = Args::try_parse_from(["serve"]).unwrap();
        assert_eq!(args.log.log_format, LogFormat::Text);
        assert_eq!(args.log.otlp_endpoint, None);
        assert_eq!(args.log.otlp_service_name, "airlock-server");
    }

    #[test]
    fn json_and_an_endpoint_with_a_name_are_taken() {
        let args = Args::try_parse_from([
            "serve",
            "--log-format",
            "json",
            "--otlp-endpoint",
            "http://127.0.0.1:4317",
            "--otlp-service-name",
            "airlock-eu",
        ])
        .unwrap();
        assert_eq!(args.log.log_format, LogFormat::Json);
        assert_eq!(
            args.log.otlp_endpoint.as_deref(),
            Some("http://127.0.0.1:4317")
        );
        assert_eq!(args.log.otlp_service_name, "airlock-eu");
        assert!(Args::try_parse_from(["serve", "--log-format", "xml"]).is_err());
        assert!(
            Args::try_parse_from(["serve", "--otlp-service-name", "x"]).is_err(),
            "a name needs an endpoint"
        );
    }
}
