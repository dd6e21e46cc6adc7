//! `airlock.api.v1.Sandboxes`: the lifecycle calls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::{Request, Response, Status};

use airlock::SandboxState;
use airlock_api::limits;
use airlock_api::reason::{self, invalid};
use airlock_api::v1::{self as api, sandboxes_server, ErrorReason};

use super::create::{self, Create};
use super::Services;
use crate::convert::{self, now_ms, sandbox_info};
use crate::events::{self, Details, Draft, EventKind, PauseMode};
use crate::metrics::Origin;
use crate::principal::Principal;
use crate::record::Record;
use crate::registry::Entry;
use crate::status::error_status;
use crate::validate;

impl Services {
    /// The info of the sandbox `id` as it is now.
    fn info_of(&self, principal: &Principal, id: &str) -> Result<api::SandboxInfo, Status> {
        Ok(sandbox_info(&self.state.registry.get(principal, id)?))
    }

    /// The server's record for a sandbox it just started.
    fn record_for(&self, id: &str, principal: &Principal, create: &Create, pooled: bool) -> Record {
        let mut record = Record::new(id.to_owned());
        record.owner = principal.key().map(str::to_owned);
        record.metadata = create.metadata.clone();
        record.envs = create.envs.clone();
        record.image = create.machine.image.clone();
        record.template = create.template.clone();
        record.memory_mib = create.machine.memory_mib;
        record.vcpus = create.machine.vcpus;
        record.created_at_ms = now_ms();
        record.ends_at_ms = create
            .machine
            .timeout
            .map_or(0, |after| record.created_at_ms + convert::millis(after));
        record.network = create.network.is_some();
        record.secrets = create.machine.secret_names.clone();
        record.pooled = pooled;
        record.public_ports = create.public_ports.clone();
        record.workspace = create.named_workspace.clone().unwrap_or_default();
        record.snapshot = create
            .machine
            .snapshot
            .as_ref()
            .map(|(name, _)| name.clone())
            .unwrap_or_default();
        record
    }
}

impl Services {
    /// `Create`: the request checked, the key's quota reserved, the sandbox
    /// started (from the pool where it can) and listed. `origin` is where
    /// it comes from (or would have) once the request passed its checks.
    async fn create_sandbox(
        &self,
        request: Request<api::CreateSandboxRequest>,
        begun: Instant,
        origin: &mut Option<Origin>,
    ) -> Result<Response<api::SandboxInfo>, Status> {
        let call = self.admit(&request)?;
        let state = &self.state;
        let mut create = create::check(
            request.into_inner(),
            &call.principal,
            &create::Context::of(state),
        )?;
        create::apply_host_access(&mut create, state.host_access(&call.principal))?;
        *origin = Some(Origin::planned(&create.machine, state.pool.as_ref()));
        let reservation = state.registry.reserve(
            &call.principal,
            state.quota(&call.principal),
            1,
            create.machine.memory_mib,
        )?;
        // A named workspace is counted against the key's quota and made
        // (if new) before the sandbox starts, and held until it is listed.
        let claim = match &create.named_workspace {
            Some(name) => Some(
                state
                    .workspaces
                    .claim(
                        &call.principal,
                        name,
                        create.machine.workspace_size_mib,
                        "workspace_size_mib",
                        state.quota(&call.principal),
                        state.builder(),
                    )
                    .await?,
            ),
            None => None,
        };
        let host_path = create
            .machine
            .workspace
            .as_ref()
            .filter(|_| claim.is_none());
        if let Some(parent) = host_path.and_then(|w| w.parent()) {
            std::fs::create_dir_all(parent).map_err(|e| {
                reason::status(
                    ErrorReason::Internal,
                    format!(
                        "cannot make the workspace directory {}: {e}",
                        parent.display()
                    ),
                )
            })?;
        }
        let pooled = state
            .pool
            .as_ref()
            .is_some_and(|pool| create.machine.pooled_from(pool));
        let started = if pooled {
            state.sandboxes.start_pooled().await
        } else {
            let builder = create
                .machine
                .builder(state.builder(), create.network.clone());
            state.sandboxes.start(builder).await
        };
        let handle = match started {
            Ok(handle) => handle,
            Err(error) => {
                claim.into_iter().for_each(|claim| claim.discard());
                return Err(error_status(&error));
            }
        };
        crate::trace::record_sandbox(handle.id());
        let record = self.record_for(handle.id(), &call.principal, &create, pooled);
        tracing::info!(id = handle.id(), principal = %call.principal, pooled, "created");
        let id = record.id.clone();
        let metrics_origin = Origin::of(handle.origin(), pooled, create.machine.template.is_some());
        *origin = Some(metrics_origin);
        let origin = convert::origin(handle.origin(), pooled);
        let created = events::created(&record, origin, format!("created by {}", call.principal));
        state.registry.insert(record, Some(handle));
        state.events.emit(created);
        if let Some(metrics) = &state.metrics {
            let first = metrics.awaiting_first_output(metrics_origin, begun);
            state.registry.await_first_output(&id, first);
        }
        drop(claim);
        drop(reservation);
        Ok(Response::new(self.info_of(&call.principal, &id)?))
    }
}

