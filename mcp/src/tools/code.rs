//! `run_code`: a cell of Python (or bash) in a persistent context: its
//! printed output, its value, what it displayed (images as image content;
//! HTML, JSON, Markdown as text) and its error with the traceback.

use base64::Engine;
use futures::StreamExt;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, RoleServer};
use serde::Deserialize;
use serde_json::json;

use airlock_client::api::{code_event, CellStatus, CodeResult, RunCodeRequest};

use super::command::MAX_TIMEOUT_SECS;
use super::AirlockTools;
use crate::capture::{Capture, SHOWN};
use crate::outcome::{finish, Reply, Stop};
use crate::text;

/// A cell's time limit unless the call gives one.
const DEFAULT_TIMEOUT_SECS: f64 = 120.0;
/// Images larger than this are not returned.
const IMAGE_LIMIT: usize = 8 << 20;
/// Rich text outputs shown, in order of preference after the images.
const TEXT_KINDS: [&str; 5] = [
    "text/html",
    "application/json",
    "text/markdown",
    "image/svg+xml",
    "text/latex",
];

/// The interpreter of a cell.
#[derive(Debug, Clone, Copy, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    #[default]
    Python,
    Bash,
}

impl Language {
    fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Bash => "bash",
        }
    }
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct RunCode {
    /// The code: one or more statements. In Python the value of the last
    /// expression is returned, as in a notebook cell.
    pub code: String,
    /// The sandbox to run it in. Default: this session's own sandbox.
    pub sandbox_id: Option<String>,
    /// "python" (default) or "bash".
    pub language: Option<Language>,
    /// A named context (interpreter): variables, imports and the working
    /// directory persist per context. Default: the language's default
    /// context. A new name starts a fresh interpreter.
    pub context: Option<String>,
    /// Seconds before the cell is interrupted (default 120, at most 1800);
    /// the context and its variables survive.
    pub timeout_secs: Option<f64>,
}

#[tool_router(router = code_router, vis = "pub(super)")]
impl AirlockTools {
    #[tool(
        description = "Run code in a persistent interpreter in a sandbox, like a notebook \
        cell: variables and imports stay for the next call. Returns what it printed, the \
        value of its last expression, images it displayed (matplotlib figures come back as \
        PNG images; plt.show() or a figure left open both work), HTML/JSON/Markdown displays \
        as text, and, if it raised, the error and its traceback (an error result). Python \
        has the standard library; install more with run_command (pip needs network access, \
        see create_sandbox allow_net) or use an image that has them.",
        annotations(title = "Run code", destructive_hint = true, open_world_hint = false)
    )]
    async fn run_code(
        &self,
        Parameters(params): Parameters<RunCode>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_run_code(params, context).await)
    }
}

/// Everything a cell produced.
#[derive(Default)]
struct Cell {
    value: Option<String>,
    value_json: Option<serde_json::Value>,
    /// Text sections of rich outputs, in order.
    sections: Vec<String>,
    images: Vec<ContentBlock>,
    error: Option<String>,
    error_name: Option<String>,
    status: Option<CellStatus>,
    timed_out: bool,
    restarted: bool,
    execution_count: u32,
}

