//! `run_command`: a shell command line, in the foreground (its exit code
//! and its output, cut to a bound with the whole of it in a log file) or
//! in the background (its output to a log file).

use std::collections::BTreeMap;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, RoleServer};
use serde::Deserialize;
use serde_json::json;

use airlock_client::api::{process_event, ProcessExit, StartProcess};

use super::AirlockTools;
use crate::capture::{Capture, Captured};
use crate::outcome::{finish, Reply, Stop};
use crate::session::{Target, LOG_DIR};

/// A foreground command's time limit unless the call gives one.
const DEFAULT_TIMEOUT_SECS: f64 = 120.0;
/// The longest a foreground command may be given.
pub const MAX_TIMEOUT_SECS: f64 = 1800.0;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct RunCommand {
    /// A shell command line, run by /bin/sh -c as root: pipes,
    /// redirections, `&&` and `cd` work. Example: "pip list | grep numpy".
    pub command: String,
    /// The sandbox to run it in. Default: this session's own sandbox.
    pub sandbox_id: Option<String>,
    /// Working directory, an absolute path (default /root).
    pub cwd: Option<String>,
    /// Environment variables for this command.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Seconds before the command and everything it started are killed
    /// (default 120, at most 1800). Output so far is kept.
    pub timeout_secs: Option<f64>,
    /// Start the command and return at once (servers, long jobs); its
    /// stdout and stderr go to a log file that read_file shows. Stop it
    /// with run_command "kill PID".
    #[serde(default)]
    pub background: bool,
}

#[tool_router(router = command_router, vis = "pub(super)")]
impl AirlockTools {
    #[tool(
        description = "Run a shell command line in a sandbox and return its exit code, stdout \
        and stderr. Files, installed packages and the working tree persist between calls in \
        the same sandbox. A command that fails (non-zero exit, killed, timed out) is reported \
        as an error result with its output. Long output is cut: the whole of it is saved to a \
        file in the sandbox, named in the answer, for read_file. With background=true the \
        command keeps running and the call returns at once.",
        annotations(
            title = "Run a command",
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn run_command(
        &self,
        Parameters(params): Parameters<RunCommand>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_run_command(params, context).await)
    }
}

impl AirlockTools {
    async fn do_run_command(
        &self,
        params: RunCommand,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        if params.command.trim().is_empty() {
            return Err(Stop::Invalid("command is empty".into()));
        }
        if let Some(cwd) = &params.cwd {
            if !cwd.starts_with('/') {
                return Err(Stop::Invalid(format!(
                    "cwd {cwd:?} is not an absolute path"
                )));
            }
        }
        let timeout = match params.timeout_secs {
            Some(t) if !(t > 0.0 && t <= MAX_TIMEOUT_SECS) => {
                return Err(Stop::Invalid(format!(
                    "timeout_secs must be more than 0 and at most {MAX_TIMEOUT_SECS}"
                )))
            }
            Some(t) => Some(t),
            None if params.background => None,
            None => Some(DEFAULT_TIMEOUT_SECS),
        };
        let target = self.session.target(&context, params.sandbox_id).await?;
        self.session.track(&target).await;
        let mut start = StartProcess {
            sandbox_id: target.id.clone(),
            argv: vec!["/bin/sh".into(), "-c".into(), params.command.clone()],
            envs: params.env.into_iter().collect(),
            cwd: params.cwd.unwrap_or_else(|| "/root".into()),
            timeout_secs: timeout,
            ..Default::default()
        };
        if params.background {
            return self.background(target, start).await;
        }
        start.kill_on_disconnect = true;
        let mut program = match target.client.start(start).await {
            Ok(program) => program,
            Err(error) => {
                return Err(self
                    .session
                    .failed(&target, "cannot start the command", error)
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
        let mut exit = None;
        let mut broken = None;
        loop {
            match program.next_event().await {
                Ok(Some(process_event::Event::Stdout(out))) => stdout.push(out.data).await,
                Ok(Some(process_event::Event::Stderr(out))) => stderr.push(out.data).await,
                Ok(Some(process_event::Event::Exited(ended))) => {
                    exit = Some(ended);
                    break;
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(error) => {
                    broken = Some(error);
                    break;
                }
            }
        }
        let stdout = stdout.finish().await;
        let stderr = stderr.finish().await;
        let Some(exit) = exit else {
            let why = match broken {
                Some(error) => {
                    self.session
                        .failed(&target, "the command's stream broke", error)
                        .await
                }
                None => Stop::Failed("the command's stream ended without its exit".into()),
            };
            let Stop::Failed(message) = why else {
                return Err(why);
            };
            let mut text = format!("{message}\n");
            text.push_str(&stdout.render("stdout"));
            text.push_str(&stderr.render("stderr"));
            return Err(Stop::Failed(text));
        };
        Ok(command_result(&target, &exit, &stdout, &stderr))
    }

    /// Starts a program that outlives the call, its output to a log file.
    async fn background(
        &self,
        target: Target,
        mut start: StartProcess,
    ) -> Result<CallToolResult, Stop> {
        let log = self.session.log_path("log");
        let tag = self.session.program_tag();
        // The shell sends its own output, and so the command's, to the log
        // file before it reads the command line.
        let line = std::mem::take(&mut start.argv[2]);
        start.argv[2] = format!("mkdir -p {LOG_DIR} && exec >{log} 2>&1\n{line}");
        start.tag = tag.clone();
        let program = match target.client.start(start).await {
            Ok(program) => program,
            Err(error) => {
                return Err(self
                    .session
                    .failed(&target, "cannot start the command", error)
                    .await)
            }
        };
        let pid = program.pid();
        // Dropping the stream detaches: the program runs on.
        drop(program);
        let text = format!(
            "Started in the background in {}: pid {pid} (tag {tag}). Its stdout and stderr go \
             to {log}: read_file that path to see them. Stop it with run_command \"kill {pid}\".",
            target.id
        );
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({
            "sandbox_id": target.id,
            "pid": pid,
            "tag": tag,
            "log": log,
        }));
        Ok(result)
    }
}

/// A finished command as its answer: `isError` unless it exited 0.
fn command_result(
    target: &Target,
    exit: &ProcessExit,
    stdout: &Captured,
    stderr: &Captured,
) -> CallToolResult {
    let mut head = if exit.signal != 0 {
        format!("killed by signal {}", exit.signal)
    } else {
        format!("exit code {}", exit.exit_code)
    };
    if exit.timed_out {
        head.push_str(" (timed out: the command ran past its timeout_secs and was killed)");
    }
    if exit.oom_killed {
        head.push_str(
            " (out of memory: the guest killed a process; create_sandbox with more memory_mib)",
        );
    }
    let mut text = format!("{head}\n");
    if stdout.total == 0 && stderr.total == 0 {
        text.push_str("(no output)\n");
    }
    text.push_str(&stdout.render("stdout"));
    text.push_str(&stderr.render("stderr"));
    let failed = exit.exit_code != 0 || exit.signal != 0 || exit.timed_out;
    let mut result = if failed {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    let log = |c: &Captured| c.log.as_ref().and_then(|l| l.as_ref().ok()).cloned();
    result.structured_content = Some(json!({
        "sandbox_id": target.id,
        "exit_code": exit.exit_code,
        "signal": exit.signal,
        "timed_out": exit.timed_out,
        "oom_killed": exit.oom_killed,
        "duration_ms": exit.duration_ms,
        "stdout_bytes": stdout.total,
        "stderr_bytes": stderr.total,
        "stdout_log": log(stdout),
        "stderr_log": log(stderr),
    }));
    result
}
