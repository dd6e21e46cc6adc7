//! A cell's rich output (`CodeResult`: a MIME bundle) as the `result` line
//! E2B's code-interpreter SDKs read: one field per representation (`text`,
//! `html`, `markdown`, `svg`, `png`, `jpeg`, `pdf`, `latex`, `json`,
//! `javascript`), a matplotlib figure's chart data ([`MimeBundle::CHART`],
//! which the agent's interpreter sends beside the PNG, already in E2B's
//! chart vocabulary) as `chart`, other MIME types under `extra`, and
//! `is_main_result`.
//!
//! Binary images and PDF travel as base64 text, as Jupyter carries them.
//! Our interpreter adds `application/json` to any value that is JSON
//! (`42`, `[1, 2]`, `{'a': 1}`); E2B's IPython kernel gives such a value
//! only as text, so a JSON representation that is nothing but the value's
//! own repr (its `text/plain`) is left out ([`python_repr`]).

use base64::Engine;
use serde_json::{Map, Value};

use airlock::MimeBundle;
use airlock_api::v1 as api;

/// The field of E2B's `Result` for `mime`, if it has one.
fn field(mime: &str) -> Option<&'static str> {
    Some(match mime {
        "text/plain" => "text",
        "text/html" => "html",
        "text/markdown" => "markdown",
        "image/svg+xml" => "svg",
        "image/png" => "png",
        "image/jpeg" => "jpeg",
        "application/pdf" => "pdf",
        "text/latex" => "latex",
        "application/json" => "json",
        "application/javascript" => "javascript",
        MimeBundle::CHART => "chart",
        _ => return None,
    })
}

/// Whether `mime` is binary (sent as base64).
fn is_binary(mime: &str) -> bool {
    mime == "application/pdf" || (mime.starts_with("image/") && mime != "image/svg+xml")
}

/// The value of one representation: base64 text for binary types, the
/// JSON itself for JSON types (text if it does not parse), text otherwise.
fn value(mime: &str, data: &[u8]) -> Value {
    if is_binary(mime) {
        return Value::String(base64::engine::general_purpose::STANDARD.encode(data));
    }
    let text = String::from_utf8_lossy(data);
    if mime == "application/json" || mime.ends_with("+json") {
        if let Ok(json) = serde_json::from_str::<Value>(&text) {
            return json;
        }
    }
    Value::String(text.into_owned())
}

/// The `result` line (without its `type`) for `result`.
pub fn result_fields(result: &api::CodeResult) -> Map<String, Value> {
    let mut fields = Map::new();
    let mut extra = Map::new();
    let plain = result
        .items
        .iter()
        .find(|item| item.mime_type == "text/plain")
        .map(|item| String::from_utf8_lossy(&item.data).into_owned());
    for item in &result.items {
        let value = value(&item.mime_type, &item.data);
        match field(&item.mime_type) {
            Some("json")
                if plain
                    .as_deref()
                    .is_some_and(|plain| python_repr(&value).as_deref() == Some(plain)) => {}
            Some(name) => {
                fields.insert(name.to_owned(), value);
            }
            None => {
                extra.insert(item.mime_type.clone(), value);
            }
        }
    }
    if !extra.is_empty() {
        fields.insert("extra".to_owned(), Value::Object(extra));
    }
    fields.insert(
        "is_main_result".to_owned(),
        Value::Bool(result.is_main_result),
    );
    fields
}

/// Python's `repr` of a JSON value, where it is certain (numbers as JSON
/// writes them, booleans, `None`, plain strings, and lists and dicts of
/// those); `None` where it is not.
fn python_repr(value: &Value) -> Option<String> {
    Some(match value {
        Value::Null => "None".to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(number) => {
            let text = number.to_string();
            // JSON writes 1e20 where Python writes 1e+20: not certain.
            if text.contains(['e', 'E']) {
                return None;
            }
            text
        }
        Value::String(text) => {
            if text
                .chars()
                .any(|c| c == '\'' || c == '\\' || c.is_control())
            {
                return None;
            }
            format!("'{text}'")
        }
        Value::Array(items) => {
            let items = items.iter().map(python_repr).collect::<Option<Vec<_>>>()?;
            format!("[{}]", items.join(", "))
        }
        Value::Object(entries) => {
            let entries = entries
                .iter()
                .map(|(key, value)| {
                    Some(format!(
                        "{}: {}",
                        python_repr(&Value::String(key.clone()))?,
                        python_repr(value)?
                    ))
                })
                .collect::<Option<Vec<_>>>()?;
            format!("{{{}}}", entries.join(", "))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(mime: &str, data: &[u8]) -> api::MimeItem {
        api::MimeItem {
            mime_type: mime.to_owned(),
            data: data.to_vec().into(),
        }
    }

    fn result(items: Vec<api::MimeItem>, main: bool) -> Value {
        Value::Object(result_fields(&api::CodeResult {
            items,
            is_main_result: main,
        }))
    }

    #[test]
    fn a_plain_value_is_text_only_as_ipython_gives_it() {
        let got = result(
            vec![item("text/plain", b"42"), item("application/json", b"42")],
            true,
        );
        assert_eq!(
            got,
            serde_json::json!({"text": "42", "is_main_result": true})
        );
        let got = result(
            vec![
                item("text/plain", b"{'a': [1, 2.5, None, True]}"),
                item("application/json", br#"{"a": [1, 2.5, null, true]}"#),
            ],
            true,
        );
        assert_eq!(
            got,
            serde_json::json!({"text": "{'a': [1, 2.5, None, True]}", "is_main_result": true})
        );
    }

    #[test]
    fn an_objects_own_json_is_kept() {
        let got = result(
            vec![
                item("text/plain", b"<Report object>"),
                item("application/json", br#"{"rows": 3}"#),
            ],
            false,
        );
        assert_eq!(
            got,
            serde_json::json!({"text": "<Report object>", "json": {"rows": 3}, "is_main_result": false})
        );
    }

    #[test]
    fn a_figures_chart_data_is_the_chart_field() {
        let chart = br#"{"type": "line", "title": "t", "elements": []}"#;
        let got = result(
            vec![
                item("text/plain", b"<Figure size 640x480 with 1 Axes>"),
                item("image/png", &[0x89, b'P', b'N', b'G']),
                item(MimeBundle::CHART, chart),
            ],
            false,
        );
        assert_eq!(
            got,
            serde_json::json!({
                "text": "<Figure size 640x480 with 1 Axes>",
                "png": "iVBORw==",
                "chart": {"type": "line", "title": "t", "elements": []},
                "is_main_result": false,
            })
        );
    }

    #[test]
    fn images_are_base64_svg_is_text_and_the_rest_is_extra() {
        let got = result(
            vec![
                item("image/png", &[0x89, b'P', b'N', b'G']),
                item("image/svg+xml", b"<svg/>"),
                item("text/html", b"<b>x</b>"),
                item("application/vnd.custom", b"raw"),
            ],
            false,
        );
        assert_eq!(
            got,
            serde_json::json!({
                "png": "iVBORw==",
                "svg": "<svg/>",
                "html": "<b>x</b>",
                "extra": {"application/vnd.custom": "raw"},
                "is_main_result": false,
            })
        );
    }
}