impl AirlockTools {
    async fn do_run_code(
        &self,
        params: RunCode,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        let timeout = params.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
        if !(timeout > 0.0 && timeout <= MAX_TIMEOUT_SECS) {
            return Err(Stop::Invalid(format!(
                "timeout_secs must be more than 0 and at most {MAX_TIMEOUT_SECS}"
            )));
        }
        let language = params.language.unwrap_or_default();
        let target = self.session.target(&context, params.sandbox_id).await?;
        self.session.track(&target).await;
        let request = RunCodeRequest {
            sandbox_id: target.id.clone(),
            code: params.code,
            language: language.name().into(),
            context_id: params.context.unwrap_or_default(),
            timeout_secs: Some(timeout),
        };
        let mut events = match target.client.code().run_code(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => {
                return Err(self
                    .session
                    .failed(&target, "cannot run the code", status.into())
                    .await)
            }
        };
        let mut stdout = Capture::new(
            target.client.clone(),
            &target.id,
            self.session.log_path("stdout"),
        );
        let mut stderr = Capture::new(
            target.client.clone(),
            &target.id,
            self.session.log_path("stderr"),
        );
        let mut cell = Cell::default();
        let mut broken = None;
        while let Some(event) = events.next().await {
            match event.map(|e| e.event) {
                Ok(Some(code_event::Event::Stdout(data))) => stdout.push(data).await,
                Ok(Some(code_event::Event::Stderr(data))) => stderr.push(data).await,
                Ok(Some(code_event::Event::Result(result))) => cell.take(result),
                Ok(Some(code_event::Event::Error(error))) => {
                    let mut text = format!("{}: {}", error.name, error.value);
                    let traceback = error.traceback.join("\n");
                    if !traceback.is_empty() {
                        text = traceback;
                    }
                    cell.error = Some(cut(&text));
                    cell.error_name = Some(error.name);
                }
                Ok(Some(code_event::Event::Done(done))) => {
                    cell.status = Some(done.status());
                    cell.timed_out = done.timed_out;
                    cell.restarted = done.context_restarted;
                    cell.execution_count = done.execution_count;
                    break;
                }
                Ok(None) => {}
                Err(status) => {
                    broken = Some(status);
                    break;
                }
            }
        }
        let stdout = stdout.finish().await;
        let stderr = stderr.finish().await;
        let mut text = String::new();
        text.push_str(&stdout.render("stdout"));
        text.push_str(&stderr.render("stderr"));
        for section in &cell.sections {
            text.push_str(section);
        }
        let Some(status) = cell.status else {
            let why = match broken {
                Some(status) => {
                    self.session
                        .failed(&target, "the cell's stream broke", status.into())
                        .await
                }
                None => Stop::Failed("the cell ended without finishing".into()),
            };
            let Stop::Failed(message) = why else {
                return Err(why);
            };
            return Err(Stop::Failed(format!("{message}\n{text}")));
        };
        if let Some(value) = &cell.value {
            if text.is_empty() && cell.error.is_none() {
                // A value alone is the whole answer.
                text = format!("{value}\n");
            } else {
                text.push_str(&format!("--- value ---\n{value}\n"));
            }
        }
        if let Some(error) = &cell.error {
            text.push_str(&format!("--- error ---\n{error}\n"));
        }
        if cell.timed_out {
            text.push_str("The cell ran past its timeout_secs and was interrupted; the context and its variables are kept.\n");
        } else if status == CellStatus::Interrupted {
            text.push_str("The cell was interrupted.\n");
        }
        if cell.restarted {
            text.push_str("The interpreter had died and was restarted: variables from earlier cells are gone.\n");
        }
        if text.is_empty() {
            text.push_str("(no output and no value)\n");
        }
        let failed = status != CellStatus::Ok;
        let mut content = vec![ContentBlock::text(text)];
        let images = cell.images.len();
        content.append(&mut cell.images);
        let mut result = if failed {
            CallToolResult::error(content)
        } else {
            CallToolResult::success(content)
        };
        result.structured_content = Some(json!({
            "sandbox_id": target.id,
            "status": match status {
                CellStatus::Ok => "ok",
                CellStatus::Interrupted => "interrupted",
                _ => "error",
            },
            "value": cell.value,
            "value_json": cell.value_json,
            "error": cell.error_name,
            "images": images,
            "execution_count": cell.execution_count,
            "timed_out": cell.timed_out,
            "stdout_bytes": stdout.total,
            "stderr_bytes": stderr.total,
        }));
        Ok(result)
    }
}

impl Cell {
    /// One result: the value, or something the cell displayed.
    fn take(&mut self, result: CodeResult) {
        let item = |mime: &str| {
            result
                .items
                .iter()
                .find(|i| i.mime_type == mime)
                .map(|i| &i.data)
        };
        let plain = item("text/plain").map(|d| String::from_utf8_lossy(d).into_owned());
        let mut shown_image = false;
        for mime in ["image/png", "image/jpeg", "image/gif", "image/webp"] {
            let Some(data) = item(mime) else { continue };
            if data.len() > IMAGE_LIMIT {
                self.sections.push(format!(
                    "--- an image ({mime}, {}) was too large to return ---\n",
                    text::bytes(data.len() as u64)
                ));
            } else {
                let encoded = base64::engine::general_purpose::STANDARD.encode(data);
                self.images.push(ContentBlock::image(encoded, mime));
                self.sections.push(format!(
                    "--- image {} ({mime}, {}): attached ---\n",
                    self.images.len(),
                    text::bytes(data.len() as u64)
                ));
            }
            shown_image = true;
            break;
        }
        let label = if result.is_main_result {
            "value"
        } else {
            "display"
        };
        for mime in TEXT_KINDS {
            if shown_image && mime == "image/svg+xml" {
                continue;
            }
            let Some(data) = item(mime) else { continue };
            if result.is_main_result && mime == "application/json" {
                self.value_json = serde_json::from_slice(data).ok();
                continue;
            }
            self.sections.push(format!(
                "--- {label} ({mime}) ---\n{}\n",
                cut(&String::from_utf8_lossy(data))
            ));
        }
        if result.is_main_result {
            self.value = plain.map(|p| cut(&p));
        } else if !shown_image {
            if let Some(plain) = plain.filter(|p| !is_default_repr(p)) {
                self.sections
                    .push(format!("--- display ---\n{}\n", cut(&plain)));
            }
        }
    }
}

/// `<module.Class object at 0x7f...>`: says nothing.
fn is_default_repr(text: &str) -> bool {
    text.starts_with('<') && text.contains(" object at 0x")
}

/// `text` within [`SHOWN`] bytes, with a note when cut.
fn cut(text: &str) -> String {
    if text.len() <= SHOWN {
        return text.to_owned();
    }
    let head = text::head(text.as_bytes(), SHOWN);
    format!(
        "{head}\n[... {} more cut]",
        text::bytes((text.len() - head.len()) as u64)
    )
}
