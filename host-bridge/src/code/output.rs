//! What a cell produces: [`MimeBundle`]s (a value, a display), a
//! [`CellError`], how it ended ([`CellDone`]), and all of it collected
//! ([`CellOutput`]).

use std::time::Duration;

use airlock_proto::v1::{CellDone as ProtoDone, CellStatus as ProtoStatus, RichOutput};
use bytes::Bytes;

/// One output in several representations, by MIME type (Jupyter's MIME
/// bundle). `text/plain` is always there; text types are UTF-8,
/// `application/json` is JSON text, and binary images (`image/png`,
/// `image/jpeg`) are their raw bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MimeBundle {
    items: Vec<(String, Bytes)>,
}

impl MimeBundle {
    /// `text/plain`.
    pub const TEXT: &'static str = "text/plain";
    /// `application/json`.
    pub const JSON: &'static str = "application/json";
    /// `image/png`.
    pub const PNG: &'static str = "image/png";
    /// `text/html`.
    pub const HTML: &'static str = "text/html";
    /// `text/markdown`.
    pub const MARKDOWN: &'static str = "text/markdown";
    /// A matplotlib figure's chart data (JSON, beside its `image/png`):
    /// `application/vnd.airlock.chart+json`, in the vocabulary of E2B's
    /// charts (docs/protocol.md, "Code").
    pub const CHART: &'static str = airlock_proto::contract::code::CHART_MIME_TYPE;

    pub(crate) fn from_proto(output: RichOutput) -> MimeBundle {
        MimeBundle {
            items: output
                .data
                .into_iter()
                .map(|item| (item.mime_type, item.data))
                .collect(),
        }
    }

    /// A bundle of the given representations (for tests and front ends).
    pub fn from_items(items: impl IntoIterator<Item = (String, Bytes)>) -> MimeBundle {
        MimeBundle {
            items: items.into_iter().collect(),
        }
    }

    /// The bytes of one representation.
    pub fn get(&self, mime_type: &str) -> Option<&Bytes> {
        self.items
            .iter()
            .find(|(mime, _)| mime == mime_type)
            .map(|(_, data)| data)
    }

    /// A text representation, if it is there and UTF-8.
    pub fn get_text(&self, mime_type: &str) -> Option<&str> {
        std::str::from_utf8(self.get(mime_type)?).ok()
    }

    /// `text/plain`: the value's repr.
    pub fn text(&self) -> Option<&str> {
        self.get_text(Self::TEXT)
    }

    /// `application/json`, parsed (present when the value is JSON-able).
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(self.get(Self::JSON)?).ok()
    }

    /// `image/png`'s bytes.
    pub fn png(&self) -> Option<&Bytes> {
        self.get(Self::PNG)
    }

    /// `text/html`.
    pub fn html(&self) -> Option<&str> {
        self.get_text(Self::HTML)
    }

    /// `text/markdown`.
    pub fn markdown(&self) -> Option<&str> {
        self.get_text(Self::MARKDOWN)
    }

    /// Every representation, `text/plain` first.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Bytes)> {
        self.items.iter().map(|(mime, data)| (mime.as_str(), data))
    }
}

/// An exception a cell raised (or, for bash, a non-zero status; for a
/// cell whose interpreter died, `InterpreterDied`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CellError {
    /// The exception's class name (`ZeroDivisionError`).
    pub name: String,
    /// Its message (`division by zero`).
    pub value: String,
    /// The traceback as Python prints it, naming the cell (`<cell-N>`) and
    /// the line.
    pub traceback: Vec<String>,
}

impl std::fmt::Display for CellError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.value.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}: {}", self.name, self.value)
        }
    }
}

/// How a cell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CellStatus {
    /// It ran to its end.
    Ok,
    /// It raised (Python) or ended with a non-zero status (bash).
    Error,
    /// It was interrupted: `Contexts::interrupt`, its deadline, or its client
    /// going away.
    Interrupted,
}

/// The end of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellDone {
    /// OK, error or interrupted.
    pub status: CellStatus,
    /// Its number in its interpreter (1 for the first cell after a start or
    /// restart).
    pub execution_count: u32,
    /// Its deadline passed.
    pub timed_out: bool,
    /// The context's earlier state is gone: the interpreter died or was
    /// killed during the cell, or had died before it.
    pub context_restarted: bool,
    /// From its start to its end in the guest.
    pub duration: Duration,
}

impl CellDone {
    pub(crate) fn from_proto(done: &ProtoDone) -> CellDone {
        CellDone {
            status: match done.status() {
                ProtoStatus::Ok => CellStatus::Ok,
                ProtoStatus::Interrupted => CellStatus::Interrupted,
                ProtoStatus::Error | ProtoStatus::Unspecified => CellStatus::Error,
            },
            execution_count: done.execution_count,
            timed_out: done.timed_out,
            context_restarted: done.context_restarted,
            duration: Duration::from_micros(done.duration_us),
        }
    }
}

/// Everything a finished cell produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellOutput {
    /// What it wrote to stdout (and programs it started).
    pub stdout: Vec<u8>,
    /// What it wrote to stderr.
    pub stderr: Vec<u8>,
    /// The value of its last expression.
    pub result: Option<MimeBundle>,
    /// Rich outputs shown during it, in order (display(), plots).
    pub displays: Vec<MimeBundle>,
    /// What it raised.
    pub error: Option<CellError>,
    /// How it ended.
    pub done: CellDone,
}

impl CellOutput {
    /// The value's `text/plain` (its repr), if the cell had a value.
    pub fn text(&self) -> Option<&str> {
        self.result.as_ref()?.text()
    }

    /// The value as JSON, if it had a JSON-able value.
    pub fn json(&self) -> Option<serde_json::Value> {
        self.result.as_ref()?.json()
    }

    /// The PNG images among its displays and result, in order.
    pub fn pngs(&self) -> impl Iterator<Item = &Bytes> {
        self.displays
            .iter()
            .chain(self.result.as_ref())
            .filter_map(MimeBundle::png)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_answers_by_type() {
        let bundle = MimeBundle::from_items([
            ("text/plain".to_owned(), Bytes::from_static(b"{'a': 1}")),
            (
                "application/json".to_owned(),
                Bytes::from_static(b"{\"a\":1}"),
            ),
            ("image/png".to_owned(), Bytes::from_static(b"\x89PNG")),
        ]);
        assert_eq!(bundle.text(), Some("{'a': 1}"));
        assert_eq!(bundle.json(), Some(serde_json::json!({"a": 1})));
        assert_eq!(bundle.png().map(|b| &b[..]), Some(&b"\x89PNG"[..]));
        assert_eq!(bundle.html(), None);
        let error = CellError {
            name: "ValueError".into(),
            value: "bad".into(),
            traceback: vec![],
        };
        assert_eq!(error.to_string(), "ValueError: bad");
    }
}
