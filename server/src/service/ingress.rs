//! `Ingress`: where a guest port is reached (`GetHost`), the traffic
//! token's rotation, and `Forward`, one raw TCP connection to a guest port
//! carried over the API (what `airlock sandbox port-forward` uses).

use std::pin::Pin;

use airlock::GuestPort;
use airlock_api::reason::{self, invalid};
use airlock_api::v1::ErrorReason;
use airlock_api::v1::{self as api, forward_request, forward_response, ingress_server};
use bytes::Bytes;
use futures::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::Services;
use crate::ingress::token;
use crate::status::error_status;
use crate::validate;

/// Messages toward the client buffered per forwarded connection.
const QUEUE: usize = 8;
/// The most bytes one message to the client carries.
const CHUNK: usize = 64 * 1024;

type Forwarded = Pin<Box<dyn Stream<Item = Result<api::ForwardResponse, Status>> + Send>>;

fn no_ingress() -> Status {
    reason::status(
        ErrorReason::Unsupported,
        "this server serves no HTTP ingress; start it with `airlock serve --ingress HOST:PORT` \
         (a local server started on demand by an older airlock: stop it, and the next command \
         starts one that does)",
    )
}

/// The refusal of a connection to a port where nothing listens.
fn port_closed(id: &str, port: u16, why: &str) -> Status {
    reason::status(
        ErrorReason::PortClosed,
        format!("sandbox {id} port {port}: {why}; start a server on that port in the sandbox"),
    )
}

#[tonic::async_trait]
impl ingress_server::Ingress for Services {
    async fn get_host(
        &self,
        request: Request<api::GetHostRequest>,
    ) -> Result<Response<api::GetHostResponse>, Status> {
        let call = self.call(&request)?;
        let request = request.into_inner();
        validate::sandbox_id("sandbox_id", &request.sandbox_id)?;
        let port = validate::port("port", request.port)?;
        let entry = call.entry("sandbox_id", &request.sandbox_id)?;
        let ingress = self.state.ingress.as_ref().ok_or_else(no_ingress)?;
        let id = &entry.record.id;
        let public = entry.record.public_ports.contains(&port);
        let token = if public {
            String::new()
        } else {
            entry.record.ingress_token.clone()
        };
        Ok(Response::new(api::GetHostResponse {
            host: ingress.host(id, port),
            url: ingress.url(id, port, &token),
            token,
            public,
            path_url: ingress.path_url(id, port),
            address: ingress.address.to_string(),
        }))
    }

    async fn rotate_token(
        &self,
        request: Request<api::RotateTokenRequest>,
    ) -> Result<Response<api::RotateTokenResponse>, Status> {
        let call = self.call(&request)?;
        let request = request.into_inner();
        let entry = call.entry("sandbox_id", &request.sandbox_id)?;
        let token = token::new();
        if token.is_empty() {
            return Err(reason::status(
                ErrorReason::Internal,
                "cannot make a token: /dev/urandom is unreadable",
            ));
        }
        self.state
            .registry
            .set_token(&entry.record.id, token.clone());
        tracing::info!(id = entry.record.id, principal = %call.principal, "traffic token rotated");
        Ok(Response::new(api::RotateTokenResponse { token }))
    }

    type ForwardStream = Forwarded;

    async fn forward(
        &self,
        request: Request<Streaming<api::ForwardRequest>>,
    ) -> Result<Response<Self::ForwardStream>, Status> {
        let call = self.admit(&request)?;
        let mut incoming = request.into_inner();
        let open = match incoming.message().await? {
            Some(api::ForwardRequest {
                event: Some(forward_request::Event::Open(open)),
            }) => open,
            _ => return Err(invalid("open", "a forwarded connection begins with open")),
        };
        let port = validate::port("open.port", open.port)?;
        let (_, handle) = call.sandbox(&open.sandbox_id).await?;
        let guest = match handle.connect_port(port).await {
            Ok(guest) => guest,
            Err(airlock::Error::PortRefused { reason, .. }) => {
                return Err(port_closed(&open.sandbox_id, port, &reason))
            }
            Err(error) => return Err(error_status(&error)),
        };
        tracing::debug!(id = open.sandbox_id, port, principal = %call.principal, "forwarding a connection");
        let (to_client, stream) = mpsc::channel(QUEUE);
        let connected = api::ForwardResponse {
            event: Some(forward_response::Event::Connected(api::ForwardConnected {})),
        };
        let _ = to_client.send(Ok(connected)).await;
        tokio::spawn(async move {
            let _call = call;
            pump(guest, incoming, to_client).await;
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(stream))))
    }
}

/// Carries bytes both ways until both sides have ended.
async fn pump(
    guest: GuestPort,
    mut incoming: Streaming<api::ForwardRequest>,
    to_client: mpsc::Sender<Result<api::ForwardResponse, Status>>,
) {
    let (mut reader, mut writer) = tokio::io::split(guest);
    let upward = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let event = match reader.read(&mut buf).await {
                Ok(0) => forward_response::Event::Eof(true),
                Ok(n) => forward_response::Event::Data(Bytes::copy_from_slice(&buf[..n])),
                Err(error) => {
                    let _ = to_client
                        .send(Err(Status::aborted(error.to_string())))
                        .await;
                    return;
                }
            };
            let eof = matches!(event, forward_response::Event::Eof(_));
            let message = api::ForwardResponse { event: Some(event) };
            if to_client.send(Ok(message)).await.is_err() || eof {
                return;
            }
        }
    };
    // True when the client broke off (the guest's connection is then
    // reset); false after its clean end.
    let downward = async {
        loop {
            match incoming.message().await {
                Ok(Some(message)) => match message.event {
                    Some(forward_request::Event::Data(data)) => {
                        if writer.write_all(&data).await.is_err() {
                            return true;
                        }
                    }
                    Some(forward_request::Event::Eof(_)) => {
                        let _ = writer.shutdown().await;
                    }
                    Some(forward_request::Event::Open(_)) | None => {}
                },
                Ok(None) => {
                    let _ = writer.shutdown().await;
                    return false;
                }
                Err(_) => return true,
            }
        }
    };
    tokio::pin!(upward, downward);
    let (mut up_done, mut down_done) = (false, false);
    while !(up_done && down_done) {
        tokio::select! {
            () = &mut upward, if !up_done => up_done = true,
            aborted = &mut downward, if !down_done => {
                if aborted {
                    break;
                }
                down_done = true;
            }
        }
    }
}
