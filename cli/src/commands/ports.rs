//! `airlock sandbox expose` and `airlock sandbox port-forward`: reaching a
//! server a program started in a sandbox. `expose` asks the server for the
//! port's ingress URL (with the sandbox's traffic token) and prints it;
//! `port-forward` listens on a local TCP port and carries each connection
//! to the guest port over the API (`Ingress.Forward`), for protocols that
//! are not HTTP, until interrupted.

use std::net::{Ipv4Addr, SocketAddr};

use airlock_client::api::{self, forward_request, forward_response};
use airlock_client::Client;
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::remote::message;

/// The most bytes one message to the server carries.
const CHUNK: usize = 64 * 1024;

/// `airlock sandbox expose` options.
#[derive(Debug, clap::Args)]
pub struct ExposeArgs {
    /// The sandbox.
    pub id: String,
    /// The guest port a program in it listens on.
    #[arg(value_parser = clap::value_parser!(u16).range(1..))]
    pub port: u16,
    /// Give the sandbox a new traffic token first: every URL printed before
    /// stops working.
    #[arg(long)]
    pub rotate_token: bool,
    /// Print the server's whole answer as JSON (host, url, token, public,
    /// path_url, address).
    #[arg(long)]
    pub json: bool,
}

/// `airlock sandbox port-forward` options.
#[derive(Debug, clap::Args)]
pub struct PortForwardArgs {
    /// The sandbox.
    pub id: String,
    /// `[LOCAL_PORT:]PORT`: listen on LOCAL_PORT (default PORT; 0 for any
    /// free port) and carry each connection to PORT in the sandbox.
    #[arg(value_name = "[LOCAL_PORT:]PORT", value_parser = parse_ports)]
    pub ports: (u16, u16),
    /// The local address to listen on.
    #[arg(long, default_value_t = Ipv4Addr::LOCALHOST)]
    pub address: Ipv4Addr,
}

/// `[LOCAL:]REMOTE` as (local, remote).
fn parse_ports(text: &str) -> Result<(u16, u16), String> {
    let port = |t: &str| t.parse::<u16>().map_err(|_| format!("{t:?} is not a port"));
    let (local, remote) = match text.split_once(':') {
        Some((local, remote)) => (port(local)?, port(remote)?),
        None => {
            let p = port(text)?;
            (p, p)
        }
    };
    if remote == 0 {
        return Err("the sandbox's port cannot be 0".to_owned());
    }
    Ok((local, remote))
}

/// Prints the URL of a guest port.
pub async fn expose(client: &Client, args: ExposeArgs) -> Result<(), String> {
    if args.rotate_token {
        client
            .ingress()
            .rotate_token(api::RotateTokenRequest {
                sandbox_id: args.id.clone(),
            })
            .await
            .map_err(|status| message(status.into()))?;
    }
    let host = client
        .ingress()
        .get_host(api::GetHostRequest {
            sandbox_id: args.id,
            port: u32::from(args.port),
        })
        .await
        .map_err(|status| message(status.into()))?
        .into_inner();
    if args.json {
        let json = serde_json::json!({
            "host": host.host,
            "url": host.url,
            "token": host.token,
            "public": host.public,
            "path_url": host.path_url,
            "address": host.address,
        });
        println!("{json}");
    } else {
        println!("{}", host.url);
    }
    Ok(())
}

/// Forwards connections until interrupted.
pub async fn port_forward(client: &Client, args: PortForwardArgs) -> Result<(), String> {
    let (local, remote) = args.ports;
    let addr = SocketAddr::from((args.address, local));
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!(
        "forwarding {bound} -> {}:{remote} (Ctrl-C to stop)",
        args.id
    );
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                eprintln!("airlock: accepting a connection: {error}");
                continue;
            }
        };
        let (client, id) = (client.clone(), args.id.clone());
        tokio::spawn(async move {
            if let Err(error) = forward_one(&client, &id, remote, stream).await {
                eprintln!("airlock: connection from {peer}: {error}");
            }
        });
    }
}

fn request(event: forward_request::Event) -> api::ForwardRequest {
    api::ForwardRequest { event: Some(event) }
}

/// Carries one local connection to the guest port and back.
async fn forward_one(
    client: &Client,
    id: &str,
    port: u16,
    stream: TcpStream,
) -> Result<(), String> {
    let (to_server, requests) = mpsc::channel(8);
    let open = forward_request::Event::Open(api::ForwardOpen {
        sandbox_id: id.to_owned(),
        port: u32::from(port),
    });
    to_server
        .send(request(open))
        .await
        .map_err(|_| "the call ended".to_owned())?;
    let mut incoming = client
        .ingress()
        .forward(ReceiverStream::new(requests))
        .await
        .map_err(|status| message(status.into()))?
        .into_inner();
    match incoming.message().await {
        Ok(Some(api::ForwardResponse {
            event: Some(forward_response::Event::Connected(_)),
        })) => {}
        Ok(_) => return Err("the server did not connect".to_owned()),
        Err(status) => return Err(message(status.into())),
    }
    let (mut reader, mut writer) = stream.into_split();
    let upward = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => {
                    let _ = to_server
                        .send(request(forward_request::Event::Eof(true)))
                        .await;
                    return;
                }
                Ok(n) => {
                    let data = forward_request::Event::Data(Bytes::copy_from_slice(&buf[..n]));
                    if to_server.send(request(data)).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let downward = async {
        loop {
            match incoming.message().await {
                Ok(Some(api::ForwardResponse {
                    event: Some(forward_response::Event::Data(data)),
                })) => {
                    if writer.write_all(&data).await.is_err() {
                        return;
                    }
                }
                Ok(Some(api::ForwardResponse {
                    event: Some(forward_response::Event::Eof(_)),
                }))
                | Ok(None)
                | Err(_) => {
                    let _ = writer.shutdown().await;
                    return;
                }
                Ok(Some(_)) => {}
            }
        }
    };
    tokio::join!(upward, downward);
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_local_colon_remote_or_one_for_both() {
        assert_eq!(parse_ports("8000").unwrap(), (8000, 8000));
        assert_eq!(parse_ports("0:5432").unwrap(), (0, 5432));
        assert_eq!(parse_ports("15432:5432").unwrap(), (15432, 5432));
        assert!(parse_ports("5432:0").is_err());
        assert!(parse_ports("x:1").is_err());
        assert!(parse_ports("70000").is_err());
    }
}