#[tonic::async_trait]
impl sandboxes_server::Sandboxes for Services {
    async fn ping(
        &self,
        request: Request<api::PingRequest>,
    ) -> Result<Response<api::PingResponse>, Status> {
        let call = self.call(&request)?;
        let mut features = vec![
            airlock_api::features::KEYS.to_owned(),
            airlock_api::features::ADOPTION.to_owned(),
        ];
        if self.tls {
            features.push(airlock_api::features::TLS.to_owned());
        }
        if self.grpc_web {
            features.push(airlock_api::features::GRPC_WEB.to_owned());
        }
        if self.state.pool.is_some() {
            features.push(airlock_api::features::POOL.to_owned());
        }
        if self.state.ingress.is_some() {
            features.push(airlock_api::features::INGRESS.to_owned());
        }
        Ok(Response::new(api::PingResponse {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            api_revision: airlock_api::REVISION,
            features,
            pid: match call.principal {
                Principal::Owner => std::process::id(),
                Principal::Key(_) => 0,
            },
            principal: call.principal.to_string(),
        }))
    }

    async fn create(
        &self,
        request: Request<api::CreateSandboxRequest>,
    ) -> Result<Response<api::SandboxInfo>, Status> {
        let begun = Instant::now();
        let mut origin = None;
        let created = self.create_sandbox(request, begun, &mut origin).await;
        if let (Some(metrics), Some(origin)) = (&self.state.metrics, origin) {
            metrics.created(origin, &created, begun.elapsed());
        }
        created
    }

    async fn get(
        &self,
        request: Request<api::GetSandboxRequest>,
    ) -> Result<Response<api::SandboxInfo>, Status> {
        let call = self.call(&request)?;
        let entry = call.entry("sandbox_id", &request.get_ref().sandbox_id)?;
        Ok(Response::new(sandbox_info(&entry)))
    }

    async fn list(
        &self,
        request: Request<api::ListSandboxesRequest>,
    ) -> Result<Response<api::ListSandboxesResponse>, Status> {
        let call = self.call(&request)?;
        let request = request.into_inner();
        validate::labels("metadata", &request.metadata)?;
        let page_size = match request.page_size {
            0 => limits::DEFAULT_PAGE_SIZE,
            n => validate::within("page_size", n, 1, limits::MAX_PAGE_SIZE)?,
        } as usize;
        if !request.page_token.is_empty() {
            validate::sandbox_id("page_token", &request.page_token)?;
        }
        let states: Vec<api::SandboxState> = request
            .states
            .iter()
            .map(|&value| {
                api::SandboxState::try_from(value)
                    .ok()
                    .filter(|s| *s != api::SandboxState::Unspecified)
                    .ok_or_else(|| invalid("states", format!("{value} is not a sandbox state")))
            })
            .collect::<Result<_, _>>()?;
        let matching: Vec<Entry> = self
            .state
            .registry
            .list(&call.principal)
            .into_iter()
            .filter(|entry| entry.record.id.as_str() > request.page_token.as_str())
            .filter(|entry| {
                request
                    .metadata
                    .iter()
                    .all(|(k, v)| entry.record.metadata.get(k) == Some(v))
            })
            .filter(|entry| states.is_empty() || states.contains(&convert::state(&entry.state())))
            .take(page_size + 1)
            .collect();
        let more = matching.len() > page_size;
        let sandboxes: Vec<api::SandboxInfo> =
            matching.iter().take(page_size).map(sandbox_info).collect();
        let next_page_token = match (more, sandboxes.last()) {
            (true, Some(last)) => last.sandbox_id.clone(),
            _ => String::new(),
        };
        Ok(Response::new(api::ListSandboxesResponse {
            sandboxes,
            next_page_token,
        }))
    }

