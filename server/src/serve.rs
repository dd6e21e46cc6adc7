//! [`serve`]: a server from its configuration and listeners, until told to
//! stop.
//!
//! Starting, it opens the key store and reads the sandbox records a
//! previous server left: a sandbox still running is adopted, one saved to
//! disk is listed again (and restored on its next call). Then it serves the same services on each
//! listener: on the Unix socket every call is the owner's; on TCP every
//! call must carry a key, and gRPC-Web is served beside gRPC for the
//! configured origins. Stopping, it does with its sandboxes what
//! [`OnExit`] says and ends its tasks.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use tokio::sync::oneshot;
use tokio_stream::wrappers::{ReceiverStream, UnixListenerStream};
use tonic::service::interceptor::InterceptedService;
use tower_http::cors::{AllowOrigin, CorsLayer};

use airlock::{SandboxState, Sandboxes};
use airlock_api::limits::MAX_MESSAGE_BYTES;
use airlock_api::v1 as api;
use airlock_api::v1::events_server::EventsServer;
use airlock_api::v1::{
    code_server::CodeServer, files_server::FilesServer, ingress_server::IngressServer,
    keys_server::KeysServer, network_server::NetworkServer, processes_server::ProcessesServer,
    sandboxes_server::SandboxesServer, templates_server::TemplatesServer,
    usage_server::UsageServer, workspaces_server::WorkspacesServer,
};

use crate::auth::{KeyAuth, OwnerOnly};
use crate::config::{OnExit, ServerConfig};
use crate::error::ServerError;
use crate::events::{Draft, EventKind, Events, PauseMode, Seen};
use crate::ingress::{Ingress, IngressListener};
use crate::keys::KeyStore;
use crate::listen::{TcpEndpoint, UnixSocket};
use crate::metrics::{Metrics, StatusLayer};
use crate::principal::Principal;
use crate::record::{Record, Records};
use crate::registry::Registry;
use crate::service::{create, Services};
use crate::state::State;
use crate::trace::TraceLayer;
use airlock_api::throttle::Throttle;

/// How long a stopping server waits for its connections to close.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a server listens.
#[derive(Debug, Default)]
pub struct Listeners {
    /// The owner's Unix socket.
    pub unix: Option<UnixSocket>,
    /// TCP, with keys.
    pub tcp: Option<TcpEndpoint>,
    /// The HTTP ingress into sandboxes' servers.
    pub ingress: Option<IngressListener>,
    /// The E2B-compatible front.
    pub e2b: Option<crate::e2b::E2bListener>,
}

/// Every service of the API behind `$interceptor`, on the server builder
/// `$server` (a macro: the builder's type changes with its layers).
macro_rules! routes {
    ($server:expr, $services:expr, $interceptor:expr) => {{
        macro_rules! service {
            ($kind:ident) => {
                InterceptedService::new(
                    $kind::new($services.clone())
                        .max_decoding_message_size(MAX_MESSAGE_BYTES)
                        .max_encoding_message_size(MAX_MESSAGE_BYTES),
                    $interceptor.clone(),
                )
            };
        }
        $server
            .add_service(service!(SandboxesServer))
            .add_service(service!(ProcessesServer))
            .add_service(service!(FilesServer))
            .add_service(service!(CodeServer))
            .add_service(service!(NetworkServer))
            .add_service(service!(IngressServer))
            .add_service(service!(KeysServer))
            .add_service(service!(WorkspacesServer))
            .add_service(service!(TemplatesServer))
            .add_service(service!(EventsServer))
            .add_service(service!(UsageServer))
    }};
}

/// The CORS answer for browser pages of `origins` (gRPC-Web).
fn cors(origins: &[String]) -> CorsLayer {
    let origins: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|origin| HeaderValue::from_str(origin).ok())
        .collect();
    let header = |name: &'static str| HeaderName::from_static(name);
    CorsLayer::new()
        .allow_origin(AllowOrigin::list(origins))
        .allow_methods([http::Method::POST, http::Method::OPTIONS])
        .allow_headers([
            header("authorization"),
            header("content-type"),
            header("x-grpc-web"),
            header("x-user-agent"),
            header("grpc-timeout"),
            // The TypeScript SDK's `ConnectionConfig.setIntegration` name.
            header("x-airlock-integration"),
        ])
        .expose_headers([
            header("grpc-status"),
            header("grpc-message"),
            header("grpc-status-details-bin"),
            header(airlock_api::reason::REASON_KEY),
            header(airlock_api::reason::FIELD_KEY),
        ])
        .max_age(Duration::from_secs(600))
}

