//! `airlock.agent.v1.System`: the guest as a whole.
//!
//! `Shutdown` answers first, then acts from a spawned task after
//! [`REPLY_GRACE`] so the reply reaches the host: as PID 1 it syncs and
//! powers off (the VMM then exits); otherwise (tests) it asks the server
//! to stop, and the agent process exits 0.
//!
//! `SetClock` sets CLOCK_REALTIME, `Personalize` makes a clone of a
//! template its own machine (entropy, clock, hostname, sandbox id; see
//! [`crate::personalize`]), and `TrustRoots` installs CA certificates in
//! the guest's trust store ([`crate::trust`]), but only as PID 1: an agent
//! running as an ordinary process (tests, development) is on the host,
//! whose clock, random state, hostname and trust store are not the host
//! bridge's to change. Requests are checked before that, so a bad one is
//! INVALID_ARGUMENT anywhere.

pub mod error;

use std::time::Duration;

use airlock_proto::v1::{
    system_server, PersonalizeRequest, PersonalizeResponse, SetClockRequest, SetClockResponse,
    ShutdownRequest, ShutdownResponse, TrustRootsRequest, TrustRootsResponse,
};
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::clock::{self, Realtime};
use crate::init::poweroff;
use crate::personalize::{self, Personalization, SandboxId};
use crate::trust::{Roots, TrustStore};

pub use self::error::SystemError;

/// How long the reply gets to flush before the agent acts.
pub const REPLY_GRACE: Duration = Duration::from_millis(100);

/// What `Shutdown` does.
#[derive(Debug, Clone)]
pub enum ShutdownMode {
    /// Sync and power the VM off (PID 1).
    PowerOff,
    /// Set the flag; the server stops when it sees `true`.
    Stop(watch::Sender<bool>),
}

/// The System service.
#[derive(Debug, Clone)]
pub struct SystemService {
    mode: ShutdownMode,
    sandbox_id: SandboxId,
    trust: TrustStore,
}

impl SystemService {
    /// A service that shuts down as `mode` says.
    pub fn new(mode: ShutdownMode) -> Self {
        Self {
            mode,
            sandbox_id: SandboxId::default(),
            trust: TrustStore::default(),
        }
    }

    /// Records the sandbox id that `Personalize` gives in `sandbox_id`
    /// (which the Health service reports).
    pub fn with_sandbox_id(mut self, sandbox_id: SandboxId) -> Self {
        self.sandbox_id = sandbox_id;
        self
    }

    /// Refuses to `act` unless the agent is PID 1 in a guest.
    fn require_pid1(&self, act: &'static str) -> Result<(), SystemError> {
        match self.mode {
            ShutdownMode::PowerOff => Ok(()),
            ShutdownMode::Stop(_) => Err(SystemError::NotPid1(act)),
        }
    }
}

#[tonic::async_trait]
impl system_server::System for SystemService {
    async fn shutdown(
        &self,
        _: Request<ShutdownRequest>,
    ) -> Result<Response<ShutdownResponse>, Status> {
        tracing::info!("shutdown requested");
        let mode = self.mode.clone();
        tokio::spawn(async move {
            tokio::time::sleep(REPLY_GRACE).await;
            match mode {
                ShutdownMode::PowerOff => poweroff::power_off_or_exit("shutdown requested"),
                ShutdownMode::Stop(stop) => {
                    stop.send_replace(true);
                }
            }
        });
        Ok(Response::new(ShutdownResponse {}))
    }

    async fn set_clock(
        &self,
        request: Request<SetClockRequest>,
    ) -> Result<Response<SetClockResponse>, Status> {
        let target = Realtime::from_unix_nanos(request.into_inner().unix_nanos)
            .map_err(SystemError::from)?;
        self.require_pid1("sets the clock")?;
        let adjusted_by_nanos = clock::set_realtime(target).map_err(SystemError::from)?;
        Ok(Response::new(SetClockResponse { adjusted_by_nanos }))
    }

    async fn personalize(
        &self,
        request: Request<PersonalizeRequest>,
    ) -> Result<Response<PersonalizeResponse>, Status> {
        let personalization =
            Personalization::from_request(request.into_inner()).map_err(SystemError::from)?;
        self.require_pid1("personalizes the guest")?;
        let done = personalize::do_personalize(personalization, &self.sandbox_id)
            .map_err(SystemError::from)?;
        Ok(Response::new(PersonalizeResponse {
            reseeded: done.reseeded,
        }))
    }