    async fn set_timeout(
        &self,
        request: Request<api::SetTimeoutRequest>,
    ) -> Result<Response<api::SandboxInfo>, Status> {
        let call = self.call(&request)?;
        let request = request.into_inner();
        let from_now = match request.timeout_secs {
            0 => {
                call.principal
                    .require_owner("a sandbox without a timeout (timeout_secs 0)")?;
                None
            }
            secs => Some(Duration::from_secs(validate::within(
                "timeout_secs",
                secs,
                1,
                limits::MAX_TIMEOUT_SECS,
            )?)),
        };
        let (_, handle) = call.sandbox(&request.sandbox_id).await?;
        handle.set_timeout(from_now);
        // The record keeps the end too: a sandbox saved to disk shows it.
        let ends_at_ms = handle.ends_at().map_or(0, convert::unix_ms);
        self.state
            .registry
            .set_ends_at(&request.sandbox_id, ends_at_ms);
        tracing::info!(id = request.sandbox_id, principal = %call.principal, ?from_now, "timeout set");
        Ok(Response::new(
            self.info_of(&call.principal, &request.sandbox_id)?,
        ))
    }

    async fn kill(
        &self,
        request: Request<api::KillSandboxRequest>,
    ) -> Result<Response<api::KillSandboxResponse>, Status> {
        let call = self.call(&request)?;
        let id = &request.get_ref().sandbox_id;
        validate::sandbox_id("sandbox_id", id)?;
        crate::trace::record_sandbox(id);
        let _held = self.state.events.hold(id);
        let entry = self.state.registry.remove(&call.principal, id)?;
        let ending = self
            .state
            .usage
            .as_ref()
            .map(|ledger| ledger.before_end(&entry));
        match self.state.sandboxes.remove(&self.state.builder(), id) {
            Ok(()) => {}
            // Ended and forgotten by the manager already.
            Err(airlock::Error::NoSuchSandbox { .. }) => {
                if let Some(handle) = &entry.handle {
                    handle.kill();
                }
            }
            Err(error) => return Err(error_status(&error)),
        }
        if let (Some(ledger), Some(ending)) = (&self.state.usage, ending) {
            ledger.settle(ending).await;
        }
        self.state.trackers.forget_sandbox(id);
        self.state.relays.forget_sandbox(id);
        tracing::info!(%id, principal = %call.principal, "killed");
        self.state.events.emit(
            Draft::new(EventKind::Killed, id, entry.record.owner.as_deref())
                .because(format!("killed by {}", call.principal)),
        );
        Ok(Response::new(api::KillSandboxResponse {}))
    }