/// Serves until `shutdown` completes, then stops as `config.on_exit` says.
pub async fn serve(
    config: ServerConfig,
    mut listeners: Listeners,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServerError> {
    let keys = Arc::new(KeyStore::open(&config.data_dir)?);
    let registry = Registry::new(Records::open(config.data_dir.join("sandboxes"))?);
    let sandboxes = Sandboxes::new(config.max_sandboxes);
    let metrics = config.metrics.as_ref().map(|_| Arc::new(Metrics::new()));
    let pool = match config.pool {
        0 => None,
        size => {
            let images = airlock::images::ImageStore::at(config.images_dir.clone());
            let templates = crate::templates::Templates::new(
                config.templates_dir.clone(),
                &config.data_dir,
                config.max_template_builds,
            );
            let snapshots = crate::snapshots::SnapshotNames::new(&config.data_dir);
            let context = create::Context {
                images: &images,
                templates: &templates,
                snapshots: &snapshots,
                data_dir: &config.data_dir,
                default_timeout: config.default_timeout,
            };
            // The default configuration, or the owner's snapshot.
            let request = api::CreateSandboxRequest {
                snapshot: config.pool_snapshot.clone().unwrap_or_default(),
                ..api::CreateSandboxRequest::default()
            };
            let default = create::check(request, &Principal::Owner, &context)
                .map_err(|status| ServerError::Pool(status.message().to_owned()))?;
            let builder = default.machine.builder((config.builder)(), None);
            let mut pool =
                airlock::PoolConfig::new(builder, size).warm_up(config.pool_warm_up.clone());
            if let Some(metrics) = &metrics {
                let metrics = Arc::downgrade(metrics);
                pool = pool.on_refilled(move |took| {
                    if let Some(metrics) = metrics.upgrade() {
                        metrics.pool_refilled(took);
                    }
                });
            }
            sandboxes
                .configure_pool(pool)
                .map_err(|error| ServerError::Pool(airlock::error_chain(&error)))?;
            tracing::info!(size, "keeping a warm pool");
            Some(default.machine)
        }
    };
    let on_exit = config.on_exit;
    let cors_origins = config.cors_origins.clone();
    let mut state = State::new(config, sandboxes, registry, keys, pool);
    state.events = Events::open(&state.config.data_dir.join("events"))?;
    for url in &state.config.webhooks {
        crate::webhooks::Target::parse(url, true)?;
    }
    state.webhooks = Some(Arc::new(crate::webhooks::Webhooks::open(
        &state.config.data_dir.join("webhooks"),
        &state.config.webhooks,
    )?));
    let ingress_listener = listeners.ingress.take();
    if let Some(listener) = &ingress_listener {
        let address = listener
            .endpoint
            .local_addr()
            .map_err(|source| ServerError::Bind {
                address: "the ingress listener".to_owned(),
                source,
            })?;
        state.ingress = Some(Arc::new(Ingress::new(
            address,
            listener.domain.clone(),
            listener.endpoint.is_tls(),
        )));
    }
    state.metrics = metrics;
    if state.config.usage_ledger {
        state.usage = Some(Arc::new(crate::usage::Ledger::open(
            &state.config.data_dir,
            state.builder().saved_store(),
            crate::workspaces::WorkspaceStore::new(&state.config.data_dir),
        )?));
    }
    let state = Arc::new(state);
    if let Err(status) = state.snapshots.open_up(&state.config.data_dir) {
        tracing::warn!(error = status.message(), "snapshots' directory");
    }
    let keys: std::collections::HashSet<String> = state
        .keys
        .list()
        .into_iter()
        .map(|key| key.name.to_string())
        .collect();
    state.snapshots.collect(&keys);
    recover(&state).await;
    if let Some(ledger) = &state.usage {
        let server = Arc::downgrade(&state);
        state.spawn(
            Arc::clone(ledger).run(move || server.upgrade().map(|state| state.registry.all())),
        );
    }
    state.spawn(crate::events::watch(Arc::clone(&state)));
    if let Some(webhooks) = &state.webhooks {
        for task in webhooks.tasks(Arc::clone(&state)) {
            state.spawn(task);
        }
    }
    let owners: std::collections::HashSet<String> = state
        .registry
        .all()
        .iter()
        .filter_map(|entry| entry.record.owner.clone())
        .collect();
    state.templates.collect(&keys, &owners);
    let tls = listeners.tcp.as_ref().is_some_and(TcpEndpoint::is_tls);
    let grpc_web = listeners.tcp.is_some();
    let services = Services {
        state: Arc::clone(&state),
        tls,
        grpc_web,
    };
    let mut stops = Vec::new();
    let mut servers = Vec::new();
    if let Some(listener) = listeners.unix.as_mut().and_then(UnixSocket::take_listener) {
        let incoming = UnixListenerStream::new(listener).filter_map(|accepted| async move {
            match accepted {
                Ok(stream) => Some(Ok::<_, std::io::Error>(stream)),
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    None
                }
            }
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let mut builder = tonic::transport::Server::builder()
            .layer(TraceLayer)
            .layer(StatusLayer::new(state.metrics.clone()));
        let router = routes!(builder, services, OwnerOnly);
        servers.push(tokio::spawn(router.serve_with_incoming_shutdown(
            incoming,
            async {
                let _ = stopped.await;
            },
        )));
        stops.push(stop);
    }
    if let Some(endpoint) = listeners.tcp.take() {
        let address = endpoint.local_addr().ok();
        let incoming = ReceiverStream::new(endpoint.accept());
        let auth = KeyAuth::new(
            Arc::clone(&state.keys),
            Arc::new(Throttle::default()),
            state.metrics.clone(),
        );
        let (stop, stopped) = oneshot::channel::<()>();
        let mut builder = tonic::transport::Server::builder()
            .accept_http1(true)
            .layer(cors(&cors_origins))
            .layer(tonic_web::GrpcWebLayer::new())
            // Inside gRPC-Web's translation: the status is in trailers.
            .layer(TraceLayer)
            .layer(StatusLayer::new(state.metrics.clone()));
        let router = routes!(builder, services, auth);
        servers.push(tokio::spawn(router.serve_with_incoming_shutdown(
            incoming,
            async {
                let _ = stopped.await;
            },
        )));
        stops.push(stop);
        tracing::info!(?address, tls, "serving on TCP");
    }
    if let (Some(listener), Some(ingress)) = (ingress_listener, state.ingress.clone()) {
        let (stop, stopped) = oneshot::channel::<()>();
        tracing::info!(address = %ingress.address, domain = ingress.domain, tls = ingress.tls, "serving ingress");
        servers.push(tokio::spawn({
            let state = Arc::clone(&state);
            async move {
                crate::ingress::serve(state, ingress, listener.endpoint, stopped).await;
                Ok(())
            }
        }));
        stops.push(stop);
    }
    if let Some(listener) = listeners.e2b.take() {
        let (stop, stopped) = oneshot::channel::<()>();
        let address = listener.endpoint.local_addr().ok();
        tracing::info!(
            ?address,
            domain = listener.domain,
            "serving the E2B-compatible front"
        );
        let front = Arc::new(crate::e2b::Front {
            services: services.clone(),
            domain: listener.domain,
            throttle: Throttle::default(),
        });
        servers.push(tokio::spawn(async move {
            crate::e2b::serve(front, listener.endpoint, stopped).await;
            Ok(())
        }));
        stops.push(stop);
    }
    if let (Some(endpoint), Some(metrics)) = (state.config.metrics.clone(), &state.metrics) {
        let (stop, stopped) = oneshot::channel::<()>();
        tracing::info!(address = %endpoint.local_addr(), "serving metrics");
        let registry = metrics.registry(Box::new(crate::metrics::live::Live::new(Arc::downgrade(
            &state,
        ))));
        servers.push(tokio::spawn(async move {
            if let Err(error) = crate::metrics::serve(endpoint, registry, stopped).await {
                tracing::warn!(error = %airlock::error_chain(&error), "metrics");
            }
            Ok(())
        }));
        stops.push(stop);
    }
    if let Some(socket) = &listeners.unix {
        tracing::info!(socket = %socket.path().display(), "serving on the Unix socket");
    }
    shutdown.await;
    stop_sandboxes(&state, on_exit).await;
    // What the sandboxes used up to their end, or up to the next server.
    if let Some(ledger) = &state.usage {
        ledger.accrue(state.registry.all()).await;
    }
    state.end_tasks().await;
    for stop in stops {
        let _ = stop.send(());
    }
    let mut served = Ok(());
    for server in servers {
        match tokio::time::timeout(DRAIN_TIMEOUT, server).await {
            Ok(Ok(Err(error))) => served = Err(ServerError::Serve(error)),
            Ok(_) => {}
            Err(_) => tracing::warn!("connections still open; stopping anyway"),
        }
    }
    drop(listeners);
    served
}

/// Reads back what a previous server left. A sandbox still running (its
/// server died, or left it with `--on-exit leave`) is adopted: its VM,
/// programs, files and network policy go on, under the same owner and
/// labels. A sandbox saved to disk is listed again (and restored on its
/// next call). A record whose sandbox is gone is removed. Orphans and saved
/// sandboxes without a record (a server that died before writing it, a
/// library user's) are the owner's.
async fn recover(state: &State) {
    let builder = state.builder();
    let saved = builder.saved_store();
    let orphans: Vec<String> = match builder.orphans() {
        Ok(orphans) => orphans.into_iter().map(|orphan| orphan.id).collect(),
        Err(error) => {
            tracing::warn!(%error, "cannot look for sandboxes to adopt");
            Vec::new()
        }
    };
    let mut known = Vec::new();
    let records = state.registry.stored_records();
    let unrecorded = orphans
        .iter()
        .filter(|id| !records.iter().any(|record| &record.id == *id))
        .map(|id| Record::new(id.clone()))
        .collect::<Vec<_>>();
    for record in records.into_iter().chain(unrecorded) {
        let id = record.id.clone();
        if orphans.contains(&id) {
            match state.sandboxes.adopt(state.builder(), &id).await {
                Ok(handle) => {
                    tracing::info!(%id, owner = ?record.owner, "adopted a sandbox of a previous server");
                    state.events.know(&id, Seen::of(&handle.state()));
                    known.push(id);
                    state.registry.insert(record, Some(handle));
                    continue;
                }
                Err(error) => tracing::warn!(
                    %id,
                    error = %airlock::error_chain(&error),
                    "cannot adopt a sandbox of a previous server"
                ),
            }
        }
        if saved.contains(&id) {
            tracing::info!(%id, owner = ?record.owner, "a sandbox saved to disk is back in the list");
            state.events.know(&id, Seen::Paused(PauseMode::Disk));
            known.push(id);
            state.registry.insert(record, None);
        } else if !orphans.contains(&id) {
            tracing::info!(%id, "a sandbox of a previous server is gone");
            state.events.emit(
                Draft::new(EventKind::Lost, &id, record.owner.as_deref())
                    .because("it was gone when the server started"),
            );
            state.registry.forget_record(&id);
        }
    }
    for saved in saved.list().unwrap_or_default() {
        if known.contains(&saved.id) {
            continue;
        }
        state.events.know(&saved.id, Seen::Paused(PauseMode::Disk));
        let mut record = Record::new(saved.id.clone());
        record.memory_mib = saved.vm.memory_mib;
        record.vcpus = saved.vm.vcpus;
        state.registry.insert(record, None);
    }
}

/// Does with every sandbox what `on_exit` says.
async fn stop_sandboxes(state: &State, on_exit: OnExit) {
    let entries = state.registry.all();
    if on_exit == OnExit::PauseToDisk {
        for entry in &entries {
            let Some(handle) = &entry.handle else {
                continue;
            };
            if !matches!(handle.state(), SandboxState::Running | SandboxState::Paused) {
                continue;
            }
            let _held = state.events.hold(handle.id());
            match handle.pause_to_disk().await {
                Ok(()) => {
                    tracing::info!(id = handle.id(), "saved to disk for the next server");
                    state.events.emit(
                        Draft::new(
                            EventKind::Paused,
                            handle.id(),
                            entry.record.owner.as_deref(),
                        )
                        .because("saved to disk by the stopping server (--on-exit pause-to-disk)")
                        .with(crate::events::Details {
                            pause_mode: Some(PauseMode::Disk),
                            ..Default::default()
                        }),
                    );
                }
                Err(error) => tracing::warn!(
                    id = handle.id(),
                    error = %airlock::error_chain(&error),
                    "cannot save to disk; killing it"
                ),
            }
        }
    }
    tracing::info!(sandboxes = entries.len(), ?on_exit, "stopping");
    if on_exit == OnExit::Leave {
        for (id, detached) in state.sandboxes.detach_all().await {
            match detached {
                Ok(()) => tracing::info!(%id, "left running for the next server"),
                Err(error) => {
                    tracing::warn!(%id, error = %airlock::error_chain(&error), "cannot leave it running; it ended")
                }
            }
        }
        return;
    }
    // Kills what runs; a sandbox on disk stays there.
    let holds: Vec<_> = entries
        .iter()
        .map(|entry| state.events.hold(&entry.record.id))
        .collect();
    state.sandboxes.kill_all();
    for entry in entries {
        if let Some(handle) = entry.handle {
            if matches!(handle.state(), SandboxState::OnDisk) {
                continue;
            }
            handle.kill();
            state.events.emit(
                Draft::new(
                    EventKind::Killed,
                    handle.id(),
                    entry.record.owner.as_deref(),
                )
                .because("killed by the stopping server (--on-exit kill)"),
            );
        }
    }
    drop(holds);
    // Their records go, so the next server does not find them lost.
    state.registry.sweep();
}
