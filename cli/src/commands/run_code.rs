//! `airlock sandbox run-code ID [--lang L] [--context C] (-c CODE | FILE)`:
//! a cell of code in one of a sandbox's persistent contexts, through the
//! server.
//!
//! Without `--json`, output goes to the host's streams as it comes: stdout
//! and stderr as written, rich outputs and the value as their text (a PNG
//! is saved to a file whose path is printed), an error as its traceback on
//! stderr. With `--json`, one JSON object at the end holds all of it (PNGs
//! as saved files). The exit code is 0 for a cell that ran to its end, 1
//! for one that raised, 124 past `--timeout`, 130 when interrupted, 125 when
//! Airlock itself failed.

use std::io::Write;
use std::path::{Path, PathBuf};

use airlock::{CellEvent, CellStatus, Language, MimeBundle};
use airlock_client::api;
use serde_json::{json, Map, Value};

use super::remote::{cell_event, message, ServerOptions};
use super::session::fail;
use super::EXIT_AIRLOCK_ERROR;

/// `airlock sandbox run-code` options.
#[derive(Debug, clap::Args)]
pub struct RunCodeArgs {
    /// The sandbox, as `create` printed it.
    pub id: String,

    /// The language: python or bash.
    #[arg(long, short = 'l', default_value = "python")]
    pub lang: Language,

    /// The context to run in, created on first use (default: the
    /// language's own context). Variables persist per context.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,

    /// The code to run.
    #[arg(short = 'c', value_name = "CODE", conflicts_with = "file")]
    pub code: Option<String>,

    /// A file holding the code to run (`-` for stdin).
    #[arg(value_name = "FILE", required_unless_present = "code")]
    pub file: Option<PathBuf>,

    /// Interrupt the cell after SECS seconds (exit code 124).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,

    /// Print one JSON object with every output instead of the outputs as
    /// they come.
    #[arg(long)]
    pub json: bool,

    /// Where to save images (default: a new directory under the system's
    /// temporary directory).
    #[arg(long, value_name = "DIR")]
    pub save_dir: Option<PathBuf>,
}

impl RunCodeArgs {
    /// The cell's source: `-c`, a file, or stdin.
    fn source(&self) -> Result<String, String> {
        match (&self.code, &self.file) {
            (Some(code), _) => Ok(code.clone()),
            (None, Some(path)) if path == Path::new("-") => {
                std::io::read_to_string(std::io::stdin())
                    .map_err(|e| format!("cannot read the code from stdin: {e}"))
            }
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display())),
            (None, None) => Err("no code: give -c CODE or a FILE".into()),
        }
    }
}

/// Where images go: created on the first one.
struct Images {
    dir: Option<PathBuf>,
    asked: Option<PathBuf>,
    count: usize,
}

impl Images {
    fn new(asked: Option<PathBuf>) -> Images {
        Images {
            dir: None,
            asked,
            count: 0,
        }
    }

    /// Saves `data` as the next `output-N.EXT`; returns its path.
    fn save(&mut self, mime: &str, data: &[u8]) -> Result<PathBuf, String> {
        let dir = match &self.dir {
            Some(dir) => dir.clone(),
            None => {
                let dir = match &self.asked {
                    Some(dir) => {
                        std::fs::create_dir_all(dir)
                            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                        std::path::absolute(dir).unwrap_or_else(|_| dir.clone())
                    }
                    None => tempfile::Builder::new()
                        .prefix("airlock-run-code-")
                        .tempdir()
                        .map_err(|e| format!("cannot create a directory for images: {e}"))?
                        .keep(),
                };
                self.dir = Some(dir.clone());
                dir
            }
        };
        self.count += 1;
        let extension = mime.rsplit('/').next().unwrap_or("bin");
        let path = dir.join(format!("output-{}.{extension}", self.count));
        std::fs::write(&path, data).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }
}

/// Whether a representation is saved to a file rather than printed.
fn is_image(mime: &str) -> bool {
    mime.starts_with("image/") && mime != "image/svg+xml"
}