    async fn pause(
        &self,
        request: Request<api::PauseSandboxRequest>,
    ) -> Result<Response<api::SandboxInfo>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        let _held = self.state.events.hold(&request.sandbox_id);
        let (entry, handle) = call.sandbox(&request.sandbox_id).await?;
        let (paused, mode) = if request.to_disk {
            (handle.pause_to_disk().await, PauseMode::Disk)
        } else {
            (handle.pause().await, PauseMode::Memory)
        };
        paused.map_err(|error| error_status(&error))?;
        self.state.events.emit(
            Draft::new(
                EventKind::Paused,
                handle.id(),
                entry.record.owner.as_deref(),
            )
            .because(format!("paused by {}", call.principal))
            .with(Details {
                pause_mode: Some(mode),
                ..Details::default()
            }),
        );
        Ok(Response::new(
            self.info_of(&call.principal, &request.sandbox_id)?,
        ))
    }

    async fn resume(
        &self,
        request: Request<api::ResumeSandboxRequest>,
    ) -> Result<Response<api::SandboxInfo>, Status> {
        let call = self.admit(&request)?;
        let id = request.into_inner().sandbox_id;
        let _held = self.state.events.hold(&id);
        let (entry, handle) = call.sandbox(&id).await?;
        handle
            .resume()
            .await
            .map_err(|error| error_status(&error))?;
        self.state.events.emit(
            Draft::new(EventKind::Resumed, &id, entry.record.owner.as_deref())
                .because(format!("resumed by {}", call.principal)),
        );
        Ok(Response::new(self.info_of(&call.principal, &id)?))
    }

    async fn fork(
        &self,
        request: Request<api::ForkSandboxRequest>,
    ) -> Result<Response<api::ForkSandboxResponse>, Status> {
        let call = self.admit(&request)?;
        let request = request.into_inner();
        let count = validate::within("count", request.count, 1, limits::MAX_FORK)?;
        let _held = self.state.events.hold(&request.sandbox_id);
        let (parent, _) = call.sandbox(&request.sandbox_id).await?;
        let reservation = self.state.registry.reserve(
            &call.principal,
            self.state.quota(&call.principal),
            count,
            parent.record.memory_mib,
        )?;
        let begun = Instant::now();
        let forked = self
            .state
            .sandboxes
            .fork(&request.sandbox_id, count as usize)
            .await
            .map_err(|error| error_status(&error));
        if let Some(metrics) = &self.state.metrics {
            metrics.forked(forked.as_ref().map(Vec::len), begun.elapsed());
        }
        let children = forked?;
        let mut sandboxes = Vec::with_capacity(children.len());
        let mut born = Vec::with_capacity(children.len());
        for child in children {
            let mut record = (*parent.record).clone();
            record.id = child.id().to_owned();
            record.created_at_ms = now_ms();
            record.pooled = false;
            // Its own token: a child is not reachable with its parent's.
            record.ingress_token = crate::ingress::token::new();
            let id = record.id.clone();
            let mut created =
                events::created(&record, "fork", format!("forked by {}", call.principal));
            created.details.parent = request.sandbox_id.clone();
            self.state.registry.insert(record, Some(Arc::clone(&child)));
            self.state.events.emit(created);
            born.push(id.clone());
            sandboxes.push(self.info_of(&call.principal, &id)?);
        }
        drop(reservation);
        self.state.events.emit(
            Draft::new(
                EventKind::Forked,
                &request.sandbox_id,
                parent.record.owner.as_deref(),
            )
            .because(format!("forked by {}", call.principal))
            .with(Details {
                children: born,
                ..Details::default()
            }),
        );
        tracing::info!(parent = request.sandbox_id, count, principal = %call.principal, "forked");
        Ok(Response::new(api::ForkSandboxResponse { sandboxes }))
    }

    async fn get_metrics(
        &self,
        request: Request<api::GetMetricsRequest>,
    ) -> Result<Response<api::SandboxMetrics>, Status> {
        let call = self.admit(&request)?;
        let id = request.into_inner().sandbox_id;
        let (_, handle) = call.sandbox(&id).await?;
        let mut metrics = api::SandboxMetrics {
            usage: Some(convert::usage(&handle.usage())),
            at_ms: now_ms(),
            ..api::SandboxMetrics::default()
        };
        // A paused sandbox is not woken to be measured.
        if handle.state() == SandboxState::Running {
            let health = handle
                .health()
                .await
                .map_err(|error| error_status(&error))?;
            metrics.memory_total_bytes = health.memory_total_bytes;
            metrics.memory_available_bytes = health.memory_available_bytes;
            metrics.programs_cpu_ms = health.programs_cpu_us / 1000;
            metrics.programs_memory_bytes = health.programs_memory_bytes;
            metrics.disk_total_bytes = health.disk_total_bytes;
            metrics.disk_used_bytes = health.disk_used_bytes;
        }
        Ok(Response::new(metrics))
    }

    async fn list_images(
        &self,
        _: Request<api::ListImagesRequest>,
    ) -> Result<Response<api::ListImagesResponse>, Status> {
        let images =
            self.state.images.list().map_err(|error| {
                reason::status(ErrorReason::Internal, airlock::error_chain(&error))
            })?;
        let images = images
            .into_iter()
            .flat_map(|image| {
                let size = image.meta.image_bytes;
                let source = image.meta.source.clone();
                image.names.into_iter().map(move |name| api::ImageInfo {
                    name,
                    size_bytes: size,
                    source: source.clone(),
                })
            })
            .collect();
        Ok(Response::new(api::ListImagesResponse { images }))
    }

    async fn list_templates(
        &self,
        request: Request<api::ListTemplatesRequest>,
    ) -> Result<Response<api::ListTemplatesResponse>, Status> {
        self.list_templates_of(request).await
    }

    async fn snapshot(
        &self,
        request: Request<api::SnapshotSandboxRequest>,
    ) -> Result<Response<api::SnapshotInfo>, Status> {
        self.take_snapshot(request).await
    }

    async fn list_snapshots(
        &self,
        request: Request<api::ListSnapshotsRequest>,
    ) -> Result<Response<api::ListSnapshotsResponse>, Status> {
        self.list_snapshots_of(request).await
    }

    async fn get_snapshot(
        &self,
        request: Request<api::GetSnapshotRequest>,
    ) -> Result<Response<api::SnapshotInfo>, Status> {
        self.get_snapshot_of(request).await
    }

    async fn delete_snapshot(
        &self,
        request: Request<api::DeleteSnapshotRequest>,
    ) -> Result<Response<api::DeleteSnapshotResponse>, Status> {
        self.delete_snapshot_of(request).await
    }
}
