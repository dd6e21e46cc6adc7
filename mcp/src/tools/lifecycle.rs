//! `create_sandbox` (also from a snapshot of the caller's), `list_sandboxes`,
//! `kill_sandbox`, `pause_sandbox`, `resume_sandbox`.

use std::collections::BTreeMap;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, RoleServer};
use serde::Deserialize;
use serde_json::json;

use airlock_client::api::{
    CreateSandboxRequest, ErrorReason, KillSandboxRequest, ListImagesRequest, ListSandboxesRequest,
    PauseSandboxRequest, ResumeSandboxRequest, SandboxState,
};

use super::AirlockTools;
use crate::outcome::{finish, Reply, Stop};
use crate::render;

/// Sandboxes listed at most.
const LIST_LIMIT: usize = 200;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct CreateSandbox {
    /// Root filesystem image by name. Default: "default" (Debian with
    /// Python 3). An unknown name fails with the list of images there are.
    pub image: Option<String>,
    /// Start from this named template (built by `airlock template build`):
    /// its tools installed and its server already running. Leave `image`
    /// unset with it.
    pub template: Option<String>,
    /// Start as a copy of this snapshot of yours (snapshot_sandbox,
    /// list_snapshots): its files, installed packages, running programs and
    /// Python variables, on its image and at its size. Leave `image`,
    /// `template`, `memory_mib` and `vcpus` unset with it.
    pub snapshot: Option<String>,
    /// Guest memory in MiB (64 to 65536; default 512). Plotting and data
    /// work like 1024 or more.
    pub memory_mib: Option<u32>,
    /// Virtual CPUs (1 to 64; default 1).
    pub vcpus: Option<u32>,
    /// Seconds until the sandbox is killed, whatever it is doing (default
    /// 3600).
    pub lifetime_secs: Option<u64>,
    /// Network destinations the sandbox may reach: host names
    /// ("api.example.com"), every name under a domain ("*.githubusercontent.com"),
    /// addresses or ranges ("10.0.0.0/8"), each optionally with ":PORT".
    /// Without any, the sandbox has no network at all.
    #[serde(default)]
    pub allow_net: Vec<String>,
    /// Environment variables for every command and code context in it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Make it this session's sandbox: later calls that name no sandbox_id
    /// use it (and not the sandbox the session started on its own).
    #[serde(default)]
    pub use_by_default: bool,
    /// Keep it running after this MCP session ends, until its lifetime
    /// runs out. By default the sandboxes a session creates end with it.
    #[serde(default)]
    pub keep: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct ListSandboxes {}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct KillSandbox {
    /// The sandbox to kill. Default: this session's own sandbox (the next
    /// call that names none starts a fresh one).
    pub sandbox_id: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct PauseSandbox {
    /// The sandbox to pause. Default: this session's own sandbox.
    pub sandbox_id: Option<String>,
    /// Save it to disk (memory, programs and files) and free its memory,
    /// instead of only stopping its CPUs. Either way the next call on it
    /// resumes it.
    #[serde(default)]
    pub to_disk: bool,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct ResumeSandbox {
    /// The sandbox to resume. Default: this session's own sandbox.
    pub sandbox_id: Option<String>,
}

#[tool_router(router = lifecycle_router, vis = "pub(super)")]
impl AirlockTools {
    #[tool(
        description = "Start a new sandbox (a disposable microVM) and return its sandbox_id. \
        You rarely need this: every tool works without a sandbox_id in this session's own \
        sandbox (Debian, Python 3, no network, 512 MiB). Create one for another image (e.g. \
        one with more packages), more memory, network access (allow_net), to keep work apart, \
        or as a copy of a snapshot (snapshot). Sandboxes created here end with the session \
        unless keep is set.",
        annotations(
            title = "Create a sandbox",
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn create_sandbox(
        &self,
        Parameters(params): Parameters<CreateSandbox>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_create(params, context).await)
    }

    #[tool(
        description = "List the sandboxes you can use: id, state (running, paused, on disk, \
        ended), image, memory, network, age and time left, and which one is this session's \
        own.",
        annotations(
            title = "List sandboxes",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn list_sandboxes(
        &self,
        Parameters(_params): Parameters<ListSandboxes>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_list(context).await)
    }

    #[tool(
        description = "Kill a sandbox: its programs, files and memory are gone for good. \
        Without sandbox_id, kills this session's own sandbox; the next call that names no \
        sandbox starts a fresh one (a way to start over).",
        annotations(
            title = "Kill a sandbox",
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn kill_sandbox(
        &self,
        Parameters(params): Parameters<KillSandbox>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_kill(params, context).await)
    }

    #[tool(
        description = "Pause a sandbox: its CPUs stop (or, with to_disk, it is saved to disk \
        and its memory freed) while everything in it is kept. The next call on it resumes it, \
        so pausing is only for saving resources while it waits.",
        annotations(
            title = "Pause a sandbox",
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn pause_sandbox(
        &self,
        Parameters(params): Parameters<PauseSandbox>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_pause(params, context).await)
    }

    #[tool(
        description = "Resume a paused sandbox (or one saved to disk). Any other call on it \
        resumes it too.",
        annotations(
            title = "Resume a sandbox",
            destructive_hint = false,
            idempotent_hint = true,
            open_world_hint = false
        )
    )]
    async fn resume_sandbox(
        &self,
        Parameters(params): Parameters<ResumeSandbox>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_resume(params, context).await)
    }
}

