//! What the gateway keeps of a refusal until it is recorded, and how a
//! refusal is answered where the protocol has a way: [`answer`] writes the
//! HTTP response that says why ([`told`]), and
//! [`Gateway::refuse_direct`] gives a direct connection refused before its
//! first bytes that answer when those bytes are an HTTP request.

use std::net::{IpAddr, SocketAddr};

use http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::{Gateway, FIRST_BYTE_WAIT};
use crate::audit::{Protocol, Refusal};
use crate::proxy::Target;
use crate::sniff::{read_head, Head};
use crate::told::{self, Tell, Told};

/// A decision against a connection: what to record, and how the program
/// learnt of it.
#[derive(Debug)]
pub(super) struct Refused {
    pub(super) protocol: Protocol,
    pub(super) name: Option<String>,
    pub(super) addr: Option<IpAddr>,
    pub(super) port: u16,
    pub(super) refusal: Refusal,
    /// The status the program was answered with; `None`: its connection
    /// is reset.
    pub(super) answered: Option<StatusCode>,
}

impl Refused {
    pub(super) fn new(
        protocol: Protocol,
        target: &Target,
        addr: Option<IpAddr>,
        refusal: Refusal,
    ) -> Self {
        Self {
            protocol,
            name: target.name(),
            addr: addr.or(target.addr()),
            port: target.port(),
            refusal,
            answered: None,
        }
    }

    /// The destination as the program asked for it.
    pub(super) fn destination(&self) -> String {
        match (&self.name, self.addr) {
            (Some(name), _) => format!("{name}:{}", self.port),
            (None, Some(addr)) => SocketAddr::new(addr, self.port).to_string(),
            (None, None) => format!("port {}", self.port),
        }
    }
}

/// A connection the policy allowed: where to, the address the host dials,
/// and how it came (directly or through the proxy).
#[derive(Debug)]
pub(super) struct Admitted {
    pub(super) target: Target,
    pub(super) addr: IpAddr,
    pub(super) via: Protocol,
}

impl Admitted {
    pub(super) fn upstream_addr(&self) -> SocketAddr {
        SocketAddr::new(self.addr, self.target.port())
    }

    pub(super) fn refused(&self, protocol: Protocol, refusal: Refusal) -> Refused {
        Refused::new(protocol, &self.target, Some(self.addr), refusal)
    }
}

impl Gateway {
    /// A direct connection refused before its first bytes: a plain HTTP
    /// request is answered with the refusal, anything else reset.
    pub(super) async fn refuse_direct<S>(
        &self,
        mut guest: S,
        refused: Refused,
        tell: &Tell,
    ) -> Refused
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let mut head = Vec::new();
        let sniffed = read_head(
            &mut guest,
            &mut head,
            FIRST_BYTE_WAIT,
            self.options.head_timeout,
        )
        .await;
        match sniffed {
            Ok(Head::Http { method, .. }) => {
                answer(
                    &mut guest,
                    refused,
                    method.eq_ignore_ascii_case("HEAD"),
                    tell,
                )
                .await
            }
            _ => refused,
        }
    }
}

/// Answers a refused HTTP request with a response that says why
/// ([`told::http_answer`]) and ends the guest's side cleanly, so that the
/// program reads the answer rather than a reset. The agent is told first,
/// so that the refusal log has the line before the program has its answer.
pub(super) async fn answer<S>(
    guest: &mut S,
    mut refused: Refused,
    head_request: bool,
    tell: &Tell,
) -> Refused
where
    S: AsyncWrite + Unpin,
{
    let status = told::status(&refused.refusal);
    let reason = told::sentence(&refused.refusal, &refused.destination());
    let response = told::http_answer(status, &reason, head_request);
    tell(Told::http(status, reason));
    let written = async {
        guest.write_all(&response).await?;
        guest.shutdown().await
    };
    match written.await {
        Ok(()) => refused.answered = Some(status),
        Err(error) => tracing::debug!(%error, "answering a refusal"),
    }
    refused
}
