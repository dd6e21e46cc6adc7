//! Process stdin: SendInput, StreamInput and CloseStdin.

#![allow(clippy::unwrap_used)]

mod common;

use airlock_proto::v1::exited::Status as ExitStatus;
use airlock_proto::v1::{process_event, CloseStdinRequest, SendInputRequest, StreamInputRequest};
use common::{by_pid, collect_after_started, piped, request, started_pid, Agent};
use tonic::Code;

#[tokio::test]
async fn cat_echoes_input_and_ends_when_stdin_closes() {
    let agent = Agent::start().await;
    let mut stream = agent
        .process()
        .start(piped(&["cat"]))
        .await
        .unwrap()
        .into_inner();
    let pid = started_pid(&mut stream).await;
    let mut client = agent.process();
    for part in ["hello ", "over ", "stdin\n"] {
        client
            .send_input(SendInputRequest {
                process: by_pid(pid),
                data: part.as_bytes().to_vec().into(),
            })
            .await
            .unwrap();
    }
    client
        .close_stdin(CloseStdinRequest {
            process: by_pid(pid),
        })
        .await
        .unwrap();
    // Closing twice is not an error.
    client
        .close_stdin(CloseStdinRequest {
            process: by_pid(pid),
        })
        .await
        .unwrap();
    let out = collect_after_started(stream).await;
    assert_eq!(out.stdout_text(), "hello over stdin\n");
    assert_eq!(out.exit, ExitStatus::Code(0));
}

#[tokio::test]
async fn binary_input_round_trips_exactly_through_a_stream() {
    let agent = Agent::start().await;
    let mut stream = agent
        .process()
        .start(piped(&["cat"]))
        .await
        .unwrap()
        .into_inner();
    let pid = started_pid(&mut stream).await;
    // Every byte value, many times over, in uneven pieces: more than a pipe
    // holds, so the writes must wait for cat (and cat for us).
    let data: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let pieces: Vec<StreamInputRequest> = data
        .chunks(33_333)
        .enumerate()
        .map(|(i, chunk)| StreamInputRequest {
            process: if i == 0 { by_pid(pid) } else { None },
            data: chunk.to_vec().into(),
        })
        .collect();
    let mut client = agent.process();
    let reader = tokio::spawn(collect_after_started(stream));
    client
        .stream_input(futures::stream::iter(pieces))
        .await
        .unwrap();
    client
        .close_stdin(CloseStdinRequest {
            process: by_pid(pid),
        })
        .await
        .unwrap();
    let out = reader.await.unwrap();
    assert_eq!(out.stdout.len(), data.len());
    assert!(out.stdout == data, "bytes changed on the way");
    assert_eq!(out.exit, ExitStatus::Code(0));
}

#[tokio::test]
async fn input_errors_are_precise() {
    let agent = Agent::start().await;
    let mut client = agent.process();

    // stdin not piped.
    let out = agent.run(request(&["true"])).await.unwrap();
    let err = client
        .send_input(SendInputRequest {
            process: by_pid(out.pid),
            data: b"x".to_vec().into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("not a pipe"), "{}", err.message());

    // The process has exited.
    let out = agent.run(piped(&["true"])).await.unwrap();
    let err = client
        .send_input(SendInputRequest {
            process: by_pid(out.pid),
            data: b"x".to_vec().into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("exited"), "{}", err.message());

    // No such process, no selector.
    let err = client
        .send_input(SendInputRequest {
            process: by_pid(999_999_999),
            data: b"x".to_vec().into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound, "{err:?}");
    let err = client
        .close_stdin(CloseStdinRequest { process: None })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    // Input after CloseStdin.
    let mut stream = agent
        .process()
        .start(piped(&["sh", "-c", "exec 0<&-; sleep 0.5"]))
        .await
        .unwrap()
        .into_inner();
    let pid = started_pid(&mut stream).await;
    client
        .close_stdin(CloseStdinRequest {
            process: by_pid(pid),
        })
        .await
        .unwrap();
    let err = client
        .send_input(SendInputRequest {
            process: by_pid(pid),
            data: b"x".to_vec().into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(err.message().contains("closed"), "{}", err.message());
    let out = collect_after_started(stream).await;
    assert_eq!(out.exit, ExitStatus::Code(0));
}

#[tokio::test]
async fn a_program_that_stops_reading_fails_the_write() {
    let agent = Agent::start().await;
    let mut stream = agent
        .process()
        .start(piped(&["sh", "-c", "exec 0<&-; echo closed; sleep 5"]))
        .await
        .unwrap()
        .into_inner();
    let pid = started_pid(&mut stream).await;
    let first = stream.message().await.unwrap().unwrap();
    assert!(matches!(first.event, Some(process_event::Event::Stdout(_))));
    let err = agent
        .process()
        .send_input(SendInputRequest {
            process: by_pid(pid),
            data: b"x".to_vec().into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{err:?}");
    assert!(
        err.message().contains("no longer reads"),
        "{}",
        err.message()
    );
}