impl AirlockTools {
    async fn do_create(
        &self,
        params: CreateSandbox,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        if params.lifetime_secs == Some(0) {
            return Err(Stop::Invalid(
                "lifetime_secs must be at least 1: every sandbox made here ends".into(),
            ));
        }
        let client = self.session.client(&context).await?;
        let request = CreateSandboxRequest {
            image: params.image.clone().unwrap_or_default(),
            template: params.template.unwrap_or_default(),
            snapshot: params.snapshot.clone().unwrap_or_default(),
            memory_mib: params.memory_mib.unwrap_or(0),
            vcpus: params.vcpus.unwrap_or(0),
            timeout_secs: params.lifetime_secs,
            allow_net: params.allow_net,
            envs: params.env.into_iter().collect(),
            ..Default::default()
        };
        let info = match self.session.create(&client, request, params.keep).await {
            Ok(info) => info,
            Err(error)
                if params.image.is_some() && error.reason() == Some(ErrorReason::NotFound) =>
            {
                // An unknown image: say which there are.
                let images = client
                    .sandboxes()
                    .list_images(ListImagesRequest {})
                    .await
                    .map(|r| r.into_inner().images)
                    .unwrap_or_default();
                let names: Vec<&str> = images.iter().map(|i| i.name.as_str()).collect();
                let message = format!(
                    "cannot create the sandbox: {}",
                    airlock_report::chain(&error)
                );
                return Err(Stop::Failed(if names.is_empty() {
                    message
                } else {
                    format!("{message}. The images there are: {}", names.join(", "))
                }));
            }
            Err(error) if params.snapshot.is_some() => {
                return Err(super::snapshots::unknown_name(
                    "cannot create the sandbox",
                    error,
                ))
            }
            Err(error) => return Err(Stop::call("cannot create the sandbox", error)),
        };
        if params.use_by_default {
            self.session.adopt(&info.sandbox_id).await;
        }
        let from = match info.snapshot.as_str() {
            "" => String::new(),
            snapshot => format!(" from snapshot {snapshot} (its files, programs and variables)"),
        };
        let mut text = format!(
            "Created sandbox {}{from}. Pass sandbox_id \"{}\" to the other tools to use it{}.\n{}",
            info.sandbox_id,
            info.sandbox_id,
            if params.use_by_default {
                " (calls without sandbox_id use it too from now on)"
            } else {
                ""
            },
            render::sandbox(&info, &[])
        );
        text.push_str(if params.keep {
            "\nIt outlives this session, until its lifetime runs out."
        } else {
            "\nIt ends with this session."
        });
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({
            "sandbox_id": info.sandbox_id,
            "image": info.image,
            "snapshot": info.snapshot,
            "memory_mib": info.memory_mib,
            "network": info.network,
            "ends_at_ms": info.ends_at_ms,
        }));
        Ok(result)
    }

    async fn do_list(&self, context: RequestContext<RoleServer>) -> Result<CallToolResult, Stop> {
        let client = self.session.client(&context).await?;
        let own = self.session.own_sandbox().await;
        let mut sandboxes = Vec::new();
        let mut page_token = String::new();
        loop {
            let page = client
                .sandboxes()
                .list(ListSandboxesRequest {
                    page_size: 1000,
                    page_token,
                    ..Default::default()
                })
                .await
                .map_err(|s| Stop::call("cannot list the sandboxes", s.into()))?
                .into_inner();
            sandboxes.extend(page.sandboxes);
            if page.next_page_token.is_empty() || sandboxes.len() >= LIST_LIMIT {
                break;
            }
            page_token = page.next_page_token;
        }
        // Live ones first, then ended ones; each group by id.
        sandboxes.sort_by_key(|s| (s.state() == SandboxState::Ended, s.sandbox_id.clone()));
        let mut lines = Vec::new();
        for info in sandboxes.iter().take(LIST_LIMIT) {
            let mut marks = Vec::new();
            if own.as_deref() == Some(info.sandbox_id.as_str()) {
                marks.push("this session's sandbox: used when no sandbox_id is given");
            } else if self.session.created(&info.sandbox_id) {
                marks.push("created by this session");
            }
            lines.push(render::sandbox(info, &marks));
        }
        let mut text = if lines.is_empty() {
            "No sandboxes. Any tool called without sandbox_id starts this session's own.".to_owned()
        } else {
            lines.join("\n")
        };
        if own.is_none() && !lines.is_empty() {
            text.push_str("\nThis session has no sandbox of its own yet: the first call without sandbox_id starts one.");
        }
        if sandboxes.len() > LIST_LIMIT {
            text.push_str(&format!("\n[only the first {LIST_LIMIT} are listed]"));
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
    }

    /// The sandbox a lifecycle call names, or the session's own if it has
    /// one (none is made just to be killed or paused).
    pub(super) async fn named_or_own(&self, named: Option<String>) -> Result<String, Stop> {
        match named.filter(|id| !id.trim().is_empty()) {
            Some(id) => Ok(id.trim().to_owned()),
            None => self.session.own_sandbox().await.ok_or_else(|| {
                Stop::Failed(
                    "this session has no sandbox of its own yet (the first call without \
                     sandbox_id starts one); name a sandbox_id from list_sandboxes"
                        .into(),
                )
            }),
        }
    }

    async fn do_kill(
        &self,
        params: KillSandbox,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        let client = self.session.client(&context).await?;
        let id = self.named_or_own(params.sandbox_id).await?;
        client
            .sandboxes()
            .kill(KillSandboxRequest {
                sandbox_id: id.clone(),
            })
            .await
            .map_err(|s| Stop::call(&format!("cannot kill {id}"), s.into()))?;
        let was_own = self.session.own_sandbox().await.as_deref() == Some(id.as_str());
        self.session.ended(&id).await;
        let text = if was_own {
            format!("Killed {id}, this session's sandbox. The next call without sandbox_id starts a fresh one.")
        } else {
            format!("Killed {id}.")
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
    }

    async fn do_pause(
        &self,
        params: PauseSandbox,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        let client = self.session.client(&context).await?;
        let id = self.named_or_own(params.sandbox_id).await?;
        let info = client
            .sandboxes()
            .pause(PauseSandboxRequest {
                sandbox_id: id.clone(),
                to_disk: params.to_disk,
            })
            .await
            .map_err(|s| Stop::call(&format!("cannot pause {id}"), s.into()))?
            .into_inner();
        let how = if params.to_disk {
            "saved to disk, its memory freed"
        } else {
            "its CPUs stopped"
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "Paused {id} ({how}); the next call on it resumes it.\n{}",
            render::sandbox(&info, &[])
        ))]))
    }

    async fn do_resume(
        &self,
        params: ResumeSandbox,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        let client = self.session.client(&context).await?;
        let id = self.named_or_own(params.sandbox_id).await?;
        let info = client
            .sandboxes()
            .resume(ResumeSandboxRequest {
                sandbox_id: id.clone(),
            })
            .await
            .map_err(|s| Stop::call(&format!("cannot resume {id}"), s.into()))?
            .into_inner();
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "Resumed {id}.\n{}",
            render::sandbox(&info, &[])
        ))]))
    }
}
