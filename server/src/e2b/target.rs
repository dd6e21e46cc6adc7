//! [`SandboxCall`]: a request the router sent to one port of one sandbox,
//! with who it acts as.
//!
//! The front's sandbox requests (envd, the code interpreter) are
//! authenticated by the sandbox's access token (`auth`), not by an API
//! key: they then act as the sandbox's owner, and go through the same
//! services, with the same checks, as that owner's own calls.

use std::sync::Arc;

use crate::principal::Principal;
use crate::service::Services;

use super::Front;

/// One request to a sandbox's port.
#[derive(Debug, Clone)]
pub(crate) struct SandboxCall {
    pub front: Arc<Front>,
    /// The sandbox's id, as its record has it.
    pub id: String,
    /// Who the call acts as: the sandbox's owner.
    pub principal: Principal,
}

impl SandboxCall {
    /// The server's services.
    pub fn services(&self) -> &Services {
        &self.front.services
    }

    /// `message` as a request of this call's principal, for a service of
    /// `airlock.api.v1` called in process.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        as_principal(&self.principal, message)
    }
}

/// `message` as a request of `principal`, for a service called in process.
pub(crate) fn as_principal<T>(principal: &Principal, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.extensions_mut().insert(principal.clone());
    request
}
