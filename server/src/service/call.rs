//! [`Call`]: the preamble every handler shares, in one place: who calls
//! (the [`Principal`] the listener's layer put on the request), its place
//! among the principal's calls in flight (admission, `RATE_LIMITED` past
//! the limit), and the principal's sandbox the request names
//! (`SANDBOX_NOT_FOUND` for one that does not exist or is another's,
//! `SANDBOX_ENDED` for one that has ended).
//!
//! A handler makes its `Call` first ([`Services::admit`] for the calls
//! counted against the limit, [`Services::call`] for the few that are not),
//! checks the rest of its request, then asks the call for the sandbox
//! (which names it on the call's span, see `trace`). A stream keeps its
//! `Call` until it ends, and with it the call's place.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;
use tonic::{Request, Status};

use airlock::Sandbox;

use super::Services;
use crate::principal::Principal;
use crate::registry::Entry;
use crate::state::State;
use crate::validate;

/// One call of a principal, admitted or not.
#[derive(Debug)]
pub struct Call {
    pub principal: Principal,
    state: Arc<State>,
    /// The call's place among its principal's calls in flight, held until
    /// the call is dropped (`None`: a call that is not counted).
    _place: Option<OwnedSemaphorePermit>,
}

impl Call {
    /// The principal's sandbox `id` with its handle, refusing one that has
    /// ended (one saved to disk is restored).
    pub async fn sandbox(&self, id: &str) -> Result<(Entry, Arc<Sandbox>), Status> {
        crate::trace::record_sandbox(id);
        self.state.live_sandbox(&self.principal, id).await
    }

    /// The principal's sandbox `id` with its handle, whatever its state
    /// (one saved to disk is restored).
    pub async fn any_sandbox(&self, id: &str) -> Result<(Entry, Arc<Sandbox>), Status> {
        crate::trace::record_sandbox(id);
        self.state.sandbox(&self.principal, id).await
    }

    /// The principal's sandbox `id` as the registry lists it, without its
    /// handle (nothing is restored).
    pub fn entry(&self, field: &str, id: &str) -> Result<Entry, Status> {
        validate::sandbox_id(field, id)?;
        crate::trace::record_sandbox(id);
        self.state.registry.get(&self.principal, id)
    }
}

impl Services {
    /// A call of `request`'s principal, counted against its calls in
    /// flight: `RATE_LIMITED` when it has as many as it may.
    pub(crate) fn admit<T>(&self, request: &Request<T>) -> Result<Call, Status> {
        let principal = Principal::of(request)?;
        let place = self.state.admit(&principal)?;
        Ok(Call {
            principal,
            state: Arc::clone(&self.state),
            _place: Some(place),
        })
    }

    /// A call of `request`'s principal that is not counted (reads of the
    /// registry, kills, policy changes: what must get through when the
    /// principal's calls are many).
    pub(crate) fn call<T>(&self, request: &Request<T>) -> Result<Call, Status> {
        Ok(Call {
            principal: Principal::of(request)?,
            state: Arc::clone(&self.state),
            _place: None,
        })
    }
}
