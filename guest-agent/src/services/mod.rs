//! The gRPC services of `airlock.agent.v1`, one module each:
//! [`code`], [`files`], [`health`], [`network`], [`process`], [`system`]. [`router`]
//! mounts them on a tonic server, with HTTP/2 keepalives, for
//! `crate::server` to serve.

pub mod code;
pub mod files;
pub mod health;
pub mod network;
pub mod process;
pub mod system;

use airlock_proto::contract::serial::{KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT};
use airlock_proto::opening::AGENT_MAX_FRAME_BYTES;
use airlock_proto::v1::{
    code_server::CodeServer, files_server::FilesServer, health_server::HealthServer,
    network_server::NetworkServer, process_server::ProcessServer, system_server::SystemServer,
};
use tonic::transport::server::Router;
use tonic::transport::Server;

pub use code::CodeService;
pub use files::FilesService;
pub use health::HealthService;
pub use network::NetworkService;
pub use process::ProcessService;
pub use system::{ShutdownMode, SystemError, SystemService};

/// Everything the agent serves.
#[derive(Debug)]
pub struct Services {
    /// `Code`.
    pub code: CodeService,
    /// `Files`.
    pub files: FilesService,
    /// `Health`.
    pub health: HealthService,
    /// `Network`.
    pub network: NetworkService,
    /// `Process`.
    pub process: ProcessService,
    /// `System`.
    pub system: SystemService,
}

/// A tonic router serving all services. It pings the host every
/// [`KEEPALIVE_INTERVAL`] and drops a connection whose pings go unanswered
/// for [`KEEPALIVE_TIMEOUT`]: on a serial port, that frees the port for the
/// host's next connection when the last one died silently. Its largest
/// frame is the contract's, which the host's opening flush is sized for.
pub fn router(services: Services) -> Router {
    Server::builder()
        .max_frame_size(Some(AGENT_MAX_FRAME_BYTES))
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(CodeServer::new(services.code))
        .add_service(FilesServer::new(services.files))
        .add_service(HealthServer::new(services.health))
        .add_service(NetworkServer::new(services.network))
        .add_service(ProcessServer::new(services.process))
        .add_service(SystemServer::new(services.system))
}