/// Runs the cell; returns the exit code.
pub async fn run(server: &ServerOptions, args: RunCodeArgs) -> u8 {
    let code = match args.source() {
        Ok(code) => code,
        Err(message) => return fail(&message),
    };
    let request = api::RunCodeRequest {
        sandbox_id: args.id.clone(),
        language: args.lang.as_str().to_owned(),
        context_id: args.context.clone().unwrap_or_default(),
        code,
        timeout_secs: args.timeout,
    };
    let started = async {
        let client = server.connect().await?;
        let stream = client
            .code()
            .run_code(request)
            .await
            .map_err(|status| message(status.into()))?;
        Ok::<_, String>(stream.into_inner())
    };
    let mut stream = tokio::select! {
        started = started => match started {
            Ok(stream) => stream,
            Err(message) => return fail(&message),
        },
        _ = tokio::signal::ctrl_c() => return 130,
    };
    let mut images = Images::new(args.save_dir.clone());
    let mut report = Report::default();
    loop {
        let next = tokio::select! {
            next = stream.message() => next,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("airlock: interrupted");
                return 130;
            }
        };
        let event = match next {
            Ok(Some(api::CodeEvent { event: Some(event) })) => cell_event(event),
            Ok(Some(api::CodeEvent { event: None })) => continue,
            Ok(None) => return fail("the server ended the cell's stream early; see its log"),
            Err(status) => return fail(&message(status.into())),
        };
        match report.take(event, args.json, &mut images) {
            Ok(Some(code)) => {
                if args.json {
                    println!("{}", Value::Object(report.json));
                }
                return code;
            }
            Ok(None) => {}
            Err(message) => {
                eprintln!("airlock: {message}");
                return EXIT_AIRLOCK_ERROR;
            }
        }
    }
}

/// What `--json` prints, built as events come; without `--json`, events
/// are printed instead.
#[derive(Debug, Default)]
struct Report {
    json: Map<String, Value>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    displays: Vec<Value>,
}

impl Report {
    /// Takes one event; returns the exit code once the cell is done.
    fn take(
        &mut self,
        event: CellEvent,
        json: bool,
        images: &mut Images,
    ) -> Result<Option<u8>, String> {
        match event {
            CellEvent::Stdout(data) if json => self.stdout.extend_from_slice(&data),
            CellEvent::Stderr(data) if json => self.stderr.extend_from_slice(&data),
            CellEvent::Stdout(data) => write_out(&mut std::io::stdout(), &data),
            CellEvent::Stderr(data) => write_out(&mut std::io::stderr(), &data),
            CellEvent::Result(bundle) | CellEvent::Display(bundle) if !json => {
                print_bundle(&bundle, images)?
            }
            CellEvent::Result(bundle) => {
                let value = bundle_json(&bundle, images)?;
                self.json.insert("result".into(), value);
            }
            CellEvent::Display(bundle) => self.displays.push(bundle_json(&bundle, images)?),
            CellEvent::Error(error) if json => {
                self.json.insert(
                    "error".into(),
                    json!({"name": error.name, "value": error.value, "traceback": error.traceback}),
                );
            }
            CellEvent::Error(error) => {
                let traceback = error.traceback.concat();
                if traceback.is_empty() {
                    eprintln!("{error}");
                } else {
                    eprint!("{traceback}");
                    if !traceback.ends_with('\n') {
                        eprintln!();
                    }
                }
            }
            CellEvent::Done(done) => {
                let status = match done.status {
                    CellStatus::Ok => "ok",
                    CellStatus::Error => "error",
                    CellStatus::Interrupted => "interrupted",
                };
                if json {
                    let text =
                        |bytes: &[u8]| Value::String(String::from_utf8_lossy(bytes).into_owned());
                    self.json.insert("status".into(), status.into());
                    self.json
                        .insert("execution_count".into(), done.execution_count.into());
                    self.json.insert("timed_out".into(), done.timed_out.into());
                    self.json
                        .insert("context_restarted".into(), done.context_restarted.into());
                    self.json.insert("stdout".into(), text(&self.stdout));
                    self.json.insert("stderr".into(), text(&self.stderr));
                    self.json.insert(
                        "displays".into(),
                        Value::Array(std::mem::take(&mut self.displays)),
                    );
                    self.json.entry("result").or_insert(Value::Null);
                    self.json.entry("error").or_insert(Value::Null);
                } else {
                    if done.timed_out {
                        eprintln!("airlock: the cell passed its timeout and was interrupted");
                    }
                    if done.context_restarted {
                        eprintln!(
                            "airlock: the context's interpreter was restarted; its variables are gone"
                        );
                    }
                }
                return Ok(Some(match done.status {
                    CellStatus::Ok => 0,
                    CellStatus::Error => 1,
                    CellStatus::Interrupted if done.timed_out => 124,
                    CellStatus::Interrupted => 130,
                }));
            }
        }
        Ok(None)
    }
}

