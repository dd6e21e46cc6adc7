//! `read_file`, `write_file`, `list_files`, `changed_files`.

use base64::Engine;
use bytes::Bytes;
use futures::StreamExt;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, RoleServer};
use serde::Deserialize;
use serde_json::json;

use airlock_client::api::{
    write_file_request, ChangeKind, FileInfo, FileType, ListChangesRequest, ListFilesRequest,
    ReadFileRequest, StatRequest, StopTrackingRequest, WriteFileRequest, WriteHeader,
};
use airlock_client::limits::MAX_CHUNK_BYTES;

use super::AirlockTools;
use crate::outcome::{finish, Reply, Stop};
use crate::session::Target;
use crate::text;

/// Bytes `read_file` returns unless asked for fewer or more.
const READ_DEFAULT: u64 = 32 * 1024;
/// Bytes `read_file` returns at most.
const READ_MAX: u64 = 256 * 1024;
/// Images `read_file` returns as images, at most this size.
const IMAGE_LIMIT: u64 = 8 << 20;
/// Entries listed at most (files, changes).
const LIST_LIMIT: usize = 500;
/// Symbolic links `read_file` follows at most.
const MAX_LINKS: usize = 16;
/// Levels `list_files` goes down at most.
const DEPTH_MAX: u32 = 10;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct ReadFile {
    /// The file's absolute path in the sandbox.
    pub path: String,
    /// The sandbox. Default: this session's own sandbox.
    pub sandbox_id: Option<String>,
    /// Byte offset to start at (default 0), to page through a long file.
    pub offset: Option<u64>,
    /// Bytes to read (default 32768, at most 262144).
    pub length: Option<u64>,
}

/// How `write_file`'s content is written.
#[derive(Debug, Clone, Copy, Default, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// The content is the text to write (UTF-8).
    #[default]
    Text,
    /// The content is base64, decoded to the bytes to write.
    Base64,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct WriteFile {
    /// The file's absolute path in the sandbox; missing directories are
    /// made.
    pub path: String,
    /// What to write.
    pub content: String,
    /// The sandbox. Default: this session's own sandbox.
    pub sandbox_id: Option<String>,
    /// "text" (default) or "base64" for binary content.
    pub encoding: Option<Encoding>,
    /// Add to the end of the file instead of replacing it.
    #[serde(default)]
    pub append: bool,
    /// Permission bits for a new file, in octal, e.g. "755" for a script
    /// (default "644").
    pub mode: Option<String>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct ListFiles {
    /// An absolute directory path (default /root).
    pub path: Option<String>,
    /// The sandbox. Default: this session's own sandbox.
    pub sandbox_id: Option<String>,
    /// Levels to go down: 1 (default) lists the directory's own entries.
    /// At most 10.
    pub depth: Option<u32>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct ChangedFiles {
    /// The sandbox. Default: this session's own sandbox.
    pub sandbox_id: Option<String>,
    /// Start counting again after this call (default true), so the next
    /// call lists only what changes after it. False keeps counting from
    /// the same point.
    pub reset: Option<bool>,
}

#[tool_router(router = files_router, vis = "pub(super)")]
impl AirlockTools {
    #[tool(
        description = "Read a file in a sandbox. Text comes back as text (32 KiB at a time: \
        use offset and length to page through longer files, such as the full output logs \
        other tools name); PNG, JPEG, GIF and WebP images come back as images; other binary \
        files are described, not dumped.",
        annotations(title = "Read a file", read_only_hint = true, open_world_hint = false)
    )]
    async fn read_file(
        &self,
        Parameters(params): Parameters<ReadFile>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_read(params, context).await)
    }

    #[tool(
        description = "Write a file in a sandbox (replacing it, or appending). Missing \
        directories are made. The file appears whole or not at all.",
        annotations(
            title = "Write a file",
            destructive_hint = true,
            open_world_hint = false
        )
    )]
    async fn write_file(
        &self,
        Parameters(params): Parameters<WriteFile>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_write(params, context).await)
    }

    #[tool(
        description = "List a directory in a sandbox: type, size and path of each entry, \
        optionally several levels down.",
        annotations(title = "List files", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_files(
        &self,
        Parameters(params): Parameters<ListFiles>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_list_files(params, context).await)
    }

    #[tool(
        description = "What the last commands and code in a sandbox created, modified and \
        deleted under /root and /tmp, with sizes: since the previous changed_files call, or \
        since this session first ran something there.",
        annotations(
            title = "Changed files",
            read_only_hint = false,
            destructive_hint = false,
            open_world_hint = false
        )
    )]
    async fn changed_files(
        &self,
        Parameters(params): Parameters<ChangedFiles>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_changed(params, context).await)
    }
}