    async fn trust_roots(
        &self,
        request: Request<TrustRootsRequest>,
    ) -> Result<Response<TrustRootsResponse>, Status> {
        let roots = Roots::from_request(request.into_inner()).map_err(SystemError::from)?;
        self.require_pid1("changes the trust store")?;
        let store = self.trust.clone();
        // Mounts and a few hundred small files: off the async workers.
        let installed = tokio::task::spawn_blocking(move || store.install(&roots))
            .await
            .map_err(|e| Status::internal(format!("installing the roots: {e}")))?
            .map_err(SystemError::from)?;
        Ok(Response::new(TrustRootsResponse {
            bundle_path: installed.bundle.display().to_string(),
            hashed: u32::try_from(installed.written.hashed).unwrap_or(u32::MAX),
        }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use system_server::System;

    #[tokio::test]
    async fn shutdown_answers_then_signals_stop() {
        let (tx, mut rx) = watch::channel(false);
        let service = SystemService::new(ShutdownMode::Stop(tx));
        service
            .shutdown(Request::new(ShutdownRequest {}))
            .await
            .unwrap();
        assert!(!*rx.borrow(), "acts only after the reply grace");
        rx.wait_for(|stop| *stop).await.unwrap();
    }

    #[tokio::test]
    async fn set_clock_refuses_out_of_range_times() {
        let (tx, _rx) = watch::channel(false);
        let service = SystemService::new(ShutdownMode::Stop(tx));
        for unix_nanos in [0, u64::MAX] {
            let err = service
                .set_clock(Request::new(SetClockRequest { unix_nanos }))
                .await
                .unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{unix_nanos}");
        }
    }

    #[tokio::test]
    async fn set_clock_leaves_the_host_clock_alone_outside_a_guest() {
        let (tx, _rx) = watch::channel(false);
        let service = SystemService::new(ShutdownMode::Stop(tx));
        let err = service
            .set_clock(Request::new(SetClockRequest {
                unix_nanos: 1_000_000_000,
            }))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    }

    fn personalize_request() -> PersonalizeRequest {
        PersonalizeRequest {
            entropy: vec![1; 32].into(),
            unix_nanos: 1_700_000_000_000_000_000,
            hostname: "box".to_owned(),
            sandbox_id: "sb-1".to_owned(),
        }
    }

    #[tokio::test]
    async fn personalize_checks_the_request_first() {
        let (tx, _rx) = watch::channel(false);
        let service = SystemService::new(ShutdownMode::Stop(tx));
        let bad = [
            PersonalizeRequest {
                entropy: vec![1; 31].into(),
                ..personalize_request()
            },
            PersonalizeRequest {
                hostname: "a/b".to_owned(),
                ..personalize_request()
            },
            PersonalizeRequest {
                unix_nanos: 0,
                ..personalize_request()
            },
            PersonalizeRequest {
                sandbox_id: "x".repeat(129),
                ..personalize_request()
            },
        ];
        for request in bad {
            let err = service
                .personalize(Request::new(request.clone()))
                .await
                .unwrap_err();
            assert_eq!(err.code(), tonic::Code::InvalidArgument, "{request:?}");
        }
    }

    #[tokio::test]
    async fn personalize_leaves_the_host_alone_outside_a_guest() {
        let (tx, _rx) = watch::channel(false);
        let sandbox_id = SandboxId::default();
        let service =
            SystemService::new(ShutdownMode::Stop(tx)).with_sandbox_id(sandbox_id.clone());
        let err = service
            .personalize(Request::new(personalize_request()))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        assert!(err.message().contains("PID 1"), "{}", err.message());
        assert_eq!(sandbox_id.get(), "", "nothing recorded");
    }

    #[tokio::test]
    async fn trust_roots_checks_the_request_then_leaves_the_host_alone() {
        let (tx, _rx) = watch::channel(false);
        let service = SystemService::new(ShutdownMode::Stop(tx));
        let empty = TrustRootsRequest {
            certificates: Vec::new(),
            replace_image_roots: false,
        };
        let err = service.trust_roots(Request::new(empty)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        let junk = TrustRootsRequest {
            certificates: vec![b"-----BEGIN PRIVATE KEY-----".to_vec().into()],
            replace_image_roots: false,
        };
        let err = service.trust_roots(Request::new(junk)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("certificate 1"), "{}", err.message());
        // The shape of a certificate passes the checks; the host's store stays.
        let root = TrustRootsRequest {
            certificates: vec![vec![
                0x30, 0x0d, 0x30, 0x0b, 0x02, 0x01, 0x01, 0x30, 0x00, 0x30, 0x00, 0x30, 0x00, 0x30,
                0x00,
            ]
            .into()],
            replace_image_roots: false,
        };
        let err = service.trust_roots(Request::new(root)).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
        assert!(crate::trust::env().is_empty());
    }
}