fn write_out(out: &mut impl Write, data: &[u8]) {
    // A closed host stream (a pipe to `head`) is not Airlock's failure.
    let _ = out.write_all(data).and_then(|()| out.flush());
}

/// Prints an output: its images saved (paths printed), else its
/// text/markdown or text/plain.
fn print_bundle(bundle: &MimeBundle, images: &mut Images) -> Result<(), String> {
    let mut saved = false;
    for (mime, data) in bundle.iter() {
        if is_image(mime) {
            let path = images.save(mime, data)?;
            println!("[{mime} saved to {}]", path.display());
            saved = true;
        }
    }
    if saved {
        return Ok(());
    }
    if let Some(text) = bundle.markdown().or_else(|| bundle.text()) {
        println!("{text}");
    }
    Ok(())
}

/// An output as JSON: text as strings, JSON as JSON, images saved (their
/// path and size).
fn bundle_json(bundle: &MimeBundle, images: &mut Images) -> Result<Value, String> {
    let mut object = Map::new();
    for (mime, data) in bundle.iter() {
        let value = if is_image(mime) {
            let path = images.save(mime, data)?;
            json!({"path": path, "bytes": data.len()})
        } else if mime == MimeBundle::JSON || mime.ends_with("+json") {
            serde_json::from_slice(data)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(data).into_owned()))
        } else {
            Value::String(String::from_utf8_lossy(data).into_owned())
        };
        object.insert(mime.to_owned(), value);
    }
    Ok(Value::Object(object))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock::Bytes;

    #[test]
    fn json_keeps_values_and_saves_images() {
        let dir = tempfile::tempdir().unwrap();
        let mut images = Images::new(Some(dir.path().to_owned()));
        let bundle = MimeBundle::from_items([
            ("text/plain".to_owned(), Bytes::from_static(b"<Figure>")),
            (
                "application/json".to_owned(),
                Bytes::from_static(b"{\"a\":1}"),
            ),
            ("image/png".to_owned(), Bytes::from_static(b"\x89PNG")),
        ]);
        let value = bundle_json(&bundle, &mut images).unwrap();
        assert_eq!(value["text/plain"], "<Figure>");
        assert_eq!(value["application/json"], json!({"a": 1}));
        let path = PathBuf::from(value["image/png"]["path"].as_str().unwrap());
        assert_eq!(std::fs::read(&path).unwrap(), b"\x89PNG");
        assert_eq!(path.file_name().unwrap(), "output-1.png");
    }

    #[test]
    fn the_exit_code_says_how_the_cell_ended() {
        let mut images = Images::new(None);
        let done = |status, timed_out| {
            CellEvent::Done(airlock::CellDone {
                status,
                execution_count: 1,
                timed_out,
                context_restarted: false,
                duration: std::time::Duration::ZERO,
            })
        };
        for (status, timed_out, code) in [
            (CellStatus::Ok, false, 0),
            (CellStatus::Error, false, 1),
            (CellStatus::Interrupted, true, 124),
            (CellStatus::Interrupted, false, 130),
        ] {
            let mut report = Report::default();
            let got = report.take(done(status, timed_out), true, &mut images);
            assert_eq!(got, Ok(Some(code)));
            assert_eq!(report.json["result"], Value::Null);
        }
    }
}
