//! What `/execute` streams: one JSON object per line, as E2B's
//! code-interpreter SDKs read it (`stdout` and `stderr` with `text` and
//! `timestamp`, `result`, `error` with `name`, `value` and `traceback`,
//! `number_of_executions`, `end_of_execution`), made from the Code
//! service's events by [`Lines`].

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{json, Map, Value};

use airlock_api::v1::{self as api, code_event::Event};

use super::results;

/// Turns a cell's events into E2B's lines, keeping what a stream's bytes
/// left of a UTF-8 character for its next chunk.
#[derive(Debug, Default)]
pub struct Lines {
    stdout: Utf8,
    stderr: Utf8,
    /// Whether the cell sent an error (so a dead interpreter is not told
    /// twice).
    errored: bool,
}

impl Lines {
    /// The lines for `event`, each ending in `\n`.
    pub fn event(&mut self, event: api::CodeEvent) -> Vec<Bytes> {
        let Some(event) = event.event else {
            return Vec::new();
        };
        match event {
            Event::Stdout(data) => stream("stdout", self.stdout.decode(&data)),
            Event::Stderr(data) => stream("stderr", self.stderr.decode(&data)),
            Event::Result(result) => {
                let mut fields = results::result_fields(&result);
                fields.insert("type".to_owned(), Value::String("result".to_owned()));
                vec![line(&Value::Object(fields))]
            }
            Event::Error(error) => {
                self.errored = true;
                vec![error_line(
                    &error.name,
                    &error.value,
                    &error.traceback.concat(),
                )]
            }
            Event::Done(done) => self.done(&done),
        }
    }

    /// The lines that end a cell: what the streams still held, an error if
    /// the interpreter died without one, the execution count, the end.
    fn done(&mut self, done: &api::CellDone) -> Vec<Bytes> {
        let mut lines = stream("stdout", self.stdout.finish());
        lines.extend(stream("stderr", self.stderr.finish()));
        if !self.errored {
            if done.timed_out {
                lines.push(error_line(
                    "TimeoutError",
                    "the cell ran past its timeout and was interrupted",
                    "",
                ));
            } else if done.context_restarted {
                lines.push(error_line(
                    "ContextRestarted",
                    "the interpreter died during the cell; its variables are gone",
                    "",
                ));
            }
        }
        lines.push(line(&json!({
            "type": "number_of_executions",
            "execution_count": done.execution_count,
        })));
        lines.push(line(&json!({"type": "end_of_execution"})));
        lines
    }

    /// The lines for a failure of the service in the middle of a cell: an
    /// error the SDKs show, then the end.
    pub fn failed(&mut self, message: &str) -> Vec<Bytes> {
        let mut lines = stream("stdout", self.stdout.finish());
        lines.extend(stream("stderr", self.stderr.finish()));
        lines.push(error_line("SandboxError", message, ""));
        lines.push(line(&json!({"type": "end_of_execution"})));
        lines
    }
}

fn stream(name: &str, text: String) -> Vec<Bytes> {
    if text.is_empty() {
        return Vec::new();
    }
    vec![line(&json!({
        "type": name,
        "text": text,
        "timestamp": now_ns(),
    }))]
}

fn error_line(name: &str, value: &str, traceback: &str) -> Bytes {
    let mut fields = Map::new();
    fields.insert("type".to_owned(), "error".into());
    fields.insert("name".to_owned(), name.into());
    fields.insert("value".to_owned(), value.into());
    fields.insert("traceback".to_owned(), traceback.into());
    line(&Value::Object(fields))
}

fn line(value: &Value) -> Bytes {
    let mut bytes = value.to_string().into_bytes();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// Nanoseconds since the Unix epoch (E2B's `OutputMessage.timestamp`).
fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|since| u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// An incremental UTF-8 decoder: a character split between two chunks is
/// kept for the next; bytes that can never be UTF-8 become U+FFFD.
#[derive(Debug, Default)]
struct Utf8 {
    pending: Vec<u8>,
}

impl Utf8 {
    fn decode(&mut self, data: &[u8]) -> String {
        self.pending.extend_from_slice(data);
        let mut text = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    text.push_str(valid);
                    rest = &[];
                    break;
                }
                Err(error) => {
                    let (valid, after) = rest.split_at(error.valid_up_to());
                    text.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match error.error_len() {
                        Some(bad) => {
                            text.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[bad..];
                        }
                        // An incomplete character at the end: wait for more.
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        text
    }

    /// What is left at the end of the stream.
    fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(lines: &[Bytes]) -> Vec<Value> {
        lines
            .iter()
            .map(|line| {
                assert!(line.ends_with(b"\n"), "every line ends in a newline");
                serde_json::from_slice(line).expect("a JSON line")
            })
            .collect()
    }

    fn event(event: Event) -> api::CodeEvent {
        api::CodeEvent { event: Some(event) }
    }

    #[test]
    fn output_and_the_end_are_the_lines_the_sdks_read() {
        let mut lines = Lines::default();
        let out = parse(&lines.event(event(Event::Stdout(Bytes::from_static(b"hi\n")))));
        assert_eq!(out[0]["type"], "stdout");
        assert_eq!(out[0]["text"], "hi\n");
        assert!(out[0]["timestamp"].as_u64().is_some_and(|ns| ns > 0));
        let end = parse(&lines.event(event(Event::Done(api::CellDone {
            status: api::CellStatus::Ok.into(),
            execution_count: 3,
            ..Default::default()
        }))));
        assert_eq!(
            end,
            vec![
                json!({"type": "number_of_executions", "execution_count": 3}),
                json!({"type": "end_of_execution"}),
            ]
        );
    }

    #[test]
    fn an_error_carries_name_value_and_one_traceback_text() {
        let mut lines = Lines::default();
        let got = parse(&lines.event(event(Event::Error(api::CodeError {
            name: "ZeroDivisionError".into(),
            value: "division by zero".into(),
            traceback: vec![
                "Traceback:\n".into(),
                "ZeroDivisionError: division by zero\n".into(),
            ],
        }))));
        assert_eq!(
            got[0],
            json!({
                "type": "error",
                "name": "ZeroDivisionError",
                "value": "division by zero",
                "traceback": "Traceback:\nZeroDivisionError: division by zero\n",
            })
        );
        // The interpreter died after it: no second error.
        let end = parse(&lines.event(event(Event::Done(api::CellDone {
            context_restarted: true,
            ..Default::default()
        }))));
        assert_eq!(end.len(), 2);
    }

    #[test]
    fn a_character_split_between_chunks_arrives_whole() {
        let mut lines = Lines::default();
        let first = lines.event(event(Event::Stdout(Bytes::from_static(b"caf\xc3"))));
        assert_eq!(parse(&first)[0]["text"], "caf");
        let second = lines.event(event(Event::Stdout(Bytes::from_static(b"\xa9 \xff!"))));
        assert_eq!(parse(&second)[0]["text"], "\u{e9} \u{fffd}!");
    }

    #[test]
    fn a_dead_interpreter_or_a_timeout_is_an_error() {
        let mut lines = Lines::default();
        let end = parse(&lines.event(event(Event::Done(api::CellDone {
            timed_out: true,
            ..Default::default()
        }))));
        assert_eq!(end[0]["type"], "error");
        assert_eq!(end[0]["name"], "TimeoutError");
        let failed = parse(&Lines::default().failed("sandbox x ended"));
        assert_eq!(failed[0]["value"], "sandbox x ended");
        assert_eq!(failed[1]["type"], "end_of_execution");
    }
}