/// Refuses a path that is not absolute.
fn absolute(path: &str) -> Result<(), Stop> {
    if path.starts_with('/') {
        Ok(())
    } else {
        Err(Stop::Invalid(format!(
            "path {path:?} is not an absolute path (start it with /)"
        )))
    }
}

/// Which image a file's first bytes say it is.
fn image_type(start: &[u8]) -> Option<&'static str> {
    if start.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if start.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if start.starts_with(b"GIF87a") || start.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if start.len() >= 12 && &start[..4] == b"RIFF" && &start[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

impl AirlockTools {
    /// `length` bytes of a file from `offset` (0: to the end).
    async fn read_bytes(
        &self,
        target: &Target,
        path: &str,
        offset: u64,
        length: u64,
    ) -> Result<Vec<u8>, Stop> {
        let request = ReadFileRequest {
            sandbox_id: target.id.clone(),
            path: path.to_owned(),
            offset,
            length,
        };
        let what = format!("cannot read {path}");
        let mut chunks = match target.client.files().read(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => return Err(self.session.failed(target, &what, status.into()).await),
        };
        let mut data = Vec::new();
        while let Some(chunk) = chunks.next().await {
            match chunk {
                Ok(chunk) => data.extend_from_slice(&chunk.data),
                Err(status) => return Err(self.session.failed(target, &what, status.into()).await),
            }
        }
        Ok(data)
    }

    async fn stat(&self, target: &Target, path: &str) -> Result<FileInfo, Stop> {
        let request = StatRequest {
            sandbox_id: target.id.clone(),
            path: path.to_owned(),
        };
        match target.client.files().stat(request).await {
            Ok(info) => Ok(info.into_inner()),
            Err(status) => Err(self
                .session
                .failed(target, &format!("cannot read {path}"), status.into())
                .await),
        }
    }

    /// The entry `path` names, symlinks followed (as a read follows them).
    async fn stat_followed(&self, target: &Target, path: &str) -> Result<FileInfo, Stop> {
        let mut current = path.to_owned();
        for _ in 0..MAX_LINKS {
            let info = self.stat(target, &current).await?;
            if info.r#type() != FileType::Symlink {
                return Ok(info);
            }
            current = if info.symlink_target.starts_with('/') {
                info.symlink_target
            } else {
                let parent = current.rsplit_once('/').map(|(p, _)| p).unwrap_or("");
                format!("{parent}/{}", info.symlink_target)
            };
        }
        Err(Stop::Failed(format!(
            "{path}: too many levels of symbolic links"
        )))
    }

    async fn do_read(
        &self,
        params: ReadFile,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        absolute(&params.path)?;
        let length = params.length.unwrap_or(READ_DEFAULT);
        if length == 0 || length > READ_MAX {
            return Err(Stop::Invalid(format!(
                "length must be 1 to {READ_MAX} bytes"
            )));
        }
        let offset = params.offset.unwrap_or(0);
        let target = self.session.target(&context, params.sandbox_id).await?;
        let path = params.path;
        let info = self.stat_followed(&target, &path).await?;
        match info.r#type() {
            FileType::File => {}
            FileType::Directory => {
                return Err(Stop::Failed(format!(
                    "{path} is a directory: list_files shows what is in it"
                )))
            }
            _ => return Err(Stop::Failed(format!("{path} is not a regular file"))),
        }
        let size = info.size;
        if offset == 0 && size > 0 && size <= IMAGE_LIMIT {
            let start = self.read_bytes(&target, &path, 0, 16).await?;
            if let Some(mime) = image_type(&start) {
                let data = self.read_bytes(&target, &path, 0, 0).await?;
                let encoded = base64::engine::general_purpose::STANDARD.encode(&data);
                return Ok(CallToolResult::success(vec![
                    ContentBlock::text(format!(
                        "{path}: {mime}, {}",
                        text::bytes(data.len() as u64)
                    )),
                    ContentBlock::image(encoded, mime),
                ]));
            }
        }
        if size > 0 && offset >= size {
            return Err(Stop::Invalid(format!(
                "offset {offset} is past the end of {path} ({})",
                text::bytes(size)
            )));
        }
        let data = self.read_bytes(&target, &path, offset, length).await?;
        if data.is_empty() {
            return Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "{path} is empty"
            ))]));
        }
        if text::looks_binary(&data) {
            return Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "{path} is binary ({}; starts {}): not shown as text. Inspect it with \
                 run_command, e.g. file {path} or od -c {path} | head",
                text::bytes(size),
                text::hex_prefix(&data, 16)
            ))]));
        }
        let end = offset + data.len() as u64;
        // Characters cut by the bounds are not turned into noise.
        let body = if end < size {
            text::head(&data, data.len())
        } else {
            String::from_utf8_lossy(&data).into_owned()
        };
        let mut out = String::new();
        if offset > 0 || end < size {
            out.push_str(&format!(
                "[{path}: bytes {offset} to {end} of {}",
                text::count(size.max(end))
            ));
            if end < size {
                out.push_str(&format!("; read_file with offset {end} for more"));
            }
            out.push_str("]\n");
        }
        out.push_str(&body);
        Ok(CallToolResult::success(vec![ContentBlock::text(out)]))
    }

    async fn do_write(
        &self,
        params: WriteFile,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        absolute(&params.path)?;
        let data: Bytes = match params.encoding.unwrap_or_default() {
            Encoding::Text => Bytes::from(params.content.into_bytes()),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(params.content.trim())
                .map(Bytes::from)
                .map_err(|e| Stop::Invalid(format!("content is not base64: {e}")))?,
        };
        let mode = match &params.mode {
            Some(mode) => u32::from_str_radix(mode.trim_start_matches("0o"), 8)
                .ok()
                .filter(|m| *m <= 0o7777)
                .ok_or_else(|| {
                    Stop::Invalid(format!(
                        "mode {mode:?} is not octal permission bits like \"755\""
                    ))
                })?,
            None => 0,
        };
        let target = self.session.target(&context, params.sandbox_id).await?;
        self.session.track(&target).await;
        let mut messages = vec![WriteFileRequest {
            part: Some(write_file_request::Part::Header(WriteHeader {
                sandbox_id: target.id.clone(),
                path: params.path.clone(),
                mode,
                append: params.append,
                ..Default::default()
            })),
        }];
        for piece in data.chunks(MAX_CHUNK_BYTES) {
            messages.push(WriteFileRequest {
                part: Some(write_file_request::Part::Data(data.slice_ref(piece))),
            });
        }
        let written = match target
            .client
            .files()
            .write(futures::stream::iter(messages))
            .await
        {
            Ok(response) => response.into_inner(),
            Err(status) => {
                return Err(self
                    .session
                    .failed(
                        &target,
                        &format!("cannot write {}", params.path),
                        status.into(),
                    )
                    .await)
            }
        };
        let size = written.file.as_ref().map(|f| f.size).unwrap_or_default();
        let verb = if params.append { "Appended" } else { "Wrote" };
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "{verb} {} to {} (now {}).",
            text::bytes(written.bytes_written),
            params.path,
            text::bytes(size)
        ))]))
    }

    async fn do_list_files(
        &self,
        params: ListFiles,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        let path = params.path.unwrap_or_else(|| "/root".into());
        absolute(&path)?;
        let depth = params.depth.unwrap_or(1);
        if depth == 0 || depth > DEPTH_MAX {
            return Err(Stop::Invalid(format!("depth must be 1 to {DEPTH_MAX}")));
        }
        let target = self.session.target(&context, params.sandbox_id).await?;
        let request = ListFilesRequest {
            sandbox_id: target.id.clone(),
            path: path.clone(),
            depth,
        };
        let mut entries = match target.client.files().list(request).await {
            Ok(response) => response.into_inner().entries,
            Err(status) => {
                return Err(self
                    .session
                    .failed(&target, &format!("cannot list {path}"), status.into())
                    .await)
            }
        };
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        if entries.is_empty() {
            return Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "{path} is empty"
            ))]));
        }
        let mut lines: Vec<String> = entries.iter().take(LIST_LIMIT).map(entry_line).collect();
        if entries.len() > LIST_LIMIT {
            lines.push(format!(
                "[{} more entries not listed: list a subdirectory, or use run_command with find]",
                entries.len() - LIST_LIMIT
            ));
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(
            lines.join("\n"),
        )]))
    }

    async fn do_changed(
        &self,
        params: ChangedFiles,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        let target = self.session.target(&context, params.sandbox_id).await?;
        let Some(tracker) = self.session.tracker(&target.id) else {
            self.session
                .start_tracker(&target)
                .await
                .map_err(|e| Stop::call("cannot track changes", e))?;
            return Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "Nothing has run in {} in this session yet, so there are no changes to show; \
                 from now on its changes under /root and /tmp are tracked.",
                target.id
            ))]));
        };
        let request = ListChangesRequest {
            sandbox_id: target.id.clone(),
            tracker_id: tracker.clone(),
        };
        let listed = match target.client.files().list_changes(request).await {
            Ok(response) => response.into_inner(),
            Err(status) => {
                return Err(self
                    .session
                    .failed(&target, "cannot list the changes", status.into())
                    .await)
            }
        };
        if params.reset.unwrap_or(true) {
            if let Ok(Some(old)) = self.session.start_tracker(&target).await {
                let request = StopTrackingRequest {
                    sandbox_id: target.id.clone(),
                    tracker_id: old,
                };
                let _ = target.client.files().stop_tracking(request).await;
            }
        }
        let mut changes = listed.changes;
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        let mut lines = Vec::new();
        for change in changes.iter().take(LIST_LIMIT) {
            let dir = if change.r#type() == FileType::Directory {
                "/"
            } else {
                ""
            };
            let line = match change.kind() {
                ChangeKind::Created => format!(
                    "created   {}{dir}  {}",
                    change.path,
                    text::bytes(change.size)
                ),
                ChangeKind::Modified => format!(
                    "modified  {}{dir}  {} (was {})",
                    change.path,
                    text::bytes(change.size),
                    text::bytes(change.previous_size)
                ),
                ChangeKind::Deleted => format!("deleted   {}{dir}", change.path),
                ChangeKind::Unspecified => continue,
            };
            lines.push(line);
        }
        let mut text = if lines.is_empty() {
            "No files were created, modified or deleted under /root and /tmp.".to_owned()
        } else {
            lines.join("\n")
        };
        if changes.len() > LIST_LIMIT {
            text.push_str(&format!(
                "\n[{} more changes not listed]",
                changes.len() - LIST_LIMIT
            ));
        }
        if listed.truncated {
            text.push_str("\n[the guest stopped counting: there were more changes than it tracks]");
        }
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json!({
            "sandbox_id": target.id,
            "changes": changes.len(),
            "truncated": listed.truncated,
        }));
        Ok(result)
    }
}

/// `dir   /root/x/`, `file  123 bytes  /root/a`, `link  /root/l -> t`.
fn entry_line(entry: &FileInfo) -> String {
    match entry.r#type() {
        FileType::Directory => format!("dir   {}/", entry.path),
        FileType::File => format!("file  {}  {}", entry.path, text::bytes(entry.size)),
        FileType::Symlink => format!("link  {} -> {}", entry.path, entry.symlink_target),
        _ => format!("other {}", entry.path),
    }
}
