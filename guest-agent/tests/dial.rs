//! `Network.Dial` without a VM: the agent runs as a host process, so it
//! dials the host's loopback, where the test listens. A port with a
//! listener is carried both ways with half-closes; a closed port is a
//! `refused` naming it; a first message that is not `open` is
//! INVALID_ARGUMENT.

// A test panics with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use airlock_proto::v1::{dial_from_host, dial_to_host, DialFromHost, DialOpen, DialToHost};
use common::Agent;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Streaming};

fn message(event: dial_from_host::Event) -> DialFromHost {
    DialFromHost { event: Some(event) }
}

async fn dial(agent: &Agent, port: u32) -> (mpsc::Sender<DialFromHost>, Streaming<DialToHost>) {
    let (to_agent, requests) = mpsc::channel(8);
    to_agent
        .send(message(dial_from_host::Event::Open(DialOpen { port })))
        .await
        .unwrap();
    let incoming = agent
        .network()
        .dial(ReceiverStream::new(requests))
        .await
        .unwrap()
        .into_inner();
    (to_agent, incoming)
}

#[tokio::test]
async fn a_dialled_port_carries_bytes_both_ways_with_half_closes() {
    let agent = Agent::start().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // The program reads everything to the host's end of file, then answers
    // with what it read, reversed, and closes.
    let program = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        stream.read_to_end(&mut got).await.unwrap();
        got.reverse();
        stream.write_all(&got).await.unwrap();
        stream.shutdown().await.unwrap();
    });
    let (to_agent, mut incoming) = dial(&agent, u32::from(port)).await;
    let first = incoming.message().await.unwrap().unwrap();
    assert!(matches!(
        first.event,
        Some(dial_to_host::Event::Connected(_))
    ));
    let sent: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    for chunk in sent.chunks(10_000) {
        let data = dial_from_host::Event::Data(chunk.to_vec().into());
        to_agent.send(message(data)).await.unwrap();
    }
    to_agent
        .send(message(dial_from_host::Event::Eof(true)))
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut eof = false;
    while let Some(m) = incoming.message().await.unwrap() {
        match m.event {
            Some(dial_to_host::Event::Data(data)) => got.extend_from_slice(&data),
            Some(dial_to_host::Event::Eof(_)) => {
                eof = true;
                // The host ends its side once both are done.
                drop(to_agent);
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(eof, "no end of file from the program");
    let mut want = sent;
    want.reverse();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the bytes came back changed");
    assert!(incoming.message().await.unwrap().is_none());
    program.await.unwrap();
}

#[tokio::test]
async fn a_closed_port_is_refused_naming_it() {
    let agent = Agent::start().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let (_to_agent, mut incoming) = dial(&agent, u32::from(port)).await;
    let first = incoming.message().await.unwrap().unwrap();
    match first.event {
        Some(dial_to_host::Event::Refused(reason)) => {
            assert_eq!(reason, format!("nothing listens on guest port {port}"));
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(incoming.message().await.unwrap().is_none());
}

#[tokio::test]
async fn a_call_without_open_or_with_port_zero_is_invalid() {
    let agent = Agent::start().await;
    for first in [
        dial_from_host::Event::Eof(true),
        dial_from_host::Event::Open(DialOpen { port: 0 }),
        dial_from_host::Event::Open(DialOpen { port: 70_000 }),
    ] {
        let (to_agent, requests) = mpsc::channel(1);
        to_agent.send(message(first)).await.unwrap();
        let status = agent
            .network()
            .dial(ReceiverStream::new(requests))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{status}");
    }
}
